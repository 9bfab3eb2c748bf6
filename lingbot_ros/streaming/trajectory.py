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

Convention (upstream-architecture.md section 8): the pose encoding
``[T(3), q xyzw(4), fov_h, fov_w]`` read as ``E = [R(q) | T]`` is camera-to-world,
OpenCV camera axes; T is the camera centre. The TUM file therefore holds E as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

import numpy as np

PathLike = Union[str, Path]


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """
    Rotation matrices ``[..., 3, 3]`` of scalar-last quaternions ``[..., 4]``.

    The quaternion need not be unit length: only its direction matters (the model
    does not normalise it, and neither does the reference's conversion).
    """
    q = np.asarray(q, dtype=np.float64)
    x, y, z, w = np.moveaxis(q, -1, 0)
    two_s = 2.0 / np.sum(q * q, axis=-1)
    m = np.stack([
        1 - two_s * (y * y + z * z), two_s * (x * y - z * w), two_s * (x * z + y * w),
        two_s * (x * y + z * w), 1 - two_s * (x * x + z * z), two_s * (y * z - x * w),
        two_s * (x * z - y * w), two_s * (y * z + x * w), 1 - two_s * (x * x + y * y),
    ], axis=-1)
    return m.reshape(q.shape[:-1] + (3, 3))


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Return the unit scalar-last quaternion (``w >= 0``) of a rotation ``[3, 3]``."""
    r = np.asarray(r, dtype=np.float64)
    trace = np.trace(r)
    # Pick the largest of 4w^2, 4x^2, 4y^2, 4z^2 for a well-conditioned division.
    cand = np.array([1 + trace, 1 + r[0, 0] - r[1, 1] - r[2, 2],
                     1 - r[0, 0] + r[1, 1] - r[2, 2], 1 - r[0, 0] - r[1, 1] + r[2, 2]])
    k = int(np.argmax(cand))
    s = 2.0 * np.sqrt(max(cand[k], 1e-300))
    if k == 0:
        q = [(r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s, s / 4]
    elif k == 1:
        q = [s / 4, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s, (r[2, 1] - r[1, 2]) / s]
    elif k == 2:
        q = [(r[0, 1] + r[1, 0]) / s, s / 4, (r[1, 2] + r[2, 1]) / s, (r[0, 2] - r[2, 0]) / s]
    else:
        q = [(r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, s / 4, (r[1, 0] - r[0, 1]) / s]
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return -q if q[3] < 0 else q


def pose_enc_to_matrix(pose_enc: np.ndarray) -> np.ndarray:
    """``[..., 4, 4]`` matrices ``[R(q) | T]`` (camera-to-world) of encodings ``[..., 9]``."""
    enc = np.asarray(pose_enc, dtype=np.float64)
    out = np.zeros(enc.shape[:-1] + (4, 4))
    out[..., :3, :3] = quat_to_matrix(enc[..., 3:7])
    out[..., :3, 3] = enc[..., :3]
    out[..., 3, 3] = 1.0
    return out


def matrix_to_pose_enc(pose: np.ndarray, fov_hw: Sequence[float]) -> np.ndarray:
    """Encode a camera-to-world ``[4, 4]`` and fields of view as a 9-vector."""
    return np.concatenate([pose[:3, 3], matrix_to_quat(pose[:3, :3]), np.asarray(fov_hw)])


def intrinsics_from_fov(fov_h: np.ndarray, fov_w: np.ndarray, height: int,
                        width: int) -> np.ndarray:
    """Pinhole ``[..., 3, 3]`` in pixels of an ``height x width`` grid, centred."""
    fov_h = np.asarray(fov_h, dtype=np.float64)
    fov_w = np.asarray(fov_w, dtype=np.float64)
    k = np.zeros(fov_h.shape + (3, 3))
    k[..., 0, 0] = (width / 2.0) / np.tan(fov_w / 2.0)
    k[..., 1, 1] = (height / 2.0) / np.tan(fov_h / 2.0)
    k[..., 0, 2] = width / 2.0
    k[..., 1, 2] = height / 2.0
    k[..., 2, 2] = 1.0
    return k


def invert_rigid(pose: np.ndarray) -> np.ndarray:
    """Inverse of rigid ``[..., 4, 4]`` (or ``[..., 3, 4]``) transforms, as ``[..., 4, 4]``."""
    pose = np.asarray(pose, dtype=np.float64)
    r, t = pose[..., :3, :3], pose[..., :3, 3]
    out = np.zeros(pose.shape[:-2] + (4, 4))
    rt = np.swapaxes(r, -1, -2)
    out[..., :3, :3] = rt
    out[..., :3, 3] = -np.einsum('...ij,...j->...i', rt, t)
    out[..., 3, 3] = 1.0
    return out


def write_tum(path: PathLike, stamps_s: Iterable[float], poses_c2w: Iterable[np.ndarray]) -> int:
    """
    Write ``stamp tx ty tz qx qy qz qw`` lines (TUM RGB-D format); return the count.

    Stamps are seconds; poses camera-to-world ``[4, 4]`` (or ``[3, 4]``).
    """
    lines = []
    for stamp, pose in zip(stamps_s, poses_c2w):
        pose = np.asarray(pose, dtype=np.float64)
        q = matrix_to_quat(pose[:3, :3])
        values = [*pose[:3, 3], *q]
        lines.append(f'{float(stamp):.9f} ' + ' '.join(f'{v:.9g}' for v in values))
    Path(path).write_text('\n'.join(lines) + ('\n' if lines else ''))
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
    """Write named arrays as an uncompressed ``.npz`` (the fixtures' format)."""
    with open(path, 'wb') as fh:
        np.savez(fh, **{k: np.asarray(v) for k, v in arrays.items()})
