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

r"""
The floor of the ROS overhead: a frame's messages sent at once for each image, no model at all.

The node's ROS overhead is the image stamp to the frame's last message, less the model.
Part of that is no node's to cut: DDS carrying the image in, rclpy handing it to a
callback, and building and sending the frame's messages (a 640x480 float depth image of
1.2 MB among them) to subscribers in other processes. This measures that part alone, on the
machine it runs on, with the live benchmark's own processes around it (``live_node.py``):
the same ``lingbot-ros-play`` camera, the same counter (image, ``pose`` and ``points`` by
stamp) and the same viewer process reading depth and ``camera_info`` like an RViz.

In place of the node, a relay process of its own takes each image (subscribed raw and read
in place, in the spinning thread, as the node's intake does) and at once, in that same
callback, sends the node's per-frame outputs with its publishers' QoS, built by the node's
own message functions from arrays made once: pose, odometry, TF (where tf2_ros is
installed), camera_info, depth on the image's pixels and ``--points`` rows of points. What
it leaves out is the node's own work: conversion, the queue, the threads, prepare, the
model, the products. So the node's overhead less this floor is what the node itself costs.

The relay writes, per frame, when its callback began and when its last message was sent
(same clock: one machine). The report gives per block, p50 / p99: stamp to the relay's
callback (the node's ``arrival`` floor), the relay's sends, stamp to the counter's pose
and to its last message (``points``): the floor of ``last less model``. With ``--threads``
the image goes the node's way instead, without the model: the callback queues it on the
node's ``FrameQueue``, a worker thread takes it and hands the sending to the node's
``OutputThread``; the difference is what the two hand-overs cost.

    python benchmarks/ros_floor.py --rate 15 --frames 450 --out /tmp/ros_floor_15hz
"""

from __future__ import annotations

import argparse
from dataclasses import replace
import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import live_node  # noqa: E402,I100 (the counter, viewer and player of the live benchmark)

NODE = live_node.NODE  # the relay takes the node's name, so its topics are the node's


def relay(args: argparse.Namespace) -> int:
    """Run the relay until SIGINT; then write per-frame times to ``args.log`` (JSON)."""
    from lingbot_ros.ros.dds import use_large_image_profile
    use_large_image_profile()  # the node's own transport settings, before rclpy starts
    import rclpy
    from lingbot_ros.ros import messages
    from lingbot_ros.ros.executor import PoolExecutor
    from lingbot_ros.ros.intake import read_image
    from lingbot_ros.ros.output_thread import OutputThread
    from lingbot_ros.ros.outputs import CameraPublishers
    from lingbot_ros.ros.worker import Frame, FrameQueue
    from lingbot_ros.streaming.result import FrameResult, FrameType
    from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    try:
        from tf2_ros import TransformBroadcaster
    except ImportError:
        TransformBroadcaster = None

    rclpy.init(args=['ros_floor_relay'])
    node = rclpy.create_node(NODE)
    pubs = CameraPublishers(node, '~/')
    tf = TransformBroadcaster(node) if TransformBroadcaster is not None else None
    w, h = (int(v) for v in args.size.split('x'))
    rng = np.random.default_rng(0)
    k = np.array([[0.8 * w, 0.0, w / 2], [0.0, 0.8 * w, h / 2], [0.0, 0.0, 1.0]])
    rows = rng.normal(size=(args.points, 4)).astype(np.float32)
    template = FrameResult(
        stamp_ns=0, index=0, frame_type=FrameType.KEYFRAME, pose_c2w=np.eye(4),
        pose_enc=np.zeros(9, np.float32), intrinsics=k, intrinsics_model=k, input_hw=(h, w),
        model_hw=(h, w), depth=np.ones((h, w), np.float32),
        depth_input=rng.uniform(1.0, 5.0, (h, w)).astype(np.float32), points_rows=rows)
    with_depth = not args.no_depth
    times: dict = {}  # stamp -> (callback began, last message sent), time.time_ns()
    previous: list = []

    def send(stamp: int, frame: str, began: int) -> None:
        pose = np.eye(4)
        pose[:3, 3] = (stamp % 10**9) * 1e-9, 0.0, 0.0
        result = replace(template, stamp_ns=stamp, pose_c2w=pose)
        pose_msg = messages.pose_stamped(pose, stamp, 'map')
        pubs.pose.publish(pose_msg)
        pubs.odom.publish(messages.odometry(pose, stamp, 'map', frame + '_lingbot',
                                            previous[-1] if previous else None,
                                            pose=pose_msg.pose))
        previous[:] = [(stamp, pose)]
        if tf is not None:
            tf.sendTransform(messages.transform(pose, stamp, 'map', frame + '_lingbot',
                                                pose=pose_msg.pose))
        pubs.camera_info.publish(messages.camera_info(result, frame))
        if with_depth:
            pubs.depth.publish(messages.depth_image(result, frame))
        pubs.points.publish(messages.point_cloud(result, pose, 'map', 1, 0.0, 0.0))
        times[stamp] = (began, time.time_ns())

    queue = FrameQueue(1, 1)
    began_at: dict = {}  # stamp -> when its callback began (threads mode)
    outputs = OutputThread(lambda exc: print(f'relay: {exc!r}', file=sys.stderr))
    stop = threading.Event()

    def on_image(sample: Any) -> None:
        began = time.time_ns()
        msg = read_image(sample)
        stamp = messages.stamp_ns(msg.header.stamp)
        frame = msg.header.frame_id or 'camera_optical_frame'
        if not args.threads:
            send(stamp, frame, began)
            return
        began_at[stamp] = began
        queue.put(Frame(0, np.frombuffer(msg.data, np.uint8), stamp, time.monotonic(), frame))
        queue.hand_over()

    def work() -> None:  # the node's worker, with no model: straight to the output thread
        while not stop.is_set():
            got = queue.get(0.1)
            if got is not None:
                began = began_at.pop(got.stamp_ns)
                outputs.submit(lambda f=got, b=began: send(f.stamp_ns, f.frame_id, b))

    group = MutuallyExclusiveCallbackGroup()
    qos = QoSProfile(depth=5, history=HistoryPolicy.KEEP_LAST,
                     reliability=ReliabilityPolicy.BEST_EFFORT)
    node.create_subscription(Image, args.topic, on_image, qos, callback_group=group, raw=True)
    executor = PoolExecutor(2, inline=(group,))
    executor.add_node(node)
    worker = threading.Thread(target=work, daemon=True)
    if args.threads:
        outputs.start()
        worker.start()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set() and rclpy.ok():
        executor.spin_once(timeout_sec=0.1)
    if args.threads:
        worker.join(1.0)
        outputs.stop(2.0)
    Path(args.log).write_text(json.dumps({str(s): t for s, t in times.items()}))
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def _ms(values: list) -> dict:
    return {'p50': live_node._pct(values, 50), 'p99': live_node._pct(values, 99)}


def blocks(rec: Any, relayed: dict, warmup: int, block: int) -> list:
    """Per block of the counter's stamps after the warm-up: the floor's latencies, ms."""
    out = []
    for first, part in live_node.stamp_blocks(rec.stamps, warmup, block):
        got = [s for s in part if s in relayed]
        out.append({
            'first_frame': first, 'frames': len(part), 'relayed': len(got),
            'relay_arrival_ms': _ms([(relayed[s][0] - s) / 1e6 for s in got]),
            'relay_send_ms': _ms([(relayed[s][1] - relayed[s][0]) / 1e6 for s in got]),
            'pose_ms': _ms([(rec.pose_at[s] - s) / 1e6 for s in part if s in rec.pose_at]),
            'last_ms': _ms([(rec.last_at[s] - s) / 1e6 for s in part if s in rec.last_at]),
            'counter_arrival_ms': _ms([(rec.image_at[s] - s) / 1e6 for s in part
                                      if s in rec.image_at]),
        })
    return out


def _wait_matched(counter: Any, timeout: float) -> None:
    """Wait until the relay's pose and points publishers are seen by the counter."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        node = counter.node
        if node.count_publishers(f'/{NODE}/pose') and node.count_publishers(f'/{NODE}/points'):
            return
        time.sleep(0.1)
    raise SystemExit(f'the relay did not come up within {timeout:.0f} s')


def run(args: argparse.Namespace) -> dict:
    """Start relay, counter, viewer and player; collect; stop everything; return the report."""
    topic = '/live/camera/image_raw'
    rec = live_node.CameraRecord('camera', topic)
    counter = live_node.Counter([rec], False, 'points')
    log = Path(args.out + '.relay.json')
    relay_proc = subprocess.Popen(
        [sys.executable, __file__, '--relay', '--topic', topic, '--size', args.size,
         '--points', str(args.points), '--log', str(log)]
        + (['--no-depth'] if args.no_depth else []) + (['--threads'] if args.threads else []),
        start_new_session=True)
    viewer = player = None
    try:
        _wait_matched(counter, 60.0)
        viewer = subprocess.Popen([sys.executable, live_node.__file__, '--viewer', f'/{NODE}/'],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        play_args = argparse.Namespace(source=args.source, rate=args.rate, frames=args.frames,
                                       size=args.size)
        player = subprocess.Popen(live_node._player_cmd(play_args, topic),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        player.wait(timeout=args.frames / args.rate + 90.0)
        time.sleep(2.0)  # the last frames' messages
    finally:
        if player is not None and player.poll() is None:
            player.send_signal(signal.SIGINT)
        if relay_proc.poll() is None:
            os.killpg(relay_proc.pid, signal.SIGINT)
            try:
                relay_proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(relay_proc.pid, signal.SIGKILL)
        counter.close()
        viewed = live_node._stop_viewer(viewer)
    relayed = {int(s): t for s, t in json.loads(log.read_text()).items()} \
        if log.exists() else {}
    log.unlink(missing_ok=True)
    return {'command': ' '.join(sys.argv), 'date': time.strftime('%Y-%m-%d %H:%M:%S %Z'),
            'rate_hz': args.rate, 'frames': args.frames, 'size': args.size,
            'points': args.points, 'depth': not args.no_depth, 'threads': args.threads,
            'warmup': args.warmup,
            'counter_saw': len(rec.stamps), 'relayed': len(relayed), 'viewer': viewed,
            'blocks': blocks(rec, relayed, args.warmup, args.block)}


def text_report(report: dict) -> str:
    """Return the table a person reads: one line per block, p50 / p99 in ms."""
    f = live_node._fmt
    how = "through the node's threads" if report.get('threads') else 'sent in the callback'
    out = [f"{report['date']}  the ROS floor: {report['rate_hz']:g} Hz, {report['frames']} "
           f"frames of {report['size']}, {report['points']} points a frame, "
           f"{'with' if report['depth'] else 'no'} depth image, {how}; counter saw "
           f"{report['counter_saw']}, relay took {report['relayed']}",
           'viewer beside (an RViz): ' + ', '.join(
               f'{t} {n}' for t, n in (report['viewer'] or {}).items()),
           '  frames      n  relayed  relay arrival  relay sends  stamp->pose  '
           'stamp->last (floor)  counter arrival']
    for b in report['blocks']:
        def pair(key: str) -> str:
            return f"{f(b[key]['p50'])}/{f(b[key]['p99'])}"
        out.append(f"  {b['first_frame']:>6} {b['frames']:>6} {b['relayed']:>8}  "
                   f"{pair('relay_arrival_ms'):>13}  {pair('relay_send_ms'):>11}  "
                   f"{pair('pose_ms'):>11}  {pair('last_ms'):>19}  "
                   f"{pair('counter_arrival_ms'):>15}")
    return '\n'.join(out)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    """Read the command line (the relay's own flags are hidden)."""
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--source', default=str(live_node.DEFAULT_SOURCE),
                   help='what lingbot-ros-play plays')
    p.add_argument('--size', default='640x480', help='frame size WIDTHxHEIGHT')
    p.add_argument('--rate', type=float, default=15.0, help='frames per second')
    p.add_argument('--frames', type=int, default=450)
    p.add_argument('--warmup', type=int, default=50, help='frames left out of the blocks')
    p.add_argument('--block', type=int, default=200, help='frames per block')
    p.add_argument('--points', type=int, default=6400,
                   help="rows of ~/points a frame (the release model's 392x518 grid, every "
                        '4th pixel, the upper half by confidence: about 6,400)')
    p.add_argument('--threads', action='store_true',
                   help="the node's thread structure: the callback queues the image (its "
                        'FrameQueue), a worker thread takes it and hands it to its '
                        'OutputThread, which sends (no model): what the threads cost')
    p.add_argument('--no-depth', action='store_true',
                   help='send no depth image (what the 1.2 MB image costs the floor)')
    p.add_argument('--out', help='PREFIX: writes PREFIX.json and PREFIX.txt')
    p.add_argument('--relay', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--topic', help=argparse.SUPPRESS)
    p.add_argument('--log', help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if not args.relay and not args.out:
        p.error('--out is required')
    return args


def main(argv: Optional[list] = None) -> int:
    """Measure and write the report; or, with ``--relay``, be the relay."""
    args = parse_args(argv)
    if args.relay:
        return relay(args)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    live_node.write_report(args.out, run(args), text_report)
    return 0


if __name__ == '__main__':
    sys.exit(main())
