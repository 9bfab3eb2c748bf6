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
Milliseconds per keyframe of ``MapCloud.add`` at the node's sizes (the worker pays them).

Keyframes are the demo room (``tools/scene.py`` poses, analytic box depth) on the model
grid of a 640x480 camera (392x518), with multiplicative depth noise so that, as with a
real model, every keyframe brings new voxels and the bound is reached and enforced.
Confidences are random in [1, 3], so the percentile filter does its usual work. Prints
the distribution of ms per keyframe before and after the bound is first hit, and the
time of a snapshot at the end. Prints numbers only; it asserts nothing.
"""

import argparse
import time

from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig, unproject
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.tools import scene
import numpy as np


def keyframes(n: int, height: int, width: int, noise: float, seed: int) -> list:
    """Build ``n`` keyframe results along the demo walk."""
    rng = np.random.default_rng(seed)
    k = scene.intrinsics(width, height)
    out = []
    for i, pose in enumerate(scene.trajectory(n)):
        depth = scene.depth(pose, k, width, height)
        depth *= (1 + noise * rng.standard_normal(depth.shape)).astype(np.float32)
        out.append(FrameResult(
            stamp_ns=i, index=i, frame_type=FrameType.KEYFRAME, pose_c2w=pose,
            pose_enc=np.zeros(9, np.float32), intrinsics=k, intrinsics_model=k,
            input_hw=(height, width), model_hw=(height, width), depth=depth,
            confidence=rng.uniform(1, 3, depth.shape).astype(np.float32),
            colors=rng.integers(0, 256, depth.shape + (3,), dtype=np.uint8)))
    return out


def main() -> None:
    defaults = MapCloudConfig()
    p = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    p.add_argument('--keyframes', type=int, default=400)
    p.add_argument('--height', type=int, default=392)
    p.add_argument('--width', type=int, default=518)
    p.add_argument('--decimation', type=int, default=defaults.decimation)
    p.add_argument('--voxel-size', type=float, default=defaults.voxel_size)
    p.add_argument('--max-points', type=int, default=defaults.max_points)
    p.add_argument('--noise', type=float, default=0.01, help='relative depth noise (std)')
    p.add_argument('--seed', type=int, default=0)
    args = p.parse_args()

    frames = keyframes(args.keyframes, args.height, args.width, args.noise, args.seed)
    cloud = MapCloud(MapCloudConfig(voxel_size=args.voxel_size, max_points=args.max_points,
                                    decimation=args.decimation))
    times, bounded, points = [], [], []
    for result in frames:
        t0 = time.perf_counter()
        report = cloud.add(result)
        times.append((time.perf_counter() - t0) * 1e3)
        bounded.append(cloud.dropped_points > 0)
        points.append(report.points)
    times, bounded = np.array(times), np.array(bounded)
    t0 = time.perf_counter()
    snap = cloud.snapshot()
    snap_ms = (time.perf_counter() - t0) * 1e3
    cfg = cloud.config
    unproject_ms = []
    for result in frames:  # the share of the per-frame filtering and unprojection
        t0 = time.perf_counter()
        unproject(result, result.pose_c2w, cfg.decimation, cfg.min_confidence,
                  cfg.confidence_percentile)
        unproject_ms.append((time.perf_counter() - t0) * 1e3)

    print(f'grid {args.height}x{args.width}, decimation {args.decimation}, voxel '
          f'{args.voxel_size}, max_points {args.max_points}: {int(np.mean(points))} points '
          f'merged per keyframe')
    for label, sel in (('all', np.ones_like(bounded)), ('before the bound', ~bounded),
                       ('at the bound', bounded)):
        part = times[sel]
        if len(part) < 3:
            continue
        part = part[2:] if label != 'at the bound' else part  # first calls warm numpy up
        print(f'{label:>17}: {len(part):4d} keyframes, ms per keyframe median '
              f'{np.median(part):.2f}, mean {part.mean():.2f}, p95 '
              f'{np.percentile(part, 95):.2f}, max {part.max():.2f}')
    print(f'of which unprojection and confidence filter: median {np.median(unproject_ms):.2f} '
          'ms per keyframe')
    print(f'final: {cloud.points} voxels, {cloud.dropped_points} dropped; snapshot of '
          f'{len(snap.xyz)} points in {snap_ms:.2f} ms')


if __name__ == '__main__':
    main()
