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
The host's share of one live frame, piece by piece, each alone on an idle thread.

What a 640x480 camera frame costs the node outside the model at the release structure's
grid (392x518, points decimated by 4, confidence above the frame's median): taking the
image (rclpy's message against reading the serialized bytes in place), unprojecting the
points (``unproject``, and the plain ``nonzero`` / ``np.percentile`` form it replaced),
building depth and points messages, and one turn of an executor's wait set with the
seven publishers' QoS event handlers (a camera's) and without them. Median of ``--repeat``
calls; prints numbers only. Example: ``python benchmarks/frame_host_costs.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Callable, Optional

import numpy as np

H, W = 392, 518          # the release grid of a 640x480 camera
INPUT_HW = (480, 640)


def _median_ms(job: Callable[[], object], repeat: int) -> float:
    job()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        job()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _frame():
    from lingbot_ros.streaming.result import FrameResult, FrameType
    rng = np.random.default_rng(0)
    k_in = np.array([[500.0, 0.0, 320.0], [0.0, 500.0, 240.0], [0.0, 0.0, 1.0]])
    k_model = k_in.copy()
    k_model[:2] *= W / INPUT_HW[1]
    return FrameResult(stamp_ns=1, index=3, frame_type=FrameType.KEYFRAME, pose_c2w=np.eye(4),
                       pose_enc=np.zeros(9, np.float32), intrinsics=k_in,
                       intrinsics_model=k_model, input_hw=INPUT_HW, model_hw=(H, W),
                       depth=rng.uniform(0.5, 5.0, (H, W)).astype(np.float32),
                       confidence=rng.uniform(1.0, 3.0, (H, W)).astype(np.float32),
                       colors=rng.integers(0, 256, (H, W, 3), dtype=np.uint8))


def _made(r, pose):
    """Return the frame with its depth image and points made as the session makes them."""
    from lingbot_ros.streaming.config import FrameProducts, PointsSpec
    from lingbot_ros.streaming.products import make
    spec = PointsSpec(4, 0.0, 50.0, tuple(float(v) for v in pose.reshape(-1)))
    return make(FrameProducts(True, spec), r)


def _plain_unproject(r, pose, step: int, percentile: float):
    """Unproject as before 2026-12-05 (boolean masks, nonzero, np.percentile)."""
    depth, conf = r.depth[::step, ::step], r.confidence[::step, ::step]
    keep = np.isfinite(depth) & (depth > 0)
    keep &= conf >= float(np.percentile(conf[keep], percentile))
    v, u = np.nonzero(keep)
    z = depth[v, u].astype(np.float64)
    k = r.intrinsics_model
    cam = np.stack([(u * step - k[0, 2]) * z / k[0, 0], (v * step - k[1, 2]) * z / k[1, 1], z],
                   axis=1)
    return cam @ pose[:3, :3].T + pose[:3, 3], r.colors[::step, ::step][v, u], conf[v, u]


def _executor_turn(node, repeat: int) -> float:
    from rclpy.executors import SingleThreadedExecutor
    ticks = []
    node.create_timer(0.0, lambda: ticks.append(1))  # always ready: one callback a turn
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(node)
    try:
        return _median_ms(lambda: executor.spin_once(timeout_sec=0.1), repeat)
    finally:
        executor.shutdown()


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--repeat', type=int, default=300)
    args = p.parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    import rclpy
    from rclpy.context import Context
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image

    from lingbot_ros.ros import messages
    from lingbot_ros.ros.image_cdr import parse_image
    from lingbot_ros.ros.outputs import CameraPublishers
    from lingbot_ros.streaming.map_cloud import unproject

    r, pose = _frame(), np.eye(4)
    made = _made(r, pose)
    image = Image(height=INPUT_HW[0], width=INPUT_HW[1], encoding='rgb8', step=INPUT_HW[1] * 3)
    image.data = np.zeros(INPUT_HW[0] * INPUT_HW[1] * 3, np.uint8).tobytes()
    sample = serialize_message(image)
    rows = [
        ('image taken as a message (rclpy deserializes)',
         lambda: deserialize_message(sample, Image)),
        ('image read in place (image_cdr.parse_image)', lambda: parse_image(sample)),
        ('points: unproject', lambda: unproject(r, pose, 4, 0.0, 50.0)),
        ('points: the plain form it replaced', lambda: _plain_unproject(r, pose, 4, 50.0)),
        ('points: PointCloud2 built', lambda: messages.point_cloud(r, pose, 'map', 4, 0.0, 50.0)),
        ('depth: Image built (resampled to 640x480)', lambda: messages.depth_image(r, 'cam')),
        ('points: PointCloud2 of rows the session made',
         lambda: messages.point_cloud(made, pose, 'map', 4, 0.0, 50.0)),
        ('depth: Image of the depth the session made',
         lambda: messages.depth_image(made, 'cam')),
    ]
    for name, job in rows:
        print(f'{name:>48}: {_median_ms(job, args.repeat):6.3f} ms', flush=True)

    ctx = Context()
    rclpy.init(context=ctx, domain_id=int(os.environ.get('ROS_DOMAIN_ID', '0')))
    try:
        for quiet in (False, True):
            node = rclpy.create_node(f'frame_host_costs_{int(quiet)}', context=ctx)
            if quiet:
                CameraPublishers(node, '~/')  # the node's own: no event handlers
            else:
                for name in ('pose', 'odom', 'path', 'depth', 'points', 'camera_info',
                             'map_points'):
                    node.create_publisher(Image, f'~/{name}', 1)
            label = ('executor turn, 7 publishers, ' +
                     ('no event handlers' if quiet else "rclpy's handlers"))
            waitables = len(list(node.waitables))
            print(f'{label:>48}: {_executor_turn(node, args.repeat):6.3f} ms '
                  f'({waitables} waitables)', flush=True)
            node.destroy_node()
    finally:
        ctx.try_shutdown()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
