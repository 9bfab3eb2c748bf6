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
A frame's depth image and point cloud, made where the model's outputs are: on its device.

Why: built on the host for every frame, the depth resampled onto the camera's pixels and
the filtered, coloured points cost the node's output thread 2.4 ms a frame on the H200
(depth 1.0, points 1.4 at 15 Hz), held the GIL the worker needs, and count in the ROS
overhead. On the model's device they are a few small kernels on tensors already there;
the node then only wraps their bytes in messages. The results equal the host functions'
(``ros/messages.depth_on_input``, ``map_cloud.unproject`` + ``packed_rows``): the same
nearest-pixel rule as OpenCV's ``warpAffine`` in its fixed point, float64 geometry, the
same percentile.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

from lingbot_ros.streaming.config import FrameProducts, PointsSpec
import numpy as np
import torch

_AB_BITS = 10  # OpenCV warpAffine's fixed point: coordinates in 1/1024 pixel


def input_to_model(k_model: np.ndarray, k_input: np.ndarray) -> np.ndarray:
    """
    Return the 2x3 affine from an input pixel to the model-grid pixel it lies in.

    Pixel centres sit at ``i + 0.5`` in the coordinates both grids share; the scale and
    offset come from the two intrinsics (the model's, and the same camera at the input's
    resolution).
    """
    km, ki = np.asarray(k_model, np.float64), np.asarray(k_input, np.float64)
    sx, sy = km[0, 0] / ki[0, 0], km[1, 1] / ki[1, 1]
    ox, oy = ki[0, 2] * sx - km[0, 2], ki[1, 2] * sy - km[1, 2]
    return np.array([[sx, 0.0, 0.5 * sx - 0.5 - ox], [0.0, sy, 0.5 * sy - 0.5 - oy]])


@functools.lru_cache(maxsize=8)
def _nearest_index(affine: tuple, model_hw: tuple, input_hw: tuple,
                   device: str) -> torch.Tensor:
    """
    Flat model-grid index of each input pixel (-1 outside), as warpAffine rounds it.

    Made once per camera geometry and device (the affine does not change while a stream
    keeps its size: both intrinsics come from the same predicted field of view).
    """
    (sx, _, cx), (_, sy, cy) = affine
    scale = 1 << _AB_BITS
    half = scale // 2
    x = np.arange(input_hw[1], dtype=np.float64)
    y = np.arange(input_hw[0], dtype=np.float64)
    ix = (np.rint(sx * x * scale).astype(np.int64) + int(np.rint(cx * scale)) + half) \
        >> _AB_BITS
    iy = (np.rint((sy * y + cy) * scale).astype(np.int64) + half) >> _AB_BITS
    h, w = model_hw
    ok = (iy[:, None] >= 0) & (iy[:, None] < h) & (ix[None, :] >= 0) & (ix[None, :] < w)
    index = np.where(ok, iy[:, None] * w + ix[None, :], -1)
    return torch.from_numpy(index).to(device)


def depth_on_input(depth: torch.Tensor, k_model: np.ndarray, k_input: np.ndarray,
                   input_hw: tuple) -> torch.Tensor:
    """
    Resample ``depth [H, W]`` onto the input's pixels by nearest pixel; NaN outside the grid.

    So the depth image and ``camera_info`` describe the same pixels (what depth_image_proc
    and RViz expect); no depth is invented across edges.
    """
    # 12 significant digits: the same camera's frames share one entry (their intrinsics
    # differ in the last bits); OpenCV itself rounds coordinates to 1/1024 pixel
    affine = tuple(tuple(float(f'{v:.12g}') for v in row)
                   for row in input_to_model(k_model, k_input))
    idx = _nearest_index(affine, tuple(depth.shape), tuple(int(v) for v in input_hw),
                         str(depth.device))
    flat = depth.reshape(-1).float()
    out = flat[idx.clamp(min=0)]
    return out.masked_fill_(idx < 0, float('nan'))


def _percentile_linear(values: torch.Tensor, q: float) -> torch.Tensor:
    """``np.percentile(values, q)`` of float32 values, as ``map_cloud.percentile_linear``."""
    n = values.numel()
    pos = (n - 1) * (float(q) / 100.0)
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    a = torch.kthvalue(values, lo + 1).values
    b = torch.kthvalue(values, hi + 1).values if hi != lo else a
    t = pos - lo
    if t < 0.5:  # numpy's weights take the values' type
        return a + (b - a) * torch.tensor(t, dtype=values.dtype, device=values.device)
    return b - (b - a) * torch.tensor(1.0 - t, dtype=values.dtype, device=values.device)


def point_rows(depth: torch.Tensor, confidence: Optional[torch.Tensor],
               colors: Optional[torch.Tensor], k_model: np.ndarray, pose_c2w: np.ndarray,
               spec: PointsSpec) -> torch.Tensor:
    """
    Return the frame's points as float32 rows ``x, y, z, rgb`` in ``spec``'s frame.

    ``rgb`` holds the bits of one uint32 ``0xRRGGBB`` (a PointCloud2 colour field): the
    rows are the bytes the message carries. Rows come in row-major pixel order.
    """
    step = spec.decimation
    d = depth[::step, ::step].reshape(-1)
    keep = torch.isfinite(d) & (d > 0)
    conf = None
    if confidence is not None:
        conf = confidence[::step, ::step].reshape(-1).float()
        cut = torch.tensor(float(spec.min_confidence), dtype=torch.float64, device=d.device)
        if spec.percentile > 0:
            valid = conf[keep]
            if valid.numel():
                cut = torch.maximum(cut, _percentile_linear(valid, spec.percentile).double())
        keep &= conf >= cut.float()  # as numpy compares float32 with a Python float
    idx = keep.nonzero().squeeze(1)
    rows_h, rows_w = depth[::step, ::step].shape
    k = np.asarray(k_model, np.float64)
    u = (idx % rows_w).double() * step - k[0, 2]
    v = (idx // rows_w).double() * step - k[1, 2]
    z = d[idx].double()
    cam = torch.stack([u * z / k[0, 0], v * z / k[1, 1], z], dim=1)
    pose = np.asarray(spec.map_from_session, np.float64).reshape(4, 4) @ \
        np.asarray(pose_c2w, np.float64)
    pose_t = torch.from_numpy(pose).to(d.device)
    xyz = (cam @ pose_t[:3, :3].T + pose_t[:3, 3]).float()
    packed = torch.zeros(len(idx), dtype=torch.int32, device=d.device)
    if colors is not None:
        c = colors[::step, ::step].reshape(-1, 3)[idx].to(torch.int32)
        packed = (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
    return torch.cat([xyz, packed.view(torch.float32)[:, None]], dim=1)


def make(products: FrameProducts, depth: torch.Tensor, confidence: Optional[torch.Tensor],
         colors: Optional[torch.Tensor], k_model: np.ndarray, k_input: np.ndarray,
         input_hw: tuple, pose_c2w: np.ndarray) -> dict:
    """Return ``{'depth_input': tensor, 'points_rows': tensor}`` for what ``products`` asks."""
    out: dict[str, Any] = {}
    if products.depth_on_input:
        out['depth_input'] = depth_on_input(depth, k_model, k_input, input_hw)
    if products.points is not None:
        out['points_rows'] = point_rows(depth, confidence, colors, k_model, pose_c2w,
                                        products.points)
    return out
