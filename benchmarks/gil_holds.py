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
path of 2,000 poses published, the map published. Prints numbers only. The switch interval
is the node's (0.5 ms). Example: ``python benchmarks/gil_holds.py``.
"""

from __future__ import annotations

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
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    import rclpy
    from nav_msgs.msg import Path as PathMsg
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import PointCloud2
    cloud = MapCloud(MapCloudConfig())
    frames = keyframes(150, 392, 518, 0.02, 0)
    for r in frames:
        cloud.add(r, r.pose_c2w)
    snap = cloud.snapshot()
    map_rows = cloud.rows()
    rows = [('map snapshot', lambda: cloud.snapshot()),
            ('map rows (what ~/map_points sends)', lambda: cloud.rows()),
            ('map PointCloud2 serialized', lambda: messages.map_cloud(
                map_rows, 1, 'map').outgoing()),
            ('map PointCloud2 message built', lambda: messages.map_cloud(
                map_rows, 1, 'map').to_message()),
            ('one keyframe merged', lambda: cloud.add(frames[-1], frames[-1].pose_c2w))]
    rclpy.init()
    node = rclpy.create_node('gil_holds')
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    path_pub = node.create_publisher(PathMsg, 'path', qos)
    map_pub = node.create_publisher(PointCloud2, 'map', qos)
    poses = [messages.pose_stamped(np.eye(4), i, 'map') for i in range(2000)]
    cloud_msg = messages.map_cloud(map_rows, 1, 'map').to_message()
    cloud_cdr = messages.map_cloud(map_rows, 1, 'map').outgoing()
    rows += [('path of 2,000 poses published', lambda: path_pub.publish(PathMsg(poses=poses))),
             (f'map published ({len(cloud_msg.data) / 1e6:.0f} MB)',
              lambda: map_pub.publish(cloud_msg)),
             ('map published, serialized', lambda: map_pub.publish(cloud_cdr))]
    print(f'{len(snap.xyz)} map points; switch interval {GIL_SWITCH_INTERVAL_S * 1e3:g} ms')
    for name, job in rows:
        took, gap = held(job)
        print(f'{name:>34}: {took:6.1f} ms, longest GIL hold {gap:4.1f} ms')
    node.destroy_node()
    rclpy.shutdown()


if __name__ == '__main__':
    main()
