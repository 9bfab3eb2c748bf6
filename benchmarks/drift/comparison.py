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
The comparison: how far one run's poses and depths are from another's, frame by frame.

Rotations are compared as rotations (the angle of ``Ra^T Rb``, accurate for tiny angles),
translations as distances, depth as a relative error per pixel; quantiles and means are
taken over all pixels of all frames. Which run is compared with which is decided here too.
"""

from typing import AbstractSet, Dict, List, Sequence, Tuple

from drift.runs import RunKind

import numpy as np


def quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Return rotations ``[S, 3, 3]`` (float64) of scalar-last quaternions ``[S, 4]``."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def rotation_angle_deg(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Return the angle (degrees) of ``ra^T rb`` per frame; accurate for tiny angles too."""
    rel = np.einsum('sji,sjk->sik', ra, rb)
    axis = np.stack([rel[:, 2, 1] - rel[:, 1, 2], rel[:, 0, 2] - rel[:, 2, 0],
                     rel[:, 1, 0] - rel[:, 0, 1]], -1)
    sin = np.linalg.norm(axis, axis=-1) / 2
    cos = (np.trace(rel, axis1=1, axis2=2) - 1) / 2
    return np.degrees(np.arctan2(sin, cos))


def compare(run: Dict[str, np.ndarray], base: Dict[str, np.ndarray],
            first_evicting: int) -> dict:
    """
    Errors of ``run`` against ``base`` (``pose_enc [S, 9]``, ``depth [S, H, W]``).

    Returns ``summary`` (means, maxima, pixel quantiles) and ``per_frame`` lists: rotation
    angle of the camera rotations (deg), translation distance, median and p90 of
    ``|d - d_base| / |d_base|`` (%), largest field-of-view difference (rad).
    """
    a, b = np.asarray(run['pose_enc'], np.float64), np.asarray(base['pose_enc'], np.float64)
    if a.shape != b.shape:
        raise ValueError(f'pose_enc shapes differ: {a.shape} vs {b.shape}')
    rot = rotation_angle_deg(quaternion_matrices(a[:, 3:7]), quaternion_matrices(b[:, 3:7]))
    trans = np.linalg.norm(a[:, :3] - b[:, :3], axis=-1)
    trans_scale = float(np.sqrt(np.mean(np.sum(b[:, :3] ** 2, axis=-1))))
    fov = np.abs(a[:, 7:9] - b[:, 7:9]).max(axis=-1)
    da, db = np.asarray(run['depth'], np.float64), np.asarray(base['depth'], np.float64)
    if da.shape != db.shape:
        raise ValueError(f'depth shapes differ: {da.shape} vs {db.shape}')
    rel = (np.abs(da - db) / np.maximum(np.abs(db), np.finfo(np.float64).tiny)).reshape(
        len(db), -1) * 100
    late = slice(first_evicting, None)
    summary = {
        'rotation_mean_deg': float(rot.mean()),
        'rotation_max_deg': float(rot.max()),
        'rotation_mean_deg_evicting': float(rot[late].mean()) if len(rot[late]) else None,
        'translation_mean': float(trans.mean()),
        'translation_max': float(trans.max()),
        'translation_rms_of_base': trans_scale,
        'translation_mean_rel': float(trans.mean() / max(trans_scale, 1e-30)),
        'depth_median_pct': float(np.median(rel)),
        'depth_p90_pct': float(np.quantile(rel, 0.9)),
        'depth_frame_median_max_pct': float(np.median(rel, axis=1).max()),
        'fov_max_rad': float(fov.max()),
        'pose_enc_max_abs': float(np.abs(a - b).max()),
        'frames': int(len(rot)),
    }
    per_frame = {
        'rotation_deg': _rounded(rot),
        'translation': _rounded(trans),
        'depth_median_pct': _rounded(np.median(rel, axis=1)),
        'depth_p90_pct': _rounded(np.quantile(rel, 0.9, axis=1)),
        'fov_rad': _rounded(fov),
    }
    return {'summary': summary, 'per_frame': per_frame}


def _rounded(x: np.ndarray) -> List[float]:
    return [float(f'{v:.4g}') for v in np.asarray(x, np.float64)]


def pairs(done: Sequence[RunKind],
          reduced: AbstractSet[RunKind]) -> Tuple[RunKind, List[Tuple[RunKind, RunKind]]]:
    """
    Return the baseline and the (run, against) pairs to compare, in the order of ``done``.

    Every run is compared with the baseline (``ref-fp32``, else ``ours-fp32``); every run in
    ``reduced`` precision also with its own side's float32 run; and those of ours named
    below, when in reduced precision, also with ``ref-bf16`` directly.
    """
    baseline = RunKind.REF_FP32 if RunKind.REF_FP32 in done else RunKind.OURS_FP32
    out = [(r, baseline) for r in done if r is not baseline]
    out += [(r, r.own_fp32) for r in done
            if r in reduced and r.own_fp32 in done and r.own_fp32 is not baseline]
    out += [(r, RunKind.REF_BF16) for r in (RunKind.OURS_SHIPPED, RunKind.OURS_BF16,
                                            RunKind.OURS_BF16_FP8, RunKind.OURS_BF16_HEADS,
                                            RunKind.OURS_BF16_HEADS16)
            if r in done and r in reduced and RunKind.REF_BF16 in done]
    return baseline, out
