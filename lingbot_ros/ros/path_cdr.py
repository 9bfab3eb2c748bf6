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
``~/path`` as serialized bytes, assembled from poses each serialized once.

Publishing a ``nav_msgs/Path`` message makes rclpy convert every pose from Python, each
time, all of it holding the GIL: the worker's step stalled behind every path (its p99 rose
with the path's length). Here each
pose is serialized once, by rclpy, when it is added; a path is rclpy's serialization of a
Path holding only its first pose, with the sequence length raised to the full count,
followed by the other poses' own serializations less their 4-byte encapsulation header.

That is exact in CDR: a field is aligned to its size counted from the payload's start,
and a pose ends with float64 fields, so every pose after the first starts 8-aligned in
the path just as a pose serialized alone starts at 0. :func:`assembly_holds` checks the
result against rclpy's serialization of a whole path once per process; where it differs
(an rmw with another encoding) the node sends Path messages as before.
"""

from __future__ import annotations

import functools
import struct
from typing import Sequence

from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Header

ENCAPSULATION = 4  # bytes before the payload: representation id and options


def pose_cdr(pose: PoseStamped) -> bytes:
    """Serialize one pose of the path (rclpy's serializer, encapsulation included)."""
    return serialize_message(pose)


def path_cdr(header: Header, poses: Sequence[bytes]) -> bytes:
    """Return the serialized ``nav_msgs/Path`` of ``header`` and serialized ``poses``."""
    if not poses:
        return serialize_message(Path(header=header))
    first = deserialize_message(poses[0], PoseStamped)
    head = serialize_message(Path(header=header, poses=[first]))
    # the sequence length sits right after the frame_id string, 4-aligned in the payload
    frame = len(header.frame_id.encode('utf-8')) + 1
    at = ENCAPSULATION + _align4(12 + frame)
    order = '<' if head[1] & 1 else '>'  # CDR_LE or CDR_BE, from the encapsulation id
    if struct.unpack_from(order + 'I', head, at)[0] != 1:
        raise ValueError('unexpected Path layout: the sequence length is not where CDR puts it')
    parts = [head[:at], struct.pack(order + 'I', len(poses)), head[at + 4:]]
    parts += [p[ENCAPSULATION:] for p in poses[1:]]
    return b''.join(parts)


def _align4(n: int) -> int:
    return (n + 3) & ~3


@functools.lru_cache(maxsize=None)
def assembly_holds(frame_id: str) -> bool:
    """Whether an assembled path reads back as the Path it holds (checked once a frame name)."""
    poses = []
    for i in range(3):
        pose = PoseStamped(header=Header(frame_id=frame_id))
        pose.header.stamp.sec, pose.header.stamp.nanosec = 1_700_000_000 + i, 123 + i
        pose.pose.position.x, pose.pose.orientation.w = 0.5 * i, 1.0
        poses.append(pose)
    header = Header(frame_id=frame_id)
    header.stamp.sec = 1_700_000_003
    whole = Path(header=header, poses=poses)
    try:
        got = path_cdr(header, [pose_cdr(p) for p in poses])
        # byte equality cannot be asked: rclpy leaves the alignment padding uninitialised
        return len(got) == len(serialize_message(whole)) and \
            deserialize_message(got, Path) == whole
    except Exception:  # noqa: BLE001 (any failure: send Path messages instead)
        return False
