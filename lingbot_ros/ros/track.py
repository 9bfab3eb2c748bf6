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
One camera's published track.

The last pose (odometry's finite difference), the poses ``~/save_trajectory`` writes, and
the poses ``~/path`` sends. Written by the output thread only, in the order the worker
handed results over (a map restart included); the services read it under
:attr:`Track.lock`. Both lists are bounded.
"""

from __future__ import annotations

from collections import deque
import threading
from typing import Any, Deque, Optional

import numpy as np

TRAJECTORY_LENGTH = 100_000  # poses kept for ~/save_trajectory (about 2 h at 15 Hz)


class Track:
    """The poses a camera has published in its current map."""

    def __init__(self, trajectory_length: int = TRAJECTORY_LENGTH) -> None:
        self.lock = threading.Lock()
        self.previous: Optional[tuple] = None  # (stamp_ns, pose) of the last published
        self._trajectory: Deque[tuple] = deque(maxlen=trajectory_length)
        self._path: Deque[Any] = deque()       # the ~/path poses (PoseStamped)

    def add(self, stamp_ns: int, pose: np.ndarray, path_pose: Any = None,
            path_length: int = 1) -> None:
        """Record one published pose (and its ``~/path`` pose, keeping ``path_length``)."""
        with self.lock:
            self.previous = (stamp_ns, pose)
            self._trajectory.append((stamp_ns, pose))
            if path_pose is None:
                return
            keep = max(1, path_length)
            if self._path.maxlen != keep:
                self._path = deque(self._path, maxlen=keep)
            self._path.append(path_pose)

    def path(self) -> list:
        """Return a copy of the ``~/path`` poses, oldest first."""
        with self.lock:
            return list(self._path)

    def clear(self) -> None:
        """Forget the old map's poses (a reset or a new map of the session)."""
        with self.lock:
            self.previous = None
            self._trajectory.clear()
            self._path.clear()

    def records(self) -> list:
        """Return a copy of the kept (stamp_ns, pose) pairs, oldest first."""
        with self.lock:
            return list(self._trajectory)

    def __len__(self) -> int:
        with self.lock:
            return len(self._trajectory)
