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
Several streams (cameras) in one pool, served by one attention call per layer.

Each stream keeps its own :class:`PagedStreamCache` (its own page table, transaction
and counters); a step begins, commits or rolls back each stream on its own. The batch
writes every stream's new keys and values, then makes one attention call over all
streams' visible runs: FlashInfer paged prefill on CUDA, the PyTorch paged stand-in
(``paged_sdpa``) elsewhere; ``sdpa`` runs the dense kernel once per stream instead.
Outputs equal separate runs of the streams (test_cache_multistream.py).
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from .backends import (AttentionBackend, FlashInferPaged, paged_sdpa_run, resolve_backend,
                       sdpa_run)
from .page_table import PageTable
from .stream import PagedStreamCache


class StreamBatch:
    """Batched attention for streams of one pool; ``q`` is ``[streams, H, N, D]``."""

    def __init__(self, caches: Sequence[PagedStreamCache],
                 backend: Union[AttentionBackend, str] = AttentionBackend.AUTO) -> None:
        if not caches:
            raise ValueError('caches=[] is not allowed: at least one stream')
        pool = caches[0].pool
        if any(c.pool is not pool for c in caches):
            raise ValueError('caches is not allowed: every stream must share one pool')
        if len({c.stream for c in caches}) != len(caches):
            raise ValueError('caches is not allowed: a stream appears twice')
        self.caches = tuple(caches)
        self.pool = pool
        self.backend, self.backend_reason = resolve_backend(backend, pool.device,
                                                            streams=len(caches),
                                                            dtype=pool.dtype,
                                                            head_dim=pool.head_dim)
        max_pages = sum(c.layout.pages for c in caches)
        self.table = PageTable(len(caches), max_pages, pool.page_size, pool.page_ids)
        self._flashinfer: Optional[FlashInferPaged] = None
        self._planned: Optional[tuple] = None

    def _plan(self, queries: int) -> None:
        key = tuple(c.generation for c in self.caches) + (queries,)
        if key == self._planned:
            return
        self.table.update([c.visible_run()._replace(queries=queries) for c in self.caches])
        if self.backend is AttentionBackend.FLASHINFER:
            if self._flashinfer is None:
                self._flashinfer = FlashInferPaged(self.pool.device)
            self._flashinfer.plan(self.table, self.pool.heads, self.pool.head_dim,
                                  self.pool.dtype, self.pool.dtype)
        self._planned = key

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Store every stream's k, v for ``layer``; attend all streams in one call."""
        if q.shape[0] != len(self.caches):
            raise ValueError(f'q batch={q.shape[0]} is not allowed: {len(self.caches)} streams')
        for i, cache in enumerate(self.caches):
            cache._write(layer, k[i:i + 1], v[i:i + 1])
        if self.backend is AttentionBackend.SDPA:
            outs = []
            for i, cache in enumerate(self.caches):
                start, end = cache.visible_tokens()
                k_flat, v_flat = self.pool.flat(layer)
                outs.append(sdpa_run(q[i:i + 1], k_flat[start:end], v_flat[start:end]))
            return torch.cat(outs, dim=0)
        self._plan(q.shape[2])
        if self.backend is AttentionBackend.FLASHINFER:
            return self._flashinfer.run(q, self.pool.k[layer], self.pool.v[layer])
        return paged_sdpa_run(q, self.pool.k[layer], self.pool.v[layer], self.table)
