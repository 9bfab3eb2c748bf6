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
Image and PointCloud2 as serialized bytes, their pixel or point data copied in once.

Published as messages, a depth image or a cloud crosses Python three times: numpy into
the message's ``array`` (a copy), the message into rclpy's C struct (a copy and, where
rosidl checks fields, a look at every byte), and the struct into CDR (a copy). For the
map's 10 MB that took 14-19 ms on the 2-core development machine, serialized 9-10 ms (rclpy
still copies the bytes once while it holds the GIL; for a frame's depth and points the two
measured the same). Here rclpy serializes the message with its data left empty (a few hundred
bytes), and the data goes in behind it in one join: the sequence length is the 4 bytes
just before where the data goes, and in both types only a fixed tail follows the data
(PointCloud2's ``is_dense``, one byte that needs no alignment; nothing in Image).
:func:`assembly_holds` checks one assembled message per type against rclpy's own reading
once per process; where it does not hold (an rmw with another encoding) the node sends
messages as before.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Union

import numpy as np
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image, PointCloud2

# bytes after the data sequence in each type's serialization (fields that follow ``data``)
_TAIL = {Image: 0, PointCloud2: 1}


def blob_cdr(msg: Union[Image, PointCloud2], data: np.ndarray) -> bytes:
    """
    Return ``msg`` serialized with ``data``'s bytes as its ``data`` field.

    ``msg.data`` must be empty; ``data`` is any C-contiguous array (its raw bytes are
    taken as they are in memory).
    """
    tail = _TAIL[type(msg)]
    if len(msg.data):
        raise ValueError('blob_cdr: the message must come with empty data')
    head = serialize_message(msg)
    at = len(head) - tail - 4
    order = '<' if head[1] & 1 else '>'  # CDR_LE or CDR_BE, from the encapsulation id
    if struct.unpack_from(order + 'I', head, at)[0] != 0:
        raise ValueError(f'unexpected {type(msg).__name__} layout: no empty data sequence '
                         'before its tail')
    payload = raw_bytes(data)
    return b''.join((head[:at], struct.pack(order + 'I', payload.nbytes), payload,
                     head[len(head) - tail:]))


def raw_bytes(data: np.ndarray) -> memoryview:
    """Return the bytes of ``data`` in C order, without a copy when it is contiguous."""
    return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))


@functools.lru_cache(maxsize=None)
def assembly_holds(kind: Any) -> bool:
    """Whether an assembled ``kind`` (Image or PointCloud2) reads back as the message it holds."""
    data = np.arange(37, dtype=np.uint8)  # odd length: the tail must not need padding
    if kind is Image:
        msg = Image(height=1, width=37, encoding='mono8', step=37)
    elif kind is PointCloud2:
        msg = PointCloud2(height=1, width=37, point_step=1, row_step=37, is_dense=True)
    else:
        return False
    msg.header.frame_id = 'lingbot_check'
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_700_000_000, 123
    try:
        got = deserialize_message(blob_cdr(msg, data), kind)
        msg.data = data.tobytes()
        return got == msg
    except Exception:  # noqa: BLE001 (any failure: send messages instead)
        return False
