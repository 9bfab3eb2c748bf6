# Copyright 2026 The lingbot_ros Authors
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

"""
``lingbot-ros-demo``: the main job in one command.

Starts ``lingbot_node`` and ``lingbot-ros-play`` (the built-in procedurally rendered
room, with known camera motion) as separate processes talking over DDS on this
machine, prints every pose and a diagnostics summary as they arrive, and exits 0 once
``--frames`` poses came back. Without ``--checkpoint`` the node runs the tiny
random-weight model: the plumbing is real, the poses are not.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import time
from typing import Optional

BANNER = """
========================================================================
  NO CHECKPOINT GIVEN: the node runs the TINY RANDOM-WEIGHT model.
  Everything below is real ROS 2 plumbing (DDS, lifecycle, diagnostics),
  but the poses are meaningless. Pass --checkpoint <LingBot-Map .pt> for
  real reconstruction.
========================================================================
"""
TOPIC = '/lingbot_demo/image'
NODE = 'lingbot_node'
DEMO_DOMAIN = 47  # a fixed, uncommon domain: the demo never joins a robot's default one


def _executable(name: str, module: str) -> list:
    here = Path(sys.executable).with_name(name)
    if here.exists():
        return [str(here)]
    found = shutil.which(name)
    return [found] if found else [sys.executable, '-m', module]


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog='lingbot-ros-demo', description=__doc__.split('\n\n')[0])
    p.add_argument('--frames', type=int, default=24, help='frames to stream (default 24)')
    p.add_argument('--rate', type=float, default=4.0, help='frames per second (default 4)')
    p.add_argument('--checkpoint', default='', help='LingBot-Map weights (.pt/.safetensors)')
    p.add_argument('--image-size', type=int, default=0,
                   help='model input width (default: 518 on CUDA, 112 on CPU)')
    p.add_argument('--scale-frames', type=int, default=4, help='scale frames (default 4)')
    p.add_argument('--device', default='auto', help="'auto', 'cpu' or 'cuda[:N]'")
    p.add_argument('--timeout', type=float, default=300.0, help='give up after (s)')
    args = p.parse_args(argv)
    if args.frames < args.scale_frames:
        p.error(f'--frames={args.frames} is invalid: expected >= --scale-frames '
                f'({args.scale_frames})')
    return args


def _accounted(array) -> Optional[tuple]:
    """Return (frames sent as the node counts them, processed) once each has an outcome."""
    from lingbot_ros.ros.probe import status_of
    for status in array.status:
        if status.name.endswith(': node'):
            continue
        _, _, v = status_of(array, status.name)
        try:
            received, processed = int(v['frames_received']), int(v['frames_processed'])
            settled = processed + int(v['frames_dropped']) + int(v['frames_rejected'])
            lost = int(v.get('frames_lost_before_node', 0))  # sent, never reached the node
        except (KeyError, ValueError):
            return None
        return (received + lost, processed) if settled == received else None
    return None


def _summary(array) -> list:
    from lingbot_ros.ros.probe import status_of
    lines = []
    names = ['OK', 'WARN', 'ERROR', 'STALE']
    for status in array.status:
        level, message, v = status_of(array, status.name)
        if status.name.endswith(': node'):
            lines.append(f'  [{names[level]}] node: {message} | model {v.get("model")} on '
                         f'{v.get("device")} ({v.get("dtype")}, {v.get("attention_backend")})'
                         f' | missing: {v.get("missing_optional")}')
        else:
            lines.append(
                f'  [{names[level]}] {status.name.split(": ")[1]}: {message} | received '
                f'{v.get("frames_received")} processed {v.get("frames_processed")} dropped '
                f'{v.get("frames_dropped")} rejected {v.get("frames_rejected")} | keyframes '
                f'{v.get("keyframes")} window {v.get("window_index")} | KV '
                f'{v.get("kv_used_mb")}/{v.get("kv_reserved_mb")} MB | step p50 '
                f'{v.get("step_ms_p50")} ms, latency p50/p99 {v.get("latency_ms_p50")}/'
                f'{v.get("latency_ms_p99")} ms')
    return lines


def main(argv: Optional[list] = None) -> int:
    """Run node + player, print what comes back, exit 0 after ``--frames`` poses."""
    args = parse_args(argv)
    # The demo's DDS traffic stays on this machine, in its own domain unless one is set.
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    os.environ.setdefault('ROS_DOMAIN_ID', str(DEMO_DOMAIN))
    import torch
    size = args.image_size or (518 if torch.cuda.is_available() and args.device != 'cpu'
                               else 112)
    if not args.checkpoint:
        print(BANNER, flush=True)
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped
    from lingbot_ros.ros.probe import Probe
    node_cmd = _executable('lingbot_node', 'lingbot_ros.ros.cli') + [
        '--ros-args', '-r', f'__node:={NODE}',
        '-p', f"camera_topics:=['{TOPIC}']", '-p', f'scale_frames:={args.scale_frames}',
        '-p', f'image_size:={size}', '-p', 'qos_reliability:=reliable',
        '-p', 'queue_size:=32', '-p', f'device:={args.device}', '-p', 'publish_points:=true']
    if args.checkpoint:
        node_cmd += ['-p', f'checkpoint:={args.checkpoint}']
    play_cmd = _executable('lingbot-ros-play', 'lingbot_ros.tools.play') + [
        'scene', '--topic', TOPIC, '--rate', str(args.rate), '--count', str(args.frames),
        '--wait', '120', '--quiet', '--frame-id', 'demo_camera_optical_frame']
    probe = Probe('lingbot_demo_monitor')
    poses = probe.collect(PoseStamped, f'/{NODE}/pose')
    diags = probe.collect(DiagnosticArray, '/diagnostics')
    procs = []
    rc = 1
    try:
        print('starting:', ' '.join(node_cmd), flush=True)
        procs.append(subprocess.Popen(node_cmd, start_new_session=True))
        # Poses published before our subscription has matched the node's publisher would
        # be lost (volatile QoS): start the player only once it has.
        if not probe.wait_for_publishers(f'/{NODE}/pose', 1, args.timeout):
            print(f'lingbot_node published no /{NODE}/pose within {args.timeout:.0f} s',
                  file=sys.stderr)
        print('starting:', ' '.join(play_cmd), flush=True)
        procs.append(subprocess.Popen(play_cmd, start_new_session=True))
        shown, seen_diag, deadline = 0, 0, time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            probe.spin_for(0.1)
            for msg in poses[shown:]:
                p, q = msg.pose.position, msg.pose.orientation
                stamp = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                shown += 1
                print(f'pose {shown:3d}/{args.frames}  stamp {stamp:.3f}  {msg.header.frame_id}'
                      f'  xyz ({p.x:+.3f}, {p.y:+.3f}, {p.z:+.3f})'
                      f'  q ({q.x:+.3f}, {q.y:+.3f}, {q.z:+.3f}, {q.w:+.3f})', flush=True)
            if len(diags) > seen_diag and time.monotonic() > getattr(main, '_next', 0):
                seen_diag = len(diags)
                main._next = time.monotonic() + 3.0
                print('diagnostics:\n' + '\n'.join(_summary(diags[-1])), flush=True)
            if shown >= args.frames:
                rc = 0
                break
            settled = _accounted(diags[-1]) if diags else None
            if settled is not None and settled[0] >= args.frames and shown >= settled[1] > 0:
                # Every frame sent is processed, dropped or rejected, and we saw every pose.
                print(f'{args.frames - shown} frame(s) lost, dropped or rejected by the node (see '
                      'diagnostics); every frame is accounted for', flush=True)
                rc = 0
                break
            if procs[0].poll() is not None:
                print(f'lingbot_node exited with {procs[0].returncode}', file=sys.stderr)
                break
        else:
            print(f'timed out after {args.timeout:.0f} s with {shown} of {args.frames} poses',
                  file=sys.stderr)
        probe.spin_for(1.2)
        if diags:
            print('final diagnostics:\n' + '\n'.join(_summary(diags[-1])), flush=True)
        print(('done: ' if rc == 0 else 'FAILED: ') + f'{shown} poses for {args.frames} frames'
              + ('' if args.checkpoint else ' (tiny random-weight model)'), flush=True)
        return rc
    except KeyboardInterrupt:
        return 130
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        probe.close()


if __name__ == '__main__':
    sys.exit(main())
