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
A voxel map's voxels as plain arrays: what a saved stream state holds of its map.

:meth:`~lingbot_ros.streaming.map_cloud.MapCloud.export_voxels` copies them out and
:meth:`~lingbot_ros.streaming.map_cloud.MapCloud.import_voxels` takes them back, so a
resumed map merges its next keyframes exactly as the saved one would have: each voxel
keeps its point sums and count (not only the mean), its packed key, the keyframe of its
last observation, its best confidence and that observation's colour, in the order the
bound drops them (least recently observed first). Nothing here knows the cloud's
storage; :meth:`MapVoxels.validate` checks what a file could get wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Optional

import numpy as np

# the arrays of MapVoxels, each with its dtype and trailing shape (one row per voxel)
ARRAYS = {'sums': (np.float64, (3,)), 'counts': (np.int64, ()), 'keys': (np.int64, ()),
          'seen': (np.int64, ()), 'confidence': (np.float32, ()), 'rgb': (np.uint8, (3,))}
COUNTERS = ('keyframes', 'dropped_points', 'out_of_range_points')


@dataclass(frozen=True)
class MapVoxels:
    """
    One camera's voxel map, oldest voxel first.

    ``sums [N, 3]`` float64 (the sum of each voxel's points), ``counts [N]``, ``keys [N]``
    (packed voxel indices, distinct, non-negative), ``seen [N]`` (keyframe counter of the
    last observation), ``confidence [N]`` float32, ``rgb [N, 3]`` uint8; the cloud's
    counters; ``voxel_size`` (model units) the keys were made with; ``epoch``: the session
    map the points belong to (None before the first frame). ``frame``: the frame the
    points are in, as the map's owner names it ('' where it does not say).
    """

    voxel_size: float
    epoch: Optional[int]
    keyframes: int
    dropped_points: int
    out_of_range_points: int
    sums: np.ndarray
    counts: np.ndarray
    keys: np.ndarray
    seen: np.ndarray
    confidence: np.ndarray
    rgb: np.ndarray
    frame: str = ''

    def __len__(self) -> int:
        """Return the number of voxels."""
        return int(self.keys.shape[0])

    def validate(self) -> 'MapVoxels':
        """Raise ValueError naming the first thing that cannot be a map's; return self."""
        n = len(self)
        if not (math.isfinite(self.voxel_size) and self.voxel_size > 0):
            raise ValueError(f'map voxel size {self.voxel_size!r} is not a positive number')
        if self.epoch is not None and self.epoch < 0:
            raise ValueError(f'map epoch {self.epoch} is negative')
        for name in COUNTERS:
            if getattr(self, name) < 0:
                raise ValueError(f'map counter {name}={getattr(self, name)} is negative')
        for name, (dtype, tail) in ARRAYS.items():
            a = getattr(self, name)
            if a.dtype != dtype or a.shape != (n, *tail):
                raise ValueError(f'map {name} is {a.dtype} {a.shape}, expected '
                                 f'{np.dtype(dtype)} {(n, *tail)}')
        if n and (self.counts.min() < 1 or self.keys.min() < 0 or self.seen.min() < 0):
            raise ValueError('map voxels with no point, a negative key or keyframe')
        if not np.isfinite(self.sums).all() or not (self.confidence >= 0).all():
            raise ValueError('map voxels with non-finite sums or a negative or NaN confidence')
        if np.unique(self.keys).shape[0] != n:
            raise ValueError('map voxels with the same key twice')
        return self
