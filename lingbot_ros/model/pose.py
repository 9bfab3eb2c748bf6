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
Camera encoding <-> matrices, and the small SE(3) algebra around it.

The camera head emits ``pose_enc = [T (3), q (4, x y z w), fov_h, fov_w]``. We read
``E = [R(q) | T]`` as camera-to-world in OpenCV axes (x right, y down, z forward), T the
camera centre, as the reference's consuming code does. The intrinsics put the principal
point at the image centre in continuous pixel coordinates (pixel edges on integers).

Batched over any leading dims. :mod:`lingbot_ros.streaming.trajectory` gives the host side
float64 numpy faces of the same functions.
"""

from __future__ import annotations

from typing import Tuple

import torch


def quaternion_to_rotation(q: torch.Tensor) -> torch.Tensor:
    """Return rotations ``[..., 3, 3]`` of quaternions ``[..., 4]`` (x, y, z, w), any norm > 0."""
    x, y, z, w = q.unbind(-1)
    two_s = 2.0 / (q * q).sum(-1)
    rows = (
        1 - two_s * (y * y + z * z), two_s * (x * y - z * w), two_s * (x * z + y * w),
        two_s * (x * y + z * w), 1 - two_s * (x * x + z * z), two_s * (y * z - x * w),
        two_s * (x * z - y * w), two_s * (y * z + x * w), 1 - two_s * (x * x + y * y),
    )
    return torch.stack(rows, -1).reshape(q.shape[:-1] + (3, 3))


def rotation_to_quaternion(rot: torch.Tensor) -> torch.Tensor:
    """
    Return unit quaternions ``[..., 4]`` (x, y, z, w), w >= 0, of rotations ``[..., 3, 3]``.

    Picks, per matrix, the best-conditioned of the four closed forms (largest of
    w, x, y, z), so it is accurate near 180-degree turns too.
    """
    m = rot.reshape(rot.shape[:-2] + (9,)).unbind(-1)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = m
    # Four times the square of each component (w, x, y, z).
    four_sq = torch.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22,
                           1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    # Candidate (w, x, y, z) scaled by 4 * component, for each choice of pivot.
    cand = torch.stack([
        torch.stack([four_sq[..., 0], m21 - m12, m02 - m20, m10 - m01], -1),
        torch.stack([m21 - m12, four_sq[..., 1], m10 + m01, m02 + m20], -1),
        torch.stack([m02 - m20, m10 + m01, four_sq[..., 2], m12 + m21], -1),
        torch.stack([m10 - m01, m02 + m20, m12 + m21, four_sq[..., 3]], -1),
    ], -2)
    pivot = four_sq.argmax(-1)
    idx = pivot[..., None, None].expand(pivot.shape + (1, 4))
    wxyz = cand.gather(-2, idx).squeeze(-2)
    wxyz = wxyz / wxyz.norm(dim=-1, keepdim=True)
    wxyz = torch.where(wxyz[..., :1] < 0, -wxyz, wxyz)
    return wxyz[..., [1, 2, 3, 0]]


def intrinsics_from_fov(fov_h: torch.Tensor, fov_w: torch.Tensor,
                        image_hw: Tuple[int, int]) -> torch.Tensor:
    """Build the pinhole ``[..., 3, 3]`` of the model grid ``image_hw`` from fovs (radians)."""
    h, w = image_hw
    k = torch.zeros(fov_h.shape + (3, 3), dtype=fov_h.dtype, device=fov_h.device)
    k[..., 0, 0] = (w / 2.0) / torch.tan(fov_w / 2.0)
    k[..., 1, 1] = (h / 2.0) / torch.tan(fov_h / 2.0)
    k[..., 0, 2] = w / 2
    k[..., 1, 2] = h / 2
    k[..., 2, 2] = 1.0
    return k


def pose_encoding_to_camera(pose_enc: torch.Tensor, image_hw: Tuple[int, int]
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Split ``pose_enc [..., 9]`` into ``E = [R | T]`` (c2w, ``[..., 3, 4]``) and K."""
    rot = quaternion_to_rotation(pose_enc[..., 3:7])
    extrinsic = torch.cat([rot, pose_enc[..., :3, None]], dim=-1)
    return extrinsic, intrinsics_from_fov(pose_enc[..., 7], pose_enc[..., 8], image_hw)


def to_homogeneous(pose: torch.Tensor) -> torch.Tensor:
    """Append the row (0, 0, 0, 1) to ``[..., 3, 4]`` poses; 4x4 input passes through."""
    if pose.shape[-2] == 4:
        return pose
    bottom = torch.zeros(pose.shape[:-2] + (1, 4), dtype=pose.dtype, device=pose.device)
    bottom[..., 0, 3] = 1.0
    return torch.cat([pose, bottom], dim=-2)


def se3_inverse(pose: torch.Tensor) -> torch.Tensor:
    """Invert rigid ``[..., 3, 4]`` or ``[..., 4, 4]`` poses; same shape out."""
    rot_t = pose[..., :3, :3].transpose(-1, -2)
    trans = -(rot_t @ pose[..., :3, 3:4])
    out = torch.cat([rot_t, trans], dim=-1)
    return to_homogeneous(out) if pose.shape[-2] == 4 else out


def intrinsics_to_input(k: torch.Tensor, scale_xy: Tuple[float, float],
                        offset_xy: Tuple[float, float] = (0.0, 0.0)) -> torch.Tensor:
    """
    Map a model-grid pinhole ``[..., 3, 3]`` back to the input image's pixels.

    The model grid is the input resized by ``scale_xy`` (model px per input px), then
    shifted: model x = resized x - ``offset_x`` (a crop of ``offset`` pixels, or a pad
    when negative). Continuous coordinates, so the centre maps to the centre.
    """
    sx, sy = scale_xy
    ox, oy = offset_xy
    out = k.clone()
    out[..., 0, 0] = k[..., 0, 0] / sx
    out[..., 0, 1] = k[..., 0, 1] / sx
    out[..., 0, 2] = (k[..., 0, 2] + ox) / sx
    out[..., 1, 1] = k[..., 1, 1] / sy
    out[..., 1, 2] = (k[..., 1, 2] + oy) / sy
    return out
