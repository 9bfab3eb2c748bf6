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
Which frame's patch page sits in which slot: host bookkeeping, once per frame.

Slots count away from the special region (slot 0 is the page just below it). The
allocator keeps the visible patch pages in slots ``0 .. run-1`` at every moment, so
with the special pages right after them the visible set is one contiguous run of
memory. It never touches tensors: it returns ``moves``, ``(src_slot, dst_slot)`` pairs
the caller copies (for all layers at once) in the given order.

Frames are numbered in commit order; frame ``f`` is a scale frame iff
``f < scale_frames``, exactly as in the dense reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

Move = tuple[int, int]


@dataclass
class _Pending:
    """An open call: where its frames went and what it hid."""

    first: int                         # frame number of the call's first frame
    count: int                         # frames in the call
    defer: bool
    slots: list                        # per call frame: its slot, or None (not stored)
    hidden: list = field(default_factory=list)   # committed frames hidden by the call
    parked: list = field(default_factory=list)   # slots where the hidden frames wait
    dropped: int = 0                   # call frames hidden by the call itself

    @property
    def stored(self) -> int:
        return sum(s is not None for s in self.slots)


class SlotAllocator:
    """Patch-slot bookkeeping for one stream (scale pinned, window oldest-first)."""

    def __init__(self, scale_frames: int, sliding_window: int, capacity: int) -> None:
        self.scale_frames = scale_frames
        self.sliding_window = sliding_window
        self.capacity = capacity
        self.reset()

    def reset(self) -> None:
        """Forget every frame."""
        self.frames = 0                     # committed frames
        self.slot_frame: list = []          # slot -> committed frame (None: parked away)
        self.pending: Optional[_Pending] = None

    # --- queries -------------------------------------------------------------------

    @property
    def resident(self) -> int:
        """Count committed frames whose patch pages stay visible once no call is open."""
        return len(self.slot_frame)   # parked frames keep their (empty) slot entry

    @property
    def run(self) -> int:
        """Count slots the current attention sees (slots ``0 .. run-1``)."""
        p = self.pending
        if p is None:
            return len(self.slot_frame)
        return len(self.slot_frame) - len(p.hidden) + p.stored

    @property
    def used(self) -> int:
        """Count slots holding data: the run plus frames parked during an open call."""
        p = self.pending
        return self.run + (len(p.hidden) if p is not None else 0)

    def _split(self, first: int, count: int) -> tuple[list[int], list[int]]:
        frames = range(first, first + count)
        return ([f for f in frames if f < self.scale_frames],
                [f for f in frames if f >= self.scale_frames])

    def needed(self, count: int, defer: bool) -> int:
        """Count slots a call of ``count`` frames would occupy (what ``begin`` checks)."""
        scale, window = self._split(self.frames, count)
        if defer:
            return self.resident + count
        return self.resident + len(scale) + min(len(window), self.sliding_window)

    # --- transaction ---------------------------------------------------------------

    def begin(self, count: int, defer: bool) -> list[Move]:
        """
        Open a call; return the moves that keep the new run contiguous.

        Deferred: the call's frames extend the run, nothing moves. Not deferred: each
        window frame the call hides is parked just past the new run (one move each, so
        a rollback can bring it back) and a call frame takes its slot.
        """
        if self.pending is not None:
            raise RuntimeError('begin() while a call is pending: commit or roll back first')
        first = self.frames
        r = len(self.slot_frame)
        if defer:
            slots = list(range(r + count - 1, r - 1, -1))   # later frame, lower slot
            self.pending = _Pending(first, count, True, slots)
            return []
        scale, window = self._split(first, count)
        committed_window = sorted(f for f in self.slot_frame if f >= self.scale_frames)
        visible = set((committed_window + window)[-self.sliding_window:])
        hidden = [f for f in committed_window if f not in visible]
        stored = scale + [f for f in window if f in visible]
        new_run = r - len(hidden) + len(stored)
        slot_of = {f: s for s, f in enumerate(self.slot_frame)}
        parked = list(range(new_run, new_run + len(hidden)))
        holes = [slot_of[f] for f in hidden]
        moves = list(zip(holes, parked))
        for h in holes:
            self.slot_frame[h] = None
        free = sorted(holes) + list(range(r, new_run))
        stored_set = set(stored)
        slots: list = []
        for f in range(first, first + count):
            slots.append(free.pop() if f in stored_set else None)
        self.pending = _Pending(first, count, False, slots, hidden, parked,
                                dropped=count - len(stored))
        return moves

    def commit(self) -> tuple[list[Move], int]:
        """Keep the open call; run the (deferred) eviction. Return (moves, evicted)."""
        p = self._take()
        self.frames += p.count
        for i, slot in enumerate(p.slots):
            if slot is None:
                continue
            if slot < len(self.slot_frame):
                self.slot_frame[slot] = p.first + i
            else:
                self.slot_frame += [None] * (slot + 1 - len(self.slot_frame))
                self.slot_frame[slot] = p.first + i
        if not p.defer:
            return [], len(p.hidden) + p.dropped
        window = sorted(f for f in self.slot_frame if f >= self.scale_frames)
        evict = set(window[:max(0, len(window) - self.sliding_window)])
        if not evict:
            return [], 0
        new_run = len(self.slot_frame) - len(evict)
        holes = [s for s in range(new_run) if self.slot_frame[s] in evict]
        tail = [s for s in range(new_run, len(self.slot_frame))
                if self.slot_frame[s] not in evict]
        moves = list(zip(tail, holes))
        for src, dst in moves:
            self.slot_frame[dst] = self.slot_frame[src]
        del self.slot_frame[new_run:]
        return moves, len(evict)

    def rollback(self) -> list[Move]:
        """Drop the open call; bring parked frames back. Return the moves."""
        p = self._take()
        moves = []
        for f, src in zip(p.hidden, p.parked):
            dst = self.slot_frame.index(None)
            self.slot_frame[dst] = f
            moves.append((src, dst))
        return moves

    def _take(self) -> _Pending:
        if self.pending is None:
            raise RuntimeError('commit()/rollback() without an open call')
        p, self.pending = self.pending, None
        return p

    # --- saved state ----------------------------------------------------------------

    def restore(self, frames: int, slot_frame: list) -> None:
        """
        Take the slots of a saved stream (``frames`` committed, no call open).

        ``slot_frame`` as :attr:`slot_frame` was then: every scale frame, at most
        ``sliding_window`` window frames, each once, within ``capacity``. Anything else
        is a ValueError and changes nothing.
        """
        if self.pending is not None:
            raise RuntimeError('restore() while a call is pending: commit or roll back first')
        slot_frame = [int(f) for f in slot_frame]
        scale = [f for f in slot_frame if f < self.scale_frames]
        window = [f for f in slot_frame if f >= self.scale_frames]
        why = None
        if frames < 0 or any(not 0 <= f < frames for f in slot_frame):
            why = f'frames outside 0..{frames - 1}'
        elif len(set(slot_frame)) != len(slot_frame):
            why = 'a frame in two slots'
        elif sorted(scale) != list(range(min(frames, self.scale_frames))):
            why = 'scale frames missing'
        elif len(window) > self.sliding_window or len(slot_frame) > self.capacity:
            why = f'{len(slot_frame)} slots for a window of {self.sliding_window}'
        if why is not None:
            raise ValueError(f'slots {slot_frame} of {frames} frames are not allowed: {why}')
        self.frames = frames
        self.slot_frame = slot_frame

    # --- invariants (tests) --------------------------------------------------------

    def check(self) -> None:
        """Raise AssertionError unless slots are distinct, contiguous and within capacity."""
        p = self.pending
        taken = [s for s, f in enumerate(self.slot_frame) if f is not None]
        if p is not None:
            taken += [s for s in p.slots if s is not None] + p.parked
        else:
            assert None not in self.slot_frame, 'hole left after commit/rollback'
        assert len(taken) == len(set(taken)), f'slot used twice: {sorted(taken)}'
        assert sorted(taken) == list(range(len(taken))), f'slots not contiguous: {taken}'
        assert len(taken) <= self.capacity, f'{len(taken)} slots > capacity {self.capacity}'
        frames = [f for f in self.slot_frame if f is not None]
        assert len(set(frames)) == len(frames), 'frame stored twice'
