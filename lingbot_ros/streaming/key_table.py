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
An open-addressing hash table from packed voxel keys to positions, probed a batch at once.

Keys are distinct non-negative int64 (the voxel map's packed indices). Linear probing
from a Fibonacci-hashed home slot; a dropped key leaves a tombstone, which ends no probe
and is reused by a later insert. The owner rebuilds the table (a larger one, re-inserting
what it holds) when :meth:`KeyTable.full` says so.
"""

from __future__ import annotations

import math

import numpy as np

EMPTY = -1      # slot never used
TOMBSTONE = -2  # slot of a dropped key: probing continues past it
_FIBONACCI = np.uint64(0x9E3779B97F4A7C15)  # 2**64 / golden ratio: spreads packed keys
MIN_TABLE_BITS = 12
MAX_LOAD = 0.5      # (keys + tombstones) / slots before the table is rebuilt
TARGET_LOAD = 0.25  # load of a freshly rebuilt table
PROBE_WINDOW = 8  # slots read per probing round: 64 bytes of keys
_STEPS = np.arange(PROBE_WINDOW)


class KeyTable:
    """Packed key -> int32 position; ``keys[slot]`` is a key, ``EMPTY`` or ``TOMBSTONE``."""

    def __init__(self, bits: int = MIN_TABLE_BITS) -> None:
        self.bits = bits
        self.keys = np.full(1 << bits, EMPTY, np.int64)
        self._values = np.zeros(1 << bits, np.int32)
        self.tombstones = 0

    @classmethod
    def for_keys(cls, expected: int) -> 'KeyTable':
        """Return an empty table sized for ``expected`` keys at the target load."""
        return cls(max(MIN_TABLE_BITS, math.ceil(math.log2(max(1, expected) / TARGET_LOAD))))

    def full(self, held: int, more: int) -> bool:
        """Tell whether ``more`` keys beside the ``held`` ones would pass the load bound."""
        return held + self.tombstones + more > MAX_LOAD * (1 << self.bits)

    def values(self, slots: np.ndarray) -> np.ndarray:
        """Return the positions stored at ``slots``."""
        return self._values[slots]

    def set_values(self, slots: np.ndarray, positions: np.ndarray) -> None:
        """Store ``positions`` at ``slots``."""
        self._values[slots] = positions

    def drop(self, slots: np.ndarray) -> None:
        """Drop the keys at ``slots`` (distinct, held), leaving tombstones."""
        self.keys[slots] = TOMBSTONE
        self.tombstones += len(slots)

    def _home(self, keys: np.ndarray) -> np.ndarray:
        """First slot to probe: Fibonacci hashing of the packed key (top bits)."""
        mixed = keys.astype(np.uint64) * _FIBONACCI
        return (mixed >> np.uint64(64 - self.bits)).astype(np.int64)

    def _window(self, pos: np.ndarray, width: int) -> np.ndarray:
        """Slots ``pos .. pos + width - 1`` (wrapping) of each pending key."""
        return (pos[:, None] + _STEPS[:width]) & ((1 << self.bits) - 1)

    def lookup(self, keys: np.ndarray) -> np.ndarray:
        """
        Slots of ``keys`` in the table, -1 where absent.

        Linear probing for the whole batch at once: a key's probe ends at its own slot
        or at the first empty one (tombstones do not end it). The first round reads the
        home slot only (it settles most keys); later rounds read a window of slots, so
        the few keys in long clusters need few rounds.
        """
        out = np.full(len(keys), -1, np.int64)
        pending, pos, width = np.arange(len(keys)), self._home(keys), 1
        while pending.size:
            window = self._window(pos, width)
            seen = np.take(self.keys, window)
            hit = seen == keys[pending, None]
            stop = hit | (seen == EMPTY)
            ends = stop.any(axis=1)
            rows = np.flatnonzero(ends)
            col = stop[rows].argmax(axis=1)
            ok = hit[rows, col]
            out[pending[rows[ok]]] = window[rows[ok], col[ok]]
            pending, pos, width = pending[~ends], pos[~ends] + width, PROBE_WINDOW
        return out

    def insert(self, keys: np.ndarray) -> np.ndarray:
        """
        Claim slots for ``keys`` (distinct, absent) and return them.

        Each key takes the first free slot (empty or tombstone) of its probe sequence, so
        no empty slot lies between its home and it. Keys aiming at the same slot in one
        round: one wins, the others look again from where they were.
        """
        out = np.empty(len(keys), np.int64)
        pending, pos, width = np.arange(len(keys)), self._home(keys), 1
        while pending.size:
            window = self._window(pos, width)
            free = np.take(self.keys, window) < 0
            has = free.any(axis=1)
            rows = np.flatnonzero(has)
            target = window[rows, free[rows].argmax(axis=1)]
            claim = keys[pending[rows]]
            before = self.keys[target]
            self.keys[target] = claim  # where several keys aim at one slot, one wins
            won = self.keys[target] == claim
            out[pending[rows[won]]] = target[won]
            self.tombstones -= int(np.count_nonzero(before[won] == TOMBSTONE))
            retry = ~has
            retry[rows[~won]] = True
            pos = np.where(has, pos, pos + width)
            pending, pos, width = pending[retry], pos[retry], PROBE_WINDOW
        return out
