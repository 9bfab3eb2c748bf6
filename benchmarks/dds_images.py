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
What DDS itself delivers: camera-sized images from one process to another, no node at all.

``lingbot-ros-play`` publishes ``--frames`` images at ``--rate`` (best effort, depth 5, as a
camera driver does); this process counts what arrives with a best-effort depth-5 reader
whose callback only notes the time (image stamp to callback: the floor of the node's
``arrival`` stage, with rclpy's own single-threaded executor). Each ``--transport`` runs
the pair with that Fast DDS setting in both processes' environment: ``default`` (shared
memory with its 512 KB segment, then UDP), ``large_data``
(``FASTDDS_BUILTIN_TRANSPORTS=LARGE_DATA``), ``package`` (the profile the node uses by
itself) or a profile file given as ``xml:PATH``. Prints one line
per setting: sent, received, the share, stamp-to-callback p50 / p99 (after the first
second). Numbers only; it asserts nothing.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
import subprocess
import sys
import time
from typing import Optional

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / 'lingbot_ros' / 'data' / 'fastdds_large_images.xml'


def transport_env(setting: str) -> dict:
    """Return the environment changes one ``--transport`` value stands for."""
    # DEFAULT spelled out: without any setting the player would take the package's profile
    env = {'FASTDDS_BUILTIN_TRANSPORTS': 'DEFAULT', 'FASTDDS_DEFAULT_PROFILES_FILE': ''}
    if setting == 'large_data':
        env['FASTDDS_BUILTIN_TRANSPORTS'] = 'LARGE_DATA'
    elif setting.startswith('xml:') or setting == 'package':
        path = PROFILE if setting == 'package' else Path(setting[4:]).resolve()
        env['FASTDDS_BUILTIN_TRANSPORTS'] = ''
        env['FASTDDS_DEFAULT_PROFILES_FILE'] = str(path)
    elif setting != 'default':
        raise SystemExit(f'--transport {setting!r}: expected default, large_data, package '
                         'or xml:PATH')
    return env


def count(args: argparse.Namespace, setting: str) -> tuple:
    """Run one player and count in a child; return (sent, received, p50 ms, p99 ms)."""
    env = dict(os.environ, **transport_env(setting))
    for key in ('FASTDDS_BUILTIN_TRANSPORTS', 'FASTDDS_DEFAULT_PROFILES_FILE'):
        if not env[key]:
            env.pop(key)
    counter = subprocess.run([sys.executable, __file__, '--count-only', '--frames',
                              str(args.frames), '--rate', str(args.rate), '--source',
                              args.source, '--size', args.size, '--topic', args.topic],
                             env=env, capture_output=True, text=True,
                             timeout=args.frames / args.rate + 90)
    line = (counter.stdout.strip().splitlines() or ['0 0 nan nan'])[-1]
    try:
        sent, received, p50, p99 = line.split()
        return int(sent), int(received), float(p50), float(p99)
    except ValueError:
        print(counter.stdout, counter.stderr, file=sys.stderr)
        return 0, 0, math.nan, math.nan


def count_only(args: argparse.Namespace) -> int:
    """Start the player and count what reaches a best-effort reader (child mode)."""
    import rclpy
    from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    rclpy.init(args=['dds_images'])
    node = rclpy.create_node('dds_images_counter')
    arrival_ms: list = []  # image stamp (the player's wall clock at publish) -> callback

    def on_image(msg: Image) -> None:
        now = time.time_ns()
        arrival_ms.append((now - (msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec)) / 1e6)
    qos = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT,
                     history=HistoryPolicy.KEEP_LAST)
    node.create_subscription(Image, args.topic, on_image, qos)
    exe = Path(sys.executable).with_name('lingbot-ros-play')
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-m', 'lingbot_ros.tools.play']
    player = subprocess.Popen(cmd + [args.source, '--topic', args.topic, '--rate',
                                     str(args.rate), '--count', str(args.frames), '--loop',
                                     '--quiet', '--size', args.size, '--wait', '30'])
    deadline = time.monotonic() + args.frames / args.rate + 60
    while player.poll() is None and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    end = time.monotonic() + 1.0
    while time.monotonic() < end:
        rclpy.spin_once(node, timeout_sec=0.05)
    steady = arrival_ms[int(args.rate):] or [math.nan]  # the first second: discovery, caches
    print(args.frames if player.returncode == 0 else 0, len(arrival_ms),
          f'{np.percentile(steady, 50):.3f}', f'{np.percentile(steady, 99):.3f}')
    node.destroy_node()
    rclpy.try_shutdown()
    return 0


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--transport', action='append', default=[],
                   help='default, large_data, package (lingbot_ros/data/fastdds_large_images'
                        '.xml) or xml:PATH (repeatable; default: the first three)')
    p.add_argument('--source', default=str(ROOT.parent / 'shared' / 'data' / 'courthouse'))
    p.add_argument('--size', default='640x480')
    p.add_argument('--rate', type=float, default=30.0)
    p.add_argument('--frames', type=int, default=240)
    p.add_argument('--topic', default='/dds_images/image_raw')
    p.add_argument('--count-only', action='store_true', help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Optional[list] = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    if args.count_only:
        return count_only(args)
    best = None
    for setting in args.transport or ['default', 'large_data', 'package']:
        sent, received, p50, p99 = count(args, setting)
        share = received / sent if sent else 0.0
        print(f'{setting}: {args.size} at {args.rate:g} Hz, sent {sent}, received {received} '
              f'({100 * share:.1f} %), stamp to callback p50 {p50:.2f} ms, p99 {p99:.2f} ms',
              flush=True)
        if best is None or share > best[1]:
            best = (setting, share)
    print(f'best: {best[0]}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
