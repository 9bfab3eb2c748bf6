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
Similarity transforms that keep a long stream's windows in one map frame.

A new window re-runs the last committed frames of the previous one (the overlap)
as its scale frames, so the same frames have poses in both windows. As in the
reference's windowed inference (upstream-architecture.md section 10.2), one anchor
frame (the last overlap frame) fixes rotation and translation, and the lower median
of the depth ratios over all overlap pixels fixes the scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

SCALE_LIMITS = (1e-3, 1e3)


@dataclass(frozen=True)
class Sim3:
    """``x -> scale * rotation @ x + translation``, acting on camera-to-world poses."""

    scale: float = 1.0
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def apply_pose(self, pose_c2w: np.ndarray) -> np.ndarray:
        """Map a camera-to-world ``[4, 4]`` of the window into the map frame."""
        out = np.eye(4)
        out[:3, :3] = self.rotation @ pose_c2w[:3, :3]
        out[:3, 3] = self.scale * (self.rotation @ pose_c2w[:3, 3]) + self.translation
        return out

    def matrix(self) -> np.ndarray:
        """Return the 4x4 homogeneous matrix ``[[s R, t], [0, 1]]``."""
        out = np.eye(4)
        out[:3, :3] = self.scale * self.rotation
        out[:3, 3] = self.translation
        return out

    @property
    def is_identity(self) -> bool:
        return (self.scale == 1.0 and np.array_equal(self.rotation, np.eye(3))
                and not np.any(self.translation))


def lower_median(values: np.ndarray) -> float:
    """Median that returns the lower middle value for even counts (as torch.median)."""
    flat = np.sort(np.asarray(values).reshape(-1))
    return float(flat[(flat.size - 1) // 2])


def depth_scale(prev: Sequence[np.ndarray], curr: Sequence[np.ndarray]) -> Optional[float]:
    """Lower median of ``prev / curr`` over all valid pixels, clamped; None if none valid."""
    ratios = []
    eps = np.finfo(np.float32).eps
    for a, b in zip(prev, curr):
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        ok = np.isfinite(a) & np.isfinite(b) & (np.abs(b) > eps)
        ratios.append(a[ok] / b[ok])
    ratios = np.concatenate(ratios) if ratios else np.zeros(0)
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return None
    return float(np.clip(lower_median(ratios), *SCALE_LIMITS))


def align_overlap(prev_poses: Sequence[np.ndarray], curr_poses: Sequence[np.ndarray],
                  prev_depths: Optional[Sequence[np.ndarray]] = None,
                  curr_depths: Optional[Sequence[np.ndarray]] = None) -> Sim3:
    """
    Sim(3) taking the new window's poses onto the previous window's (map-frame) poses.

    ``prev_*`` are the overlap frames as published (map frame, scaled depth),
    ``curr_*`` the same frames as the new window predicts them. The anchor is the last
    overlap frame; without usable depth the scale stays 1.
    """
    if len(prev_poses) == 0 or len(prev_poses) != len(curr_poses):
        raise ValueError('align_overlap needs the same non-zero number of poses on both sides')
    scale = None
    if prev_depths is not None and curr_depths is not None:
        scale = depth_scale(prev_depths, curr_depths)
    scale = 1.0 if scale is None else scale
    pa, ca = np.asarray(prev_poses[-1]), np.asarray(curr_poses[-1])
    rot = pa[:3, :3] @ ca[:3, :3].T
    trans = pa[:3, 3] - scale * (rot @ ca[:3, 3])
    return Sim3(scale=scale, rotation=rot, translation=trans)
