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

"""Cache statistics as plain numbers, read from host-side counters (no device sync)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CacheStats:
    """One stream's cache state; what ``/diagnostics`` reports per camera."""

    frames: int = 0             # committed frames (scale + keyframes), evicted ones included
    keyframes: int = 0          # committed streaming keyframes
    rollbacks: int = 0          # non-keyframes rolled back
    evictions: int = 0          # window frames whose patch pages were recycled
    scale_pages: int = 0        # pinned pages (scale frames)
    live_pages: int = 0         # window pages in use
    free_pages: int = 0         # patch pages free in this stream's share of the pool
    pending_pages: int = 0      # pages held by an open (uncommitted) call
    special_tokens: int = 0     # special tokens cached (6 per committed frame)
    special_pages: int = 0      # pages holding them
    bytes_used: int = 0         # KV bytes in use by this stream (all layers, K and V)
    bytes_reserved: int = 0     # KV bytes allocated for this stream (all layers, K and V)
    overflow_events: int = 0    # times a pool would have overflowed (handled by the session)
    window_index: int = 0       # how many times the session opened a new window
    sliding_window: int = 0     # window frames in effect (below the configured one after OOM)

    def as_dict(self) -> dict:
        return asdict(self)
