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
What the scale sources read besides the model: a registered depth image, an odometry topic.

:class:`DepthInbox` keeps a camera's last depth images (as received, converted to metres
when taken) for the output thread to pair with a frame by stamp; :class:`OdometryInbox`
keeps the base's recent poses from a ``nav_msgs/Odometry`` topic and reads them at a
frame's stamp. Each is written by its subscription's callback and read by the output
thread, under its own lock. Both read only message fields, so they work on any object
with them; nothing here creates a subscription.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
import threading
from typing import Any, Deque, List, Optional, Tuple

from lingbot_ros.ros.convert import _buffer
from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.trajectory import interpolate_poses, quat_to_matrix
import numpy as np

DEPTH_FRAMES = 30          # depth images kept per camera: more than the frames in flight
ODOMETRY_SAMPLES = 2000    # odometry poses kept (20 s at 100 Hz)
ODOMETRY_MAX_GAP_S = 0.5   # a frame between two odometry poses further apart is not paired
# Units of the depth encodings a registered depth image comes in (REP-118): metres per unit.
DEPTH_ENCODINGS = {'16UC1': (np.uint16, 1e-3), 'mono16': (np.uint16, 1e-3),
                   '32FC1': (np.float32, 1.0)}


def stamp_ns(stamp: Any) -> int:
    """Return a builtin_interfaces/Time as integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


@dataclass(frozen=True)
class _Depth:
    stamp_ns: int
    pixels: np.ndarray    # [h, w] as received (uint16 or float32), native byte order
    metres_per_unit: float


def depth_pixels(msg: Any) -> Tuple[np.ndarray, float]:
    """
    Return a depth image's pixels ``[h, w]`` (a copy, native order) and metres per unit.

    16UC1 / mono16 in millimetres, 32FC1 in metres (REP-118); anything else, or a size
    the data does not hold, is a ValueError that says what was expected.
    """
    enc = str(msg.encoding).strip()
    if enc not in DEPTH_ENCODINGS:
        raise ValueError(f'depth encoding {enc!r}: expected one of {sorted(DEPTH_ENCODINGS)}')
    dtype, unit = DEPTH_ENCODINGS[enc]
    h, w, step = int(msg.height), int(msg.width), int(msg.step)
    item = np.dtype(dtype).itemsize
    buf = _buffer(msg.data)
    if h < 1 or w < 1 or step < w * item or buf.size < step * h:
        raise ValueError(f'depth image {w}x{h} with step {step} and {buf.size} bytes: '
                         f'expected at least {w * item} bytes a row, {h} rows')
    order = '>' if msg.is_bigendian else '<'
    rows = buf[:step * h].reshape(h, step)[:, :w * item]
    pixels = np.ascontiguousarray(rows).view(np.dtype(dtype).newbyteorder(order))
    return pixels.astype(dtype), unit


class DepthInbox:
    """One camera's recent depth images, paired with a frame by the nearest stamp."""

    def __init__(self, capacity: int = DEPTH_FRAMES) -> None:
        self._lock = threading.Lock()
        self._frames: Deque[_Depth] = deque(maxlen=max(1, int(capacity)))
        self.received = 0
        self.rejected = 0
        self.last_error = ''

    def put(self, msg: Any) -> bool:
        """Keep one depth image message (the subscription's callback); False if refused."""
        try:
            pixels, unit = depth_pixels(msg)
        except ValueError as exc:
            with self._lock:
                self.rejected += 1
                self.last_error = str(exc)
            return False
        with self._lock:
            self.received += 1
            self._frames.append(_Depth(stamp_ns(msg.header.stamp), pixels, unit))
        return True

    def take(self, stamp: int, tolerance_ns: int) -> Optional[np.ndarray]:
        """
        Return the depth (float32 metres; 0 or NaN: none) nearest ``stamp``, within tolerance.

        Images older than the one returned are dropped: frames come in stamp order.
        """
        with self._lock:
            if not self._frames:
                return None
            best = min(self._frames, key=lambda d: abs(d.stamp_ns - stamp))
            if abs(best.stamp_ns - stamp) > tolerance_ns:
                return None
            while self._frames and self._frames[0] is not best:
                self._frames.popleft()
        out = best.pixels.astype(np.float32)
        if best.metres_per_unit != 1.0:
            out *= np.float32(best.metres_per_unit)
        return out


def odometry_pose(msg: Any) -> np.ndarray:
    """Return a nav_msgs/Odometry's pose (child in header frame) as ``[4, 4]`` metres."""
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    return rigid(quat_to_matrix(np.array([q.x, q.y, q.z, q.w], dtype=np.float64)),
                 np.array([p.x, p.y, p.z], dtype=np.float64))


class OdometryInbox:
    """
    The base's recent odometry poses from a ``nav_msgs/Odometry`` topic, read at any stamp.

    A message whose frames are not ``odom_frame`` -> ``base_frame`` (an empty one is
    taken as meant), that goes back in time, or whose pose is not finite is refused
    and counted; :attr:`last_error` says the latest reason.
    """

    def __init__(self, odom_frame: str, base_frame: str,
                 capacity: int = ODOMETRY_SAMPLES) -> None:
        self._frames = (odom_frame.lstrip('/'), base_frame.lstrip('/'))
        self._lock = threading.Lock()
        self._capacity = max(2, int(capacity))
        self._stamps: List[int] = []
        self._poses: List[np.ndarray] = []
        self.received = 0
        self.rejected = 0
        self.last_error = ''

    def _refuse(self, text: str) -> bool:
        with self._lock:
            self.rejected += 1
            self.last_error = text
        return False

    def put(self, msg: Any) -> bool:
        """Keep one odometry message (the subscription's callback); False if refused."""
        parent, child = msg.header.frame_id.lstrip('/'), msg.child_frame_id.lstrip('/')
        odom, base = self._frames
        if (parent and parent != odom) or (child and child != base):
            return self._refuse(f'odometry of {child or "?"} in {parent or "?"}: expected '
                                f'{base} in {odom} (set base_frame and odom_frame)')
        q = msg.pose.pose.orientation
        if not abs(float(np.linalg.norm([q.x, q.y, q.z, q.w])) - 1.0) <= 1e-3:  # NaN too
            return self._refuse('odometry quaternion not of unit length')
        pose = odometry_pose(msg)
        if not np.all(np.isfinite(pose)):
            return self._refuse('odometry pose not finite')
        stamp = stamp_ns(msg.header.stamp)
        with self._lock:
            if self._stamps and stamp <= self._stamps[-1]:
                self.rejected += 1
                self.last_error = 'odometry stamp not after the previous one'
                return False
            self._stamps.append(stamp)
            self._poses.append(pose)
            if len(self._stamps) > self._capacity:
                del self._stamps[0], self._poses[0]
            self.received += 1
        return True

    def at(self, stamp: int) -> Optional[np.ndarray]:
        """Return the base's pose in odom at ``stamp`` (interpolated), or None outside its span."""
        with self._lock:
            if not self._stamps:
                return None
            right = bisect.bisect_left(self._stamps, stamp)
            lo, hi = max(0, right - 1), min(len(self._stamps), right + 1)
            stamps = np.array(self._stamps[lo:hi], dtype=np.float64) * 1e-9
            poses = np.stack(self._poses[lo:hi])
        paired, pose = interpolate_poses(stamps, poses, np.array([stamp * 1e-9]),
                                         ODOMETRY_MAX_GAP_S)
        return pose[0] if paired[0] else None
