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
One camera's state, split by the thread that writes it.

- :class:`IntakeGate`: that camera's image callback (the stamp gate, the publishers'
  numbering, the first frame's size); activate renews the numbering before subscribing.
- :class:`CameraStream` itself: the worker (the session, cache statistics, map epoch,
  frame id, the receive times of frames in flight, the size votes).
- ``track`` (:class:`~lingbot_ros.ros.track.Track`): the output thread.
- ``counters``: several threads count into them, each write under their own lock.

configure and activate write the names, the topic and ``resume`` (what a resume came to)
before any of those threads run; diagnostics only read. ``pending_reset`` is the one
signal across threads: the callback sets it, the worker serves it.
"""

from __future__ import annotations

from enum import Enum
import threading
from typing import Any, Optional

from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.ros.counters import CameraCounters, SequenceGaps
from lingbot_ros.ros.resume_status import ResumeStatus
from lingbot_ros.ros.track import Track, TRAJECTORY_LENGTH

# Consecutive frames of one new size that mean the camera changed resolution for good (a
# driver restarted with other settings): then a new session; fewer are odd frames, rejected.
RESIZE_AFTER = 3


class StampVerdict(Enum):
    """What the stamp gate says about a new frame's stamp."""

    NEW = 'new'
    DUPLICATE = 'duplicate'
    OUT_OF_ORDER = 'out_of_order'  # a little older than the newest: dropped
    BACKWARD = 'backward'          # older by more than the window: a new session


class IntakeGate:
    """A camera's intake side, written by its image callback only."""

    def __init__(self) -> None:
        self.last_stamp: Optional[int] = None  # newest admitted stamp
        self.gaps = SequenceGaps()             # the publishers' sample numbering
        self.input_hw: Optional[tuple] = None  # size of the first frame

    def admit(self, stamp_ns: int, reorder_window_ns: int = 0) -> StampVerdict:
        """
        Check a stamp against the newest admitted one.

        Older by at most ``reorder_window_ns`` is a frame out of order (the newest stays);
        older by more is a source that went back in time (it becomes the newest).
        """
        last = self.last_stamp
        if last is not None and stamp_ns == last:
            return StampVerdict.DUPLICATE
        if last is not None and 0 < last - stamp_ns <= reorder_window_ns:
            return StampVerdict.OUT_OF_ORDER
        self.last_stamp = stamp_ns
        if last is not None and stamp_ns < last:
            return StampVerdict.BACKWARD
        return StampVerdict.NEW


class CameraStream:
    """One camera: its session side (the worker's), and its intake gate, track and counters."""

    def __init__(self, index: int, name: str, topic: str, session: Any, window: int,
                 trajectory_length: int = TRAJECTORY_LENGTH) -> None:
        self.index = index
        self.name = name
        self.topic = topic
        self.counters = CameraCounters(window)
        self.intake = IntakeGate()             # the image callback's
        self.track = Track(trajectory_length)  # the output thread's
        self.pending_reset = threading.Event()  # set by the callback, served by the worker
        self.resume: Optional[ResumeStatus] = None  # configure's, with resume_state set
        # the worker's
        self.session = session
        self.cache_stats = CacheStats()
        self.sliding_window = 0   # configured window frames (0: unknown); stats say what runs
        self.map_epoch: Optional[int] = None   # the session map the published poses are in
        self.frame_id = ''
        self.received_at: dict = {}            # stamp -> monotonic receive time, in flight
        self.waited_ms: dict = {}              # stamp -> ms it waited in the queue, in flight
        self.nan_run = 0                       # non-finite outputs in a row
        self._new_size: Optional[tuple] = None  # (h, w) other than the session's, and
        self._new_size_run = 0                  # how many frames in a row came in it

    def size_changed_for_good(self, hw: tuple) -> bool:
        """Count a frame of a size the session refused; True after RESIZE_AFTER in a row."""
        if hw == self._new_size:
            self._new_size_run += 1
        else:
            self._new_size, self._new_size_run = hw, 1
        return self._new_size_run >= RESIZE_AFTER

    def size_accepted(self) -> None:
        self._new_size, self._new_size_run = None, 0

    def forget(self) -> None:
        """
        Clear the session side's memory of the old map (worker thread, after a reset).

        The track is the output thread's: the sink's ``map_restarted``, handed over after
        the old map's last results, clears it in order.
        """
        self.received_at.clear()
        self.waited_ms.clear()
        self.nan_run = 0
        self.map_epoch = None
        self.cache_stats = CacheStats()
        self.size_accepted()
        self.counters.set_buffered(0)
