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
The robot's own frames: base pose from the camera's, ``map -> odom`` (REP-105), odometry files.

Naming: ``x_in_y`` is the pose of frame x in frame y, a ``[4, 4]`` rigid transform that
maps x's coordinates into y's (tf2's transform from parent y to child x). The camera frame
is the image's optical frame (x right, y down, z forward), as the model's poses are.
``base_to_camera`` is the pose of the camera in ``base_frame`` (the URDF's static
transform, metres). Everything here is numpy float64 and knows no ROS.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from pathlib import Path
from typing import Optional, Union

from lingbot_ros.streaming.trajectory import (interpolate_poses, invert_rigid, quat_to_matrix,
                                              read_tum)
import numpy as np

PathLike = Union[str, Path]


def rigid(rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """Return the ``[4, 4]`` transform ``[R | t]`` of a rotation ``[3, 3]`` and a translation."""
    out = np.eye(4)
    out[:3, :3] = rotation
    out[:3, 3] = translation
    return out


def parse_base_to_camera(text: str) -> np.ndarray:
    """
    Read ``"x y z qx qy qz qw"`` (metres, scalar-last quaternion) as a ``[4, 4]`` transform.

    The pose of the camera's optical frame in ``base_frame``, in the order
    ``static_transform_publisher`` takes it; commas may separate the numbers. The
    quaternion is normalised (only its direction matters); a zero one, a wrong count or
    anything not a finite number is a ValueError that says what was expected.
    """
    parts = str(text).replace(',', ' ').split()
    expected = 'expected 7 numbers "x y z qx qy qz qw" (metres, quaternion scalar last)'
    if len(parts) != 7:
        raise ValueError(f'base-to-camera {text!r}: {expected}, got {len(parts)}')
    try:
        values = np.array([float(p) for p in parts])
    except ValueError:
        raise ValueError(f'base-to-camera {text!r}: {expected}; not all are numbers') from None
    if not np.all(np.isfinite(values)):
        raise ValueError(f'base-to-camera {text!r}: {expected}; not all are finite')
    if np.linalg.norm(values[3:]) < 1e-6:
        raise ValueError(f'base-to-camera {text!r}: the quaternion is zero')
    return rigid(quat_to_matrix(values[3:]), values[:3])


def base_pose(camera_pose: np.ndarray, base_to_camera: np.ndarray,
              metres_per_unit: float = 1.0) -> np.ndarray:
    """
    Pose of ``base_frame`` in the camera pose's world frame: ``camera @ inv(base_to_camera)``.

    ``camera_pose`` ``[..., 4, 4]`` is camera-to-world whose translation is in units of
    ``metres_per_unit`` metres (1 for a metric pose; the fitted scale for a model-unit
    one). ``base_to_camera``'s lever arm is metric, so it is divided by
    ``metres_per_unit`` first: the base pose comes out in the camera pose's own units.
    """
    if not (math.isfinite(metres_per_unit) and metres_per_unit > 0):
        raise ValueError(f'metres_per_unit must be finite and positive, got {metres_per_unit}')
    lever = np.asarray(base_to_camera, dtype=np.float64).copy()
    lever[:3, 3] /= metres_per_unit
    return np.asarray(camera_pose, dtype=np.float64) @ invert_rigid(lever)


def camera_in_odom(base_in_odom: np.ndarray, base_to_camera: np.ndarray) -> np.ndarray:
    """Camera pose ``[..., 4, 4]`` in ``odom_frame`` (metres) from the odometry's base pose."""
    return np.asarray(base_in_odom, dtype=np.float64) @ np.asarray(base_to_camera, np.float64)


def map_to_odom(base_in_map: np.ndarray, base_in_odom: np.ndarray) -> np.ndarray:
    """
    Return ``odom_in_map``, the REP-105 ``map -> odom`` edge, at one stamp (metres).

    ``base_in_map`` is the estimated metric pose of ``base_frame`` in the map frame,
    ``base_in_odom`` the odometry's pose of the base at the same stamp. The result ``T``
    satisfies ``T @ base_in_odom == base_in_map``, so ``map -> odom -> base_frame``
    composes to the estimate while odometry keeps ``odom -> base_frame`` smooth.
    """
    return np.asarray(base_in_map, dtype=np.float64) @ invert_rigid(base_in_odom)


@dataclass(frozen=True)
class PairedOdometry:
    """
    The odometry's base pose at each frame's stamp.

    ``paired [N]`` says which frames have one; ``base_in_odom [N, 4, 4]`` (metres) is
    NaN where not (outside the odometry's time span, or inside a gap in it).
    """

    paired: np.ndarray
    base_in_odom: np.ndarray

    @property
    def count(self) -> int:
        """Frames with an odometry pose."""
        return int(np.count_nonzero(self.paired))


def pair_odometry(odom_stamps_s: np.ndarray, base_in_odom: np.ndarray,
                  frame_stamps_s: np.ndarray, max_gap_s: Optional[float] = None) -> PairedOdometry:
    """
    Interpolate the base's odometry poses (metres, stamps in seconds) at frame stamps.

    Linear in translation, slerp in rotation; frames outside the odometry's span, or
    between two odometry samples more than ``max_gap_s`` apart, are left unpaired.
    """
    paired, poses = interpolate_poses(odom_stamps_s, base_in_odom, frame_stamps_s, max_gap_s)
    return PairedOdometry(paired=paired, base_in_odom=poses)


def read_base_trajectory(path: PathLike, frame_stamps_s: np.ndarray,
                         max_gap_s: Optional[float] = None) -> PairedOdometry:
    """
    Read a TUM trajectory of ``base_frame`` in ``odom_frame`` and pair it with frame stamps.

    The file's lines are ``stamp tx ty tz qx qy qz qw`` (seconds, metres); a file that
    is not one is a ValueError naming the file.
    """
    try:
        with np.errstate(divide='ignore', invalid='ignore'):  # a zero quaternion: NaN below
            stamps, poses = read_tum(path)
    except ValueError as exc:
        raise ValueError(f'{path}: not a TUM trajectory ("stamp tx ty tz qx qy qz qw" '
                         f'per line): {exc}') from None
    if not (np.all(np.isfinite(stamps)) and np.all(np.isfinite(poses))):
        raise ValueError(f'{path}: the TUM trajectory holds values that are not finite')
    return pair_odometry(stamps, poses, frame_stamps_s, max_gap_s)
