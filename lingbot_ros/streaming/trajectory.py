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

The formulas live once, in :mod:`lingbot_ros.model.pose` (torch); these are float64
numpy faces of them for the session and the ROS layer.

Convention (upstream-architecture.md section 8): the pose encoding
``[T(3), q xyzw(4), fov_h, fov_w]`` read as ``E = [R(q) | T]`` is camera-to-world,
OpenCV camera axes; T is the camera centre. The TUM file therefore holds E as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping, Sequence, Union

from lingbot_ros.model import pose
import numpy as np
import torch

PathLike = Union[str, Path]


def _f64(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(a, dtype=np.float64))


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """
    Rotation matrices ``[..., 3, 3]`` of scalar-last quaternions ``[..., 4]``.

    The quaternion need not be unit length: only its direction matters (the model
    does not normalise it, and neither does the reference's conversion).
    """
    return pose.quaternion_to_rotation(_f64(q)).numpy()


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """Return unit scalar-last quaternions (``w >= 0``) of rotations ``[..., 3, 3]``."""
    return pose.rotation_to_quaternion(_f64(r)).numpy()


def pose_enc_to_matrix(pose_enc: np.ndarray) -> np.ndarray:
    """``[..., 4, 4]`` matrices ``[R(q) | T]`` (camera-to-world) of encodings ``[..., 9]``."""
    enc = _f64(pose_enc)
    extrinsic, _ = pose.pose_encoding_to_camera(enc, (1, 1))
    return pose.to_homogeneous(extrinsic).numpy()


def matrix_to_pose_enc(pose_c2w: np.ndarray, fov_hw: Sequence[float]) -> np.ndarray:
    """Encode a camera-to-world ``[4, 4]`` and fields of view as a 9-vector."""
    return np.concatenate([pose_c2w[:3, 3], matrix_to_quat(pose_c2w[:3, :3]),
                           np.asarray(fov_hw)])


def intrinsics_from_fov(fov_h: np.ndarray, fov_w: np.ndarray, height: int,
                        width: int) -> np.ndarray:
    """Pinhole ``[..., 3, 3]`` in pixels of an ``height x width`` grid, centred."""
    return pose.intrinsics_from_fov(_f64(fov_h), _f64(fov_w), (height, width)).numpy()


def invert_rigid(pose_c2w: np.ndarray) -> np.ndarray:
    """Inverse of rigid ``[..., 4, 4]`` (or ``[..., 3, 4]``) transforms, as ``[..., 4, 4]``."""
    return pose.se3_inverse(pose.to_homogeneous(_f64(pose_c2w))).numpy()


def write_tum(path: PathLike, stamps_s: Iterable[float], poses_c2w: Iterable[np.ndarray]) -> int:
    """
    Write ``stamp tx ty tz qx qy qz qw`` lines (TUM RGB-D format); return the count.

    Stamps are seconds; poses camera-to-world ``[4, 4]`` (or ``[3, 4]``).
    """
    lines = []
    for stamp, c2w in zip(stamps_s, poses_c2w):
        c2w = np.asarray(c2w, dtype=np.float64)
        values = [*c2w[:3, 3], *matrix_to_quat(c2w[:3, :3])]
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
