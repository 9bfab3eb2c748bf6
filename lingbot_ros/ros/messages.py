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
FrameResult to ROS messages: pose, odometry, depth, points, camera info, transform.

Pure functions, no node: every message carries the input image's stamp. Poses are
of the camera's optical frame (REP-103 optical axes: x right, y down, z forward) in
the map frame; with the ``rep103`` map convention the map is x forward, y left, z up
at the first camera pose, otherwise it is the first camera's optical frame.
"""

from __future__ import annotations

import array
from typing import Optional, Sequence

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped, TransformStamped
from lingbot_ros.ros.conventions import map_from_optical, MapConvention
from lingbot_ros.streaming.map_cloud import packed_rows, unproject
from lingbot_ros.streaming.products import depth_on_input
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.trajectory import matrix_to_quat
from nav_msgs.msg import Odometry
import numpy as np
from sensor_msgs.msg import CameraInfo, Image, PointCloud2, PointField
from std_msgs.msg import Header


def stamp_msg(stamp_ns: int) -> Time:
    """Nanoseconds to builtin_interfaces/Time."""
    return Time(sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000))


def stamp_ns(stamp: Time) -> int:
    """Return builtin_interfaces/Time as integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def map_pose(result: FrameResult, convention: MapConvention) -> np.ndarray:
    """Camera (optical) to map, 4x4, in the configured map convention."""
    pose = np.asarray(result.pose_c2w, dtype=np.float64)
    return map_from_optical(convention) @ pose if convention == MapConvention.REP103 else pose


def _pose(matrix: np.ndarray) -> Pose:
    q = matrix_to_quat(matrix[:3, :3])
    p = Pose()
    p.position.x, p.position.y, p.position.z = (float(v) for v in matrix[:3, 3])
    p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w = (float(v) for v in q)
    return p


def pose_stamped(matrix: np.ndarray, stamp: int, frame: str) -> PoseStamped:
    """Build PoseStamped of the camera in ``frame``."""
    return PoseStamped(header=Header(stamp=stamp_msg(stamp), frame_id=frame), pose=_pose(matrix))


def covariance(values: Sequence[float]) -> list:
    """
    Return a 6x6 covariance as a message holds it, row-major (x, y, z, then rotations).

    ``values``: its diagonal (six numbers), or the whole ``[6, 6]`` matrix.
    """
    a = np.asarray(values, dtype=np.float64)
    return [float(v) for v in (a if a.shape == (6, 6) else np.diag(a)).reshape(-1)]


def odometry(matrix: np.ndarray, stamp: int, frame: str, child: str,
             previous: Optional[tuple[int, np.ndarray]] = None,
             pose_covariance: Sequence[float] = (0.0,) * 6,
             twist_covariance: Sequence[float] = (0.0,) * 6,
             pose: Optional[Pose] = None) -> Odometry:
    """
    Build Odometry; twist (in the child frame) by finite difference when known.

    The covariances are the stated diagonals (the model gives none), or with a metric scale
    the fit's ``[6, 6]`` pose covariance: an all-zero one would tell a filter the pose is
    exact. ``pose``: ``matrix`` already as a Pose message (the
    pose_stamped's), to convert the rotation once per frame.
    """
    msg = Odometry(header=Header(stamp=stamp_msg(stamp), frame_id=frame), child_frame_id=child)
    msg.pose.pose = _pose(matrix) if pose is None else pose
    msg.pose.covariance = covariance(pose_covariance)
    msg.twist.covariance = covariance(twist_covariance)
    if previous is not None and stamp > previous[0]:
        dt = (stamp - previous[0]) * 1e-9
        rel = np.linalg.inv(previous[1]) @ matrix  # motion in the previous camera frame
        lin = rel[:3, 3] / dt
        r = rel[:3, :3]
        angle = np.arccos(np.clip((np.trace(r) - 1) / 2, -1.0, 1.0))
        axis = np.array([r[2, 1] - r[1, 2], r[0, 2] - r[2, 0], r[1, 0] - r[0, 1]])
        norm = np.linalg.norm(axis)
        ang = axis / norm * angle / dt if norm > 1e-12 else np.zeros(3)
        t = msg.twist.twist
        t.linear.x, t.linear.y, t.linear.z = (float(v) for v in lin)
        t.angular.x, t.angular.y, t.angular.z = (float(v) for v in ang)
    return msg


def transform(matrix: np.ndarray, stamp: int, frame: str, child: str,
              pose: Optional[Pose] = None) -> TransformStamped:
    """Build the map -> camera TransformStamped (for tf2_ros); ``pose`` as for odometry."""
    msg = TransformStamped(header=Header(stamp=stamp_msg(stamp), frame_id=frame),
                           child_frame_id=child)
    pose = _pose(matrix) if pose is None else pose
    tr = msg.transform
    tr.translation.x, tr.translation.y, tr.translation.z = (
        pose.position.x, pose.position.y, pose.position.z)
    tr.rotation = pose.orientation
    return msg


def camera_info(result: FrameResult, frame: str) -> CameraInfo:
    """Build the model's pinhole intrinsics at the input resolution (no distortion)."""
    k = np.asarray(result.intrinsics, dtype=np.float64)
    h, w = result.input_hw
    msg = CameraInfo(header=Header(stamp=stamp_msg(result.stamp_ns), frame_id=frame),
                     height=int(h), width=int(w), distortion_model='plumb_bob')
    msg.d = [0.0] * 5
    msg.k = [float(v) for v in k.reshape(-1)]
    msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    p = np.zeros((3, 4))
    p[:3, :3] = k
    msg.p = [float(v) for v in p.reshape(-1)]
    return msg


def depth_image(result: FrameResult, frame: str) -> Optional[Image]:
    """
    Build a 32FC1 depth (model units) registered to ``camera_info``; None without depth.

    The depth the session already resampled (``result.depth_input``) is only copied in;
    otherwise it is resampled here.
    """
    if result.depth is None and result.depth_input is None:
        return None
    h, w = (int(v) for v in result.input_hw)
    if result.depth_input is not None:
        data = _bytes(result.depth_input)
    else:
        data = _zeros(h * w * 4)  # the message's own buffer: the resampler writes straight in
        depth_on_input(result, out=np.frombuffer(data, dtype=np.float32).reshape(h, w))
    msg = Image(header=Header(stamp=stamp_msg(result.stamp_ns), frame_id=frame), height=h,
                width=w, encoding='32FC1', is_bigendian=int(not np.little_endian),
                step=w * 4)
    msg.data = data
    return msg


def _zeros(nbytes: int) -> array.array:
    """Return a zeroed ``uint8[]`` buffer of the array type rosidl stores data in."""
    return array.array('B', bytes(1)) * nbytes


_POINT_FIELDS = [PointField(name='x', offset=0, datatype=PointField.FLOAT32, count=1),
                 PointField(name='y', offset=4, datatype=PointField.FLOAT32, count=1),
                 PointField(name='z', offset=8, datatype=PointField.FLOAT32, count=1),
                 PointField(name='rgb', offset=12, datatype=PointField.FLOAT32, count=1)]


def _cloud(rows: np.ndarray, stamp: int, frame: str, fields: list) -> PointCloud2:
    """Wrap :func:`~lingbot_ros.streaming.map_cloud.packed_rows` rows as a PointCloud2."""
    n, step = int(rows.shape[0]), 4 * len(fields)
    if rows.dtype != np.float32 or rows.shape[1:] != (len(fields),):
        raise ValueError(f'rows of shape {rows.shape} and dtype {rows.dtype} are invalid: '
                         f'expected float32 [N, {len(fields)}]')
    msg = PointCloud2(header=Header(stamp=stamp_msg(stamp), frame_id=frame), height=1,
                      width=n, fields=fields, is_bigendian=not np.little_endian,
                      point_step=step, row_step=step * n, is_dense=True)
    msg.data = _bytes(rows)
    return msg


def point_cloud(result: FrameResult, pose_map: np.ndarray, frame: str, decimation: int,
                min_confidence: float, percentile: float) -> Optional[PointCloud2]:
    """
    Unproject depth into ``frame`` (xyz + packed rgb), filtered as the map's points.

    Rows the session already made (``result.points_rows``, with the filters and map
    convention of the parameters at that frame) are only wrapped.
    """
    if result.points_rows is not None:
        return _cloud(result.points_rows, result.stamp_ns, frame, _POINT_FIELDS)
    if result.depth is None:
        return None
    points = unproject(result, pose_map, decimation, min_confidence, percentile)
    return _cloud(packed_rows(points.xyz, points.rgb), result.stamp_ns, frame, _POINT_FIELDS)


def _bytes(arr: np.ndarray) -> array.array:
    """
    Return a message's ``uint8[]`` data: one copy into the array type rosidl stores.

    Handing ``bytes`` costs a second copy and, where rosidl checks fields (older distros
    always, newer ones with ROS_PYTHON_CHECK_FIELDS=1), a Python-level check of every byte.
    (Serializing the rest and joining the data in behind it, as ``path_cdr`` does for the
    path's many small poses, measured no faster for one flat buffer and held the GIL
    longer in rclpy's copy of the bytes.)
    """
    out = array.array('B')
    out.frombytes(np.ascontiguousarray(arr).reshape(-1).view(np.uint8))
    return out


_MAP_FIELDS = _POINT_FIELDS + [PointField(name='confidence', offset=16,
                                          datatype=PointField.FLOAT32, count=1)]


def map_cloud(rows: np.ndarray, stamp: int, frame: str) -> PointCloud2:
    """Build the accumulated map's PointCloud2 from ``MapCloud.rows()``: xyz, rgb, confidence."""
    return _cloud(rows, stamp, frame, _MAP_FIELDS)
