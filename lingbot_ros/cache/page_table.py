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
The page table of one or more streams, in FlashInfer's CSR form, updated in place.

Because every stream's visible set is one run of consecutive pages, a stream's entry
is three host integers (first page, page count, tokens in the last page). Once per
frame (never per layer) they are written into a pinned host mirror, which FlashInfer's
``plan()`` reads on the host, and copied asynchronously into fixed-size int32 device
tensors; the page indices are sliced on the device from the pool's ``page_ids``. No
tensor is built from a Python list and nothing is read back from the device.

The pinned mirrors form a small ring guarded by CUDA events, so an asynchronous copy
still in flight is never overwritten by the next frame's update.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Sequence

import numpy as np
import torch


class Run(NamedTuple):
    """One stream's visible pages: ``first .. first+count-1``, ``last_len`` used in the last."""

    first: int
    count: int
    last_len: int
    queries: int          # query tokens of the stream in this step


class PageTable:
    """CSR page table (qo_indptr, kv_indptr, kv_indices, last_page_len) for ``streams``."""

    RING = 4

    def __init__(self, streams: int, max_pages: int, page_size: int,
                 page_ids: torch.Tensor) -> None:
        self.streams = streams
        self.page_size = page_size
        self.page_ids = page_ids
        device = page_ids.device
        self.device = device
        int32 = torch.int32
        self.kv_indices = torch.zeros(max(1, max_pages), dtype=int32, device=device)
        self.kv_indptr = torch.zeros(streams + 1, dtype=int32, device=device)
        self.qo_indptr = torch.zeros(streams + 1, dtype=int32, device=device)
        self.last_page_len = torch.zeros(streams, dtype=int32, device=device)
        pin = device.type == 'cuda'
        width = 3 * streams + 2
        self._host = [torch.zeros(width, dtype=int32, pin_memory=pin) for _ in range(self.RING)]
        self._events: list[Optional[torch.cuda.Event]] = [None] * self.RING
        self._slot = 0
        self.runs: tuple[Run, ...] = ()

    # host mirrors of the current slot (views into one pinned buffer)
    @property
    def qo_indptr_host(self) -> torch.Tensor:
        return self._host[self._slot][:self.streams + 1]

    @property
    def kv_indptr_host(self) -> torch.Tensor:
        return self._host[self._slot][self.streams + 1:2 * self.streams + 2]

    @property
    def last_page_len_host(self) -> torch.Tensor:
        return self._host[self._slot][2 * self.streams + 2:]

    @property
    def total_pages(self) -> int:
        return sum(r.count for r in self.runs)

    def tokens(self, i: int) -> int:
        """Visible tokens of stream ``i`` (host arithmetic)."""
        r = self.runs[i]
        return 0 if r.count == 0 else (r.count - 1) * self.page_size + r.last_len

    def update(self, runs: Sequence[Run]) -> None:
        """Describe ``runs`` (one per stream): host mirror, then in-place device copies."""
        if len(runs) != self.streams:
            raise ValueError(f'runs={len(runs)} is not allowed: {self.streams} streams')
        if self.device.type == 'cuda':
            ev = torch.cuda.Event()
            ev.record()
            self._events[self._slot] = ev
            self._slot = (self._slot + 1) % self.RING
            pending = self._events[self._slot]
            if pending is not None and not pending.query():
                pending.synchronize()   # only if the host ran RING frames ahead
        host = self._host[self._slot].numpy()
        s = self.streams
        qo = host[:s + 1]
        kv = host[s + 1:2 * s + 2]
        last = host[2 * s + 2:]
        qo[0] = kv[0] = 0
        offset = 0
        for i, r in enumerate(runs):
            qo[i + 1] = qo[i] + r.queries
            kv[i + 1] = kv[i] + r.count
            last[i] = r.last_len
            self.kv_indices[offset:offset + r.count].copy_(
                self.page_ids[r.first:r.first + r.count])
            offset += r.count
        self.runs = tuple(runs)
        buf = self._host[self._slot]
        self.qo_indptr.copy_(buf[:s + 1], non_blocking=True)
        self.kv_indptr.copy_(buf[s + 1:2 * s + 2], non_blocking=True)
        self.last_page_len.copy_(buf[2 * s + 2:], non_blocking=True)

    def pages_of(self, i: int) -> np.ndarray:
        """Page numbers of stream ``i`` (host, from the run; for tests and diagnostics)."""
        r = self.runs[i]
        return np.arange(r.first, r.first + r.count)
