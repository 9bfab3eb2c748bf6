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
How long the node's periodic jobs keep other threads from the GIL, at the node's sizes.

A ticker thread spins in Python and records the longest gap between its own iterations
while each job runs in the main thread: the longest stretch the job held the GIL. The jobs:
a snapshot of a full 500k-point map, its PointCloud2, one keyframe merged into it, the
path of 2,000 poses published, the map published (as a message and as serialized bytes), and
a frame's depth and points built and published, to matched subscribers. Each job runs
``--repeat`` times: the median time, the median and the largest longest hold. Prints numbers
only. The switch interval is the node's (0.5 ms). Example:
``python benchmarks/gil_holds.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from map_cloud_bench import keyframes  # noqa: E402,I100 (the same keyframes as that bench)

from lingbot_ros.ros import messages  # noqa: E402,I100
from lingbot_ros.ros.cli import GIL_SWITCH_INTERVAL_S  # noqa: E402
from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig  # noqa: E402
import numpy as np  # noqa: E402


def held(job: Callable[[], object]) -> tuple:
    """Run ``job``; return (its milliseconds, the longest ticker gap in milliseconds)."""
    stop, worst = threading.Event(), [0.0]

    def tick() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            now = time.perf_counter()
            worst[0] = max(worst[0], now - last)
            last = now
    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.05)
    worst[0] = 0.0
    t0 = time.perf_counter()
    job()
    took = time.perf_counter() - t0
    stop.set()
    ticker.join()
    return took * 1e3, worst[0] * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument('--repeat', type=int, default=5, help='runs of each job (median shown)')
    args = ap.parse_args()
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    import rclpy
    from nav_msgs.msg import Path as PathMsg
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image, PointCloud2
    cloud = MapCloud(MapCloudConfig())
    frames = keyframes(150, 392, 518, 0.02, 0)
    for r in frames:
        cloud.add(r, r.pose_c2w)
    snap = cloud.snapshot()
    map_rows = cloud.rows()
    rows = [('map snapshot', lambda: cloud.snapshot()),
            ('map rows (what ~/map_points sends)', lambda: cloud.rows()),
            ('map PointCloud2 built', lambda: messages.map_cloud(map_rows, 1, 'map')),
            ('map PointCloud2 serialized', lambda: serialize_message(messages.map_cloud(
                map_rows, 1, 'map'))),
            ('one keyframe merged', lambda: cloud.add(frames[-1], frames[-1].pose_c2w))]
    rclpy.init()
    node = rclpy.create_node('gil_holds')
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    pubs = {name: node.create_publisher(kind, name, qos)
            for name, kind in (('path', PathMsg), ('map', PointCloud2), ('depth', Image),
                               ('points', PointCloud2))}
    subs = [node.create_subscription(pub.msg_type, name, lambda _: None, qos, raw=True)
            for name, pub in pubs.items()]  # matched readers: every publish is delivered
    time.sleep(1.0)
    poses = [messages.pose_stamped(np.eye(4), i, 'map') for i in range(2000)]
    cloud_msg = messages.map_cloud(map_rows, 1, 'map')
    cloud_cdr = serialize_message(cloud_msg)
    frame = frames[-1]
    rows += [('path of 2,000 poses published',
              lambda: pubs['path'].publish(PathMsg(poses=poses))),
             (f'map published ({len(cloud_msg.data) / 1e6:.0f} MB)',
              lambda: pubs['map'].publish(cloud_msg)),
             ('map published as serialized bytes', lambda: pubs['map'].publish(cloud_cdr)),
             ("one frame's depth built, sent",
              lambda: pubs['depth'].publish(messages.depth_image(frame, 'cam'))),
             ("one frame's points built, sent", lambda: pubs['points'].publish(
                 messages.point_cloud(frame, frame.pose_c2w, 'map', 4, 0.0, 50.0)))]
    print(f'{len(snap.xyz)} map points; switch interval {GIL_SWITCH_INTERVAL_S * 1e3:g} ms; '
          f'{args.repeat} runs of each job')
    for name, job in rows:
        runs = np.array([held(job) for _ in range(max(1, args.repeat))])
        print(f'{name:>44}: {np.median(runs[:, 0]):6.1f} ms, longest GIL hold '
              f'{np.median(runs[:, 1]):4.1f} ms (max {runs[:, 1].max():4.1f})')
    for sub in subs:
        node.destroy_subscription(sub)
    node.destroy_node()
    rclpy.shutdown()


if __name__ == '__main__':
    main()
