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
What each model call did to the caches, typed; the parity fixtures' record is one view of it.

A session fills one :class:`CallStats` as a call begins (what it attends to) and completes
it when the call is committed or rolled back (what the caches hold then). The fixtures'
``kv_stats*.json`` steps are :meth:`CallStats.as_record`, so the parity tests and
``lingbot-ros-replay --kv-stats`` read the reference's key names, while the session hands
fields, not dictionary keys, from method to method.
"""

from dataclasses import dataclass, replace
import enum
import math
from typing import Optional, Tuple


class CallPhase(enum.Enum):
    """Which kind of model call it was (the fixtures' ``phase``)."""

    SCALE = 'scale'    # a window's first call: its scale frames together
    STREAM = 'stream'  # one streamed frame
    RESEED = 'reseed'  # a new window's first call: the kept keyframes of the one before

    @property
    def first(self) -> bool:
        """Whether the call opens its window (its frames attend to each other only)."""
        return self is not CallPhase.STREAM


class CacheDecision(enum.Enum):
    """What a keyframe decision taken after the forward (flow mode) did with the call."""

    COMMIT = 'commit'
    ROLLBACK = 'rollback'


@dataclass(frozen=True)
class Attended:
    """Keys a call attends to, from the committed counters and its own size."""

    agg_tokens_block0: int                   # the aggregator's global attention, block 0
    camera_frames_per_iter: Tuple[int, ...]  # the camera head's cache, per iteration


@dataclass(frozen=True)
class Resident:
    """What the caches hold once the call is committed or rolled back."""

    total_frames_processed: int   # the window's time (committed frames)
    patch_frames_resident: int    # frames whose patch tokens the aggregator keeps
    special_frames_resident: int  # frames whose special tokens it keeps
    visible_kv_tokens: int        # what the next call sees in the aggregator
    camera_frame_idx: int         # frames the window has seen (kept or not)
    camera_cache_frames: Tuple[int, ...]  # the camera head's cache, per iteration


@dataclass(frozen=True)
class CallStats:
    """One model call: its place in the stream, the keys it attended to, the caches after."""

    call_index: int
    window_index: int
    frame_indices: Tuple[int, ...]
    phase: CallPhase
    rope_time_index_start: int
    attended: Attended
    is_keyframe: Optional[bool]        # None while a flow decision waits for the outputs
    after: Optional[Resident] = None   # None until committed or rolled back
    flow_px: Optional[float] = None    # the flow a decision after the forward was taken on

    @property
    def decision(self) -> Optional[CacheDecision]:
        """Return the decision taken after the forward; None where it was known before."""
        if self.flow_px is None:
            return None
        return CacheDecision.COMMIT if self.is_keyframe else CacheDecision.ROLLBACK

    def finished(self, keep: bool, after: Resident, flow_px: float = math.nan) -> 'CallStats':
        """Return this call committed (``keep``) or rolled back, with the caches after it."""
        return replace(self, is_keyframe=bool(keep), after=after,
                       flow_px=None if math.isnan(flow_px) else float(flow_px))

    def as_record(self) -> dict:
        """Return the call as a step of the fixtures' ``kv_stats*.json`` (their key names)."""
        record = {
            'call_index': self.call_index, 'window_index': self.window_index,
            'frame_indices': list(self.frame_indices), 'phase': self.phase.value,
            'is_keyframe': self.is_keyframe,
            'rope_time_index_start': self.rope_time_index_start,
            'agg_attended_kv_tokens_block0': [self.attended.agg_tokens_block0],
            'camera_attended_kv_frames_per_iter': list(self.attended.camera_frames_per_iter),
        }
        if self.flow_px is not None:
            record['flow_magnitude'] = self.flow_px
            record['decision'] = self.decision.value
        if self.after is not None:
            a = self.after
            record['after_forward'] = {
                'total_frames_processed': a.total_frames_processed,
                'patch_frames_resident': a.patch_frames_resident,
                'special_frames_resident': a.special_frames_resident,
                'visible_kv_tokens': a.visible_kv_tokens,
                'camera_frame_idx': a.camera_frame_idx,
                'camera_cache_frames': list(a.camera_cache_frames),
            }
        return record
