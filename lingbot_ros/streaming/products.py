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
A frame's depth image and point cloud, made by the session from its host copies.

Why here: built on the node's output thread they would wait for the GIL the worker and
the executor hold; made on the model's device they would take dozens of small kernels and
several waits for the device out of the worker's step. The session has the frame's
depth, confidence and colours on the host already; numpy and OpenCV make both from them
in a fraction of a millisecond, in the worker's thread (or the model's own process), and
the node's output thread only wraps their bytes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import cv2
from lingbot_ros.streaming.config import FrameProducts, PointsSpec
from lingbot_ros.streaming.map_cloud import packed_rows, unproject
from lingbot_ros.streaming.result import FrameResult
import numpy as np


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


def depth_on_input(result: FrameResult, out: Optional[np.ndarray] = None) -> np.ndarray:
    """
    Resample the model-grid depth onto the input image's pixels (into ``out`` if given).

    So the depth image and ``camera_info`` describe the same pixels (what depth_image_proc
    and RViz expect). Nearest pixel: no depth is invented across edges. Pixels the model
    grid does not cover (a centre crop of a tall image) are NaN.
    """
    h, w = (int(v) for v in result.input_hw)
    return cv2.warpAffine(np.asarray(result.depth, dtype=np.float32),
                          input_to_model(result.intrinsics_model, result.intrinsics),
                          (w, h), dst=out, flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP,
                          borderMode=cv2.BORDER_CONSTANT, borderValue=float('nan'))


def point_rows(result: FrameResult, spec: PointsSpec) -> np.ndarray:
    """
    Return the frame's points as float32 rows ``x, y, z, rgb`` in ``spec``'s frame.

    ``rgb`` holds the bits of one uint32 ``0xRRGGBB`` (a PointCloud2 colour field): the
    rows are the bytes the message carries. Rows come in row-major pixel order.
    """
    to_map = np.asarray(spec.map_from_session, np.float64).reshape(4, 4)
    pose = to_map @ np.asarray(result.pose_c2w, np.float64)
    points = unproject(result, pose, spec.decimation, spec.min_confidence, spec.percentile)
    return packed_rows(points.xyz, points.rgb)


def make(products: FrameProducts, result: FrameResult) -> FrameResult:
    """Return ``result`` with the depth image and points ``products`` asks for (given depth)."""
    if result.depth is None:
        return result
    return replace(
        result,
        depth_input=depth_on_input(result) if products.depth_on_input else None,
        points_rows=None if products.points is None else point_rows(result, products.points))
