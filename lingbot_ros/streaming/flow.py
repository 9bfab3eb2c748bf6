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
Camera-motion optical flow between a frame and the last keyframe: the keyframe criterion.

Pixels of the current frame on a coarse grid are lifted with their predicted depth,
moved into the keyframe camera and re-projected; the mean pixel displacement says how
much new view the frame brings. Everything stays on the device; the result is a tensor
(read it with ``.item()`` only where a decision is made).
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch

from ..model.pose import pose_encoding_to_camera, se3_inverse, to_homogeneous

MIN_DEPTH = 1e-6
DEFAULT_STRIDE = 8


def flow_magnitude(depth: torch.Tensor, c2w: torch.Tensor, intrinsics: torch.Tensor,
                   kf_c2w: torch.Tensor, kf_intrinsics: torch.Tensor,
                   stride: int = DEFAULT_STRIDE) -> torch.Tensor:
    """
    Return the mean flow norm (pixels) from the current frame into the keyframe.

    ``depth [..., H, W]`` is the current frame's depth; ``c2w``/``kf_c2w`` are
    camera-to-world ``[..., 3 or 4, 4]`` (OpenCV axes); ``intrinsics``/``kf_intrinsics``
    are ``[..., 3, 3]`` in the depth map's pixels. Pixels ``(u, v) = (0, stride, ...)``
    count when their depth and their depth in the keyframe both exceed 1e-6; with
    none valid the result is 0. Leading dims broadcast; the result has them.
    """
    if stride < 1:
        raise ValueError(f'stride={stride} is invalid: expected >= 1')
    dtype, device = depth.dtype, depth.device
    height, width = depth.shape[-2:]
    d = depth[..., ::stride, ::stride]
    v, u = torch.meshgrid(torch.arange(0, height, stride, dtype=dtype, device=device),
                          torch.arange(0, width, stride, dtype=dtype, device=device),
                          indexing='ij')
    pixels = torch.stack([u, v, torch.ones_like(u)], dim=-1)  # [h, w, 3]
    rays = torch.einsum('...ij,hwj->...hwi', torch.linalg.inv(intrinsics.to(dtype)), pixels)
    cam = rays * d[..., None]
    world = _apply(to_homogeneous(c2w.to(dtype)), cam)
    kf_cam = _apply(se3_inverse(to_homogeneous(kf_c2w.to(dtype))), world)
    z = kf_cam[..., 2:3]
    projected = torch.einsum('...ij,...hwj->...hwi', kf_intrinsics.to(dtype),
                             kf_cam / z.clamp(min=MIN_DEPTH))[..., :2]
    norm = (projected - pixels[..., :2]).norm(dim=-1)
    valid = (d > MIN_DEPTH) & (z[..., 0] > MIN_DEPTH)
    count = valid.sum(dim=(-2, -1))
    total = torch.where(valid, norm, torch.zeros_like(norm)).sum(dim=(-2, -1))
    return torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total))


def host_flow(depth: Optional[np.ndarray], c2w: np.ndarray, intrinsics: np.ndarray,
              kf_c2w: np.ndarray, kf_intrinsics: np.ndarray) -> float:
    """
    Return :func:`flow_magnitude` of a frame's host copies, in float64 (inf without depth).

    The session computes it in the map frame: a Sim(3) applied to both cameras and the
    depth leaves the flow unchanged, so keyframes of earlier windows compare correctly.
    """
    if depth is None:
        return math.inf
    as_t = torch.from_numpy
    return float(flow_magnitude(as_t(depth.astype(np.float64)), as_t(c2w), as_t(intrinsics),
                                as_t(kf_c2w), as_t(kf_intrinsics)))


def flow_magnitude_from_pose_encoding(depth: torch.Tensor, pose_enc: torch.Tensor,
                                      kf_pose_enc: torch.Tensor,
                                      stride: int = DEFAULT_STRIDE) -> torch.Tensor:
    """Do :func:`flow_magnitude` for raw 9-d pose codes on the depth map's own grid."""
    hw: Tuple[int, int] = (depth.shape[-2], depth.shape[-1])
    c2w, k = pose_encoding_to_camera(pose_enc.to(depth.dtype), hw)
    kf_c2w, kf_k = pose_encoding_to_camera(kf_pose_enc.to(depth.dtype), hw)
    return flow_magnitude(depth, c2w, k, kf_c2w, kf_k, stride)


def _apply(pose: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Apply ``[..., 4, 4]`` rigid transforms to points ``[..., h, w, 3]``."""
    rot, trans = pose[..., :3, :3], pose[..., :3, 3]
    return torch.einsum('...ij,...hwj->...hwi', rot, points) + trans[..., None, None, :]
