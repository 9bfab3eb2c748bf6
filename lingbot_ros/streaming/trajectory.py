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
Pose arithmetic on the host (numpy, float64) and trajectory files.

The formulas are those of :mod:`lingbot_ros.model.pose` (torch, on the model's device),
written again in numpy float64 for the host: in torch each frame's pose, intrinsics and
quaternion are a couple of hundred small CPU ops, each letting go of the GIL and waiting
to take it back, on the worker's and the output thread's critical paths. ``test_pose.py``
holds the two to the same numbers.

Convention (upstream-architecture.md section 8): the pose encoding
``[T(3), q xyzw(4), fov_h, fov_w]`` read as ``E = [R(q) | T]`` is camera-to-world,
OpenCV camera axes; T is the camera centre. The TUM file therefore holds E as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence, Union

from lingbot_ros.streaming.atomic import atomic_file
import numpy as np

PathLike = Union[str, Path]


def _f64(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64)


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """
    Rotation matrices ``[..., 3, 3]`` of scalar-last quaternions ``[..., 4]``.

    The quaternion need not be unit length: only its direction matters (the model
    does not normalise it, and neither does the reference's conversion).
    """
    q = _f64(q)
    x, y, z, w = np.moveaxis(q, -1, 0)
    two_s = 2.0 / (x * x + y * y + z * z + w * w)
    rows = (
        1 - two_s * (y * y + z * z), two_s * (x * y - z * w), two_s * (x * z + y * w),
        two_s * (x * y + z * w), 1 - two_s * (x * x + z * z), two_s * (y * z - x * w),
        two_s * (x * z - y * w), two_s * (y * z + x * w), 1 - two_s * (x * x + y * y),
    )
    return np.stack(rows, -1).reshape(q.shape[:-1] + (3, 3))


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """
    Return unit scalar-last quaternions (``w >= 0``) of rotations ``[..., 3, 3]``.

    Per matrix, the best-conditioned of the four closed forms (the largest of w, x, y, z),
    so it is accurate near 180-degree turns too.
    """
    r = _f64(r)
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = np.moveaxis(
        r.reshape(r.shape[:-2] + (9,)), -1, 0)
    # four times the square of each component (w, x, y, z)
    four_sq = np.stack([1 + m00 + m11 + m22, 1 + m00 - m11 - m22,
                        1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1)
    # candidate (w, x, y, z) scaled by 4 x the pivot component, one row per pivot
    cand = np.stack([
        np.stack([four_sq[..., 0], m21 - m12, m02 - m20, m10 - m01], -1),
        np.stack([m21 - m12, four_sq[..., 1], m10 + m01, m02 + m20], -1),
        np.stack([m02 - m20, m10 + m01, four_sq[..., 2], m12 + m21], -1),
        np.stack([m10 - m01, m02 + m20, m12 + m21, four_sq[..., 3]], -1),
    ], -2)
    pivot = np.argmax(four_sq, -1)[..., None, None]
    wxyz = np.take_along_axis(cand, pivot, -2)[..., 0, :]
    wxyz = wxyz / np.linalg.norm(wxyz, axis=-1, keepdims=True)
    wxyz = np.where(wxyz[..., :1] < 0, -wxyz, wxyz)
    return wxyz[..., [1, 2, 3, 0]]


def pose_enc_to_matrix(pose_enc: np.ndarray) -> np.ndarray:
    """``[..., 4, 4]`` matrices ``[R(q) | T]`` (camera-to-world) of encodings ``[..., 9]``."""
    enc = _f64(pose_enc)
    out = np.zeros(enc.shape[:-1] + (4, 4))
    out[..., :3, :3] = quat_to_matrix(enc[..., 3:7])
    out[..., :3, 3] = enc[..., :3]
    out[..., 3, 3] = 1.0
    return out


def matrix_to_pose_enc(pose_c2w: np.ndarray, fov_hw: Sequence[float]) -> np.ndarray:
    """Encode a camera-to-world ``[4, 4]`` and fields of view as a 9-vector."""
    return np.concatenate([pose_c2w[:3, 3], matrix_to_quat(pose_c2w[:3, :3]),
                           np.asarray(fov_hw)])


def intrinsics_from_fov(fov_h: np.ndarray, fov_w: np.ndarray, height: int,
                        width: int) -> np.ndarray:
    """Pinhole ``[..., 3, 3]`` in pixels of an ``height x width`` grid, centred."""
    fov_h, fov_w = _f64(fov_h), _f64(fov_w)
    k = np.zeros(fov_h.shape + (3, 3))
    k[..., 0, 0] = (width / 2.0) / np.tan(fov_w / 2.0)
    k[..., 1, 1] = (height / 2.0) / np.tan(fov_h / 2.0)
    k[..., 0, 2] = width / 2
    k[..., 1, 2] = height / 2
    k[..., 2, 2] = 1.0
    return k


def invert_rigid(pose_c2w: np.ndarray) -> np.ndarray:
    """Inverse of rigid ``[..., 4, 4]`` (or ``[..., 3, 4]``) transforms, as ``[..., 4, 4]``."""
    pose_c2w = _f64(pose_c2w)
    rot_t = np.swapaxes(pose_c2w[..., :3, :3], -1, -2)
    out = np.zeros(pose_c2w.shape[:-2] + (4, 4))
    out[..., :3, :3] = rot_t
    out[..., :3, 3] = -(rot_t @ pose_c2w[..., :3, 3:4])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def interpolate_poses(stamps_s: np.ndarray, poses: np.ndarray, query_s: np.ndarray,
                      max_gap_s: Optional[float] = None) -> tuple[np.ndarray, np.ndarray]:
    """
    Rigid poses ``[N, 4, 4]`` sampled at ``stamps_s`` (seconds), read at ``query_s``.

    Translation is linear and rotation a slerp between the two samples that bracket a
    query. A query before the first or after the last sample, or inside a gap longer
    than ``max_gap_s``, is not paired: extrapolating a trajectory, or bridging a gap
    in it, invents motion (a query on a sample's own stamp is always paired). Samples
    are sorted by stamp and a repeated stamp keeps its first pose. Returns ``paired
    [M]`` (bool) and the poses ``[M, 4, 4]``, NaN where not paired.
    """
    stamps, poses = _f64(stamps_s).reshape(-1), _f64(poses).reshape(-1, 4, 4)
    query = _f64(query_s).reshape(-1)
    if len(stamps) != len(poses):
        raise ValueError(f'{len(stamps)} stamps for {len(poses)} poses')
    stamps, first = np.unique(stamps, return_index=True)  # sorted, first of each stamp
    poses = poses[first]
    out = np.full((len(query), 4, 4), np.nan)
    if len(stamps) == 0:
        return np.zeros(len(query), dtype=bool), out
    left = np.clip(np.searchsorted(stamps, query, side='right') - 1, 0, len(stamps) - 1)
    right = np.minimum(left + 1, len(stamps) - 1)
    span = stamps[right] - stamps[left]
    paired = (query >= stamps[0]) & (query <= stamps[-1])
    if max_gap_s is not None:  # a query on a sample needs no neighbour
        paired &= (span <= max_gap_s) | (query == stamps[left])
    alpha = np.divide(query - stamps[left], span, out=np.zeros_like(query), where=span > 0)
    alpha = np.clip(alpha, 0.0, 1.0)[paired]
    a, b = poses[left[paired]], poses[right[paired]]
    trans = (1 - alpha)[:, None] * a[:, :3, 3] + alpha[:, None] * b[:, :3, 3]
    out[paired] = np.eye(4)
    out[paired, :3, 3] = trans
    out[paired, :3, :3] = quat_to_matrix(slerp(matrix_to_quat(a[:, :3, :3]),
                                               matrix_to_quat(b[:, :3, :3]), alpha))
    return paired, out


def slerp(q0: np.ndarray, q1: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """
    Spherical interpolation of unit scalar-last quaternions ``[..., 4]`` (shortest arc).

    ``alpha`` in [0, 1] per quaternion pair; nearly equal rotations fall back to a
    normalised linear blend, where the slerp's ``sin`` ratio loses precision.
    """
    q0, q1, alpha = _f64(q0), _f64(q1), _f64(alpha)[..., None]
    dot = np.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = np.where(dot < 0, -q1, q1)
    dot = np.clip(np.abs(dot), 0.0, 1.0)
    theta = np.arccos(dot)
    sin_t = np.sin(theta)
    near = sin_t < 1e-6
    safe = np.where(near, 1.0, sin_t)
    w0 = np.where(near, 1 - alpha, np.sin((1 - alpha) * theta) / safe)
    w1 = np.where(near, alpha, np.sin(alpha * theta) / safe)
    out = w0 * q0 + w1 * q1
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def write_tum(path: PathLike, stamps_s: Iterable[float], poses_c2w: Iterable[np.ndarray]) -> int:
    """
    Write ``stamp tx ty tz qx qy qz qw`` lines (TUM RGB-D format); return the count.

    Stamps are seconds; poses camera-to-world ``[4, 4]`` (or ``[3, 4]``). Written whole
    or not at all.
    """
    lines = []
    for stamp, c2w in zip(stamps_s, poses_c2w):
        c2w = np.asarray(c2w, dtype=np.float64)
        values = [*c2w[:3, 3], *matrix_to_quat(c2w[:3, :3])]
        lines.append(f'{float(stamp):.9f} ' + ' '.join(f'{v:.9g}' for v in values))
    with atomic_file(path) as fh:
        fh.write(('\n'.join(lines) + ('\n' if lines else '')).encode('ascii'))
    return len(lines)


def read_tum(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a TUM file back: stamps ``[N]`` (seconds) and camera-to-world ``[N, 4, 4]``."""
    rows = [line.split() for line in Path(path).read_text().splitlines()
            if line.strip() and not line.startswith('#')]
    data = np.array(rows, dtype=np.float64).reshape(-1, 8)
    poses = np.tile(np.eye(4), (len(data), 1, 1))
    poses[:, :3, :3] = quat_to_matrix(data[:, 4:8])
    poses[:, :3, 3] = data[:, 1:4]
    return data[:, 0], poses


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Write named arrays as an uncompressed ``.npz`` (the fixtures' format), whole."""
    with atomic_file(path) as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()})


@dataclass(frozen=True)
class PublishedTrack:
    """
    A camera's published track: ``stamp_ns [n]`` and ``pose [n, 4, 4]`` as they were sent.

    ``frame``: the map convention the poses are in (metres where the camera's scale part
    says its outputs were metric, else model units).
    """

    frame: str
    stamp_ns: np.ndarray
    pose: np.ndarray

    @staticmethod
    def of(records: list, frame: str) -> 'PublishedTrack':
        """Return a copy of ``(stamp_ns, pose)`` records (a track's, oldest first)."""
        return PublishedTrack(
            frame=frame, stamp_ns=np.array([s for s, _ in records], dtype=np.int64),
            pose=np.array([p for _, p in records], dtype=np.float64).reshape(-1, 4, 4))

    def records(self) -> list:
        """Return the ``(stamp_ns, pose)`` pairs, oldest first."""
        return [(int(s), p) for s, p in zip(self.stamp_ns, self.pose)]
