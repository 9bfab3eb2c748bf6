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

"""The camera images the DDS tests send, and what they read back from the node's messages."""

from typing import Optional

import numpy as np
from sensor_msgs.msg import Image


def random_image(stamp_ns: int, frame_id: str, h: int = 48, w: int = 64,
                 seed: Optional[int] = None, encoding: str = 'rgb8') -> Image:
    """Return an ``h x w`` image of seeded noise (seed: the stamp unless given), stamped."""
    rng = np.random.default_rng(stamp_ns if seed is None else seed)
    msg = Image(height=h, width=w, encoding=encoding, step=w * 3)
    msg.data = rng.integers(0, 256, h * w * 3, dtype=np.uint8).tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = frame_id
    return msg


def stamp_of(msg) -> int:
    """Return a message's header stamp in nanoseconds."""
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def pose_vector(msg) -> np.ndarray:
    """Return a PoseStamped's position and quaternion as ``[x, y, z, qx, qy, qz, qw]``."""
    p, q = msg.pose.position, msg.pose.orientation
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w])
