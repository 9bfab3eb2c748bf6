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
Where a resumed stream finds itself: its first poses against the saved keyframes.

A session keeps the camera positions of its current map's keyframes (scale frames
included), bounded like its trajectory (:class:`KeyframeTrack`); a saved state carries
them. After a resume the first frames may come from elsewhere in the mapped place: the
model attends to the saved keyframes and answers in their frame. :class:`ResumeReport`
measures, for each of the first resumed frames, the distance from its camera to the
nearest saved keyframe's, in model units (times a metric scale, where one is known,
metres). Whether a small distance means the robot found itself depends on the weights:
with random weights the figures say nothing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional, Tuple

from lingbot_ros.streaming.result import FrameResult, FrameType
import numpy as np

RESUME_REPORT_FRAMES = 10  # resumed frames measured against the saved keyframes


@dataclass(frozen=True)
class KeyframePositions:
    """The keyframes of one map, oldest first: frame index, stamp, camera position."""

    map_epoch: int
    index: np.ndarray       # [n] int64
    stamp_ns: np.ndarray    # [n] int64
    position: np.ndarray    # [n, 3] float64, map frame, model units

    def __len__(self) -> int:
        return int(self.index.shape[0])


class KeyframeTrack:
    """The current map's keyframe positions, the newest ``maxlen`` (a new map clears it)."""

    def __init__(self, maxlen: int) -> None:
        self._kept: Deque[Tuple[int, int, np.ndarray]] = deque(maxlen=maxlen)
        self._epoch: Optional[int] = None
        self.report: Optional[ResumeReport] = None

    def bound(self, maxlen: int) -> None:
        """Keep at most ``maxlen`` keyframes from now on (the newest)."""
        if self._kept.maxlen != maxlen:
            self._kept = deque(self._kept, maxlen=maxlen)

    def clear(self) -> None:
        """Forget every keyframe and the resume report (a reset)."""
        self._kept.clear()
        self._epoch = None
        self.report = None

    def landed(self, result: FrameResult) -> None:
        """Take a frame handed out by the session: measure it, keep it if it is a keyframe."""
        if self.report is not None:
            self.report.observe(result)
        if result.map_epoch != self._epoch:
            self._kept.clear()
            self._epoch = result.map_epoch
        if result.frame_type != FrameType.NON_KEYFRAME:
            self._kept.append((result.index, result.stamp_ns,
                               np.array(result.pose_c2w[:3, 3], dtype=np.float64)))

    def export(self) -> KeyframePositions:
        """Return the keyframes kept (a copy)."""
        kept = list(self._kept)
        return KeyframePositions(
            map_epoch=-1 if self._epoch is None else self._epoch,
            index=np.array([k[0] for k in kept], dtype=np.int64),
            stamp_ns=np.array([k[1] for k in kept], dtype=np.int64),
            position=np.array([k[2] for k in kept], dtype=np.float64).reshape(-1, 3))

    def restore(self, saved: KeyframePositions, report_frames: int) -> None:
        """Continue from saved keyframes; measure the next ``report_frames`` against them."""
        self._kept.clear()
        self._epoch = None if saved.map_epoch < 0 else saved.map_epoch
        for i, s, p in zip(saved.index, saved.stamp_ns, saved.position):
            self._kept.append((int(i), int(s), np.array(p, dtype=np.float64)))
        self.report = ResumeReport(saved, report_frames) if len(saved) and report_frames \
            else None


@dataclass(frozen=True)
class ResumedFrame:
    """One resumed frame against the saved keyframes: how far, and from which."""

    index: int
    stamp_ns: int
    distance: float             # model units, camera centre to camera centre
    keyframe_index: int         # the nearest saved keyframe
    keyframe_stamp_ns: int


class ResumeReport:
    """The first ``frames`` resumed frames, each against the nearest saved keyframe."""

    def __init__(self, saved: KeyframePositions, frames: int = RESUME_REPORT_FRAMES) -> None:
        self.saved = saved
        self.limit = int(frames)
        self.frames: List[ResumedFrame] = []
        self.new_map = False   # the stream started another map before the report was done

    @property
    def done(self) -> bool:
        """Whether no more frames will be measured."""
        return self.new_map or len(self.frames) >= self.limit

    def observe(self, result: FrameResult) -> None:
        """Measure a resumed frame (until ``frames`` are, or the map changes)."""
        if self.done:
            return
        if result.map_epoch != self.saved.map_epoch:
            self.new_map = True
            return
        gaps = np.linalg.norm(self.saved.position - result.pose_c2w[:3, 3], axis=1)
        j = int(np.argmin(gaps))
        self.frames.append(ResumedFrame(
            index=result.index, stamp_ns=result.stamp_ns, distance=float(gaps[j]),
            keyframe_index=int(self.saved.index[j]),
            keyframe_stamp_ns=int(self.saved.stamp_ns[j])))

    def distances(self, metres_per_unit: float = 1.0) -> np.ndarray:
        """Return the measured distances, in model units (or metres, given the scale)."""
        return np.array([f.distance for f in self.frames], dtype=np.float64) * metres_per_unit

    def summary(self, metres_per_unit: Optional[float] = None) -> str:
        """Say in one line how the resumed frames sit against the saved keyframes."""
        unit = 'model units' if metres_per_unit is None else 'm'
        d = self.distances(1.0 if metres_per_unit is None else metres_per_unit)
        head = f'{len(self.frames)} of {self.limit} resumed frames against ' \
               f'{len(self.saved)} saved keyframes'
        if d.size:
            head += (f': nearest {d.min():.3g} / median {np.median(d):.3g} / farthest '
                     f'{d.max():.3g} {unit}')
        if self.new_map:
            head += '; the stream then started a new map'
        return head
