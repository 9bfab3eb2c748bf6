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
How a session gets its two caches: through a factory, so backends drop in.

A session needs, per window, one cache for the aggregator's global blocks and one
for the camera head. Both speak the frame transaction (``begin`` / ``attend`` /
``commit`` / ``rollback`` / ``reset``) and expose ``frames`` (committed frames) and
``patch_frames_resident``. Which class implements them is the factory's business;
:func:`paged_cache_factory` uses the paged cache (pools allocated once per window
shape, sized from the spec); the tests' dense reference is a factory of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
import threading
from typing import Callable, List, Protocol, Tuple

from lingbot_ros.cache.backend_choice import AttentionBackend
import torch


class StreamCache(Protocol):
    """The frame transaction the session drives (``CachedAttention`` plus lifecycle)."""

    def begin(self, num_frames: int, defer_eviction: bool = False) -> None: ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor: ...

    def commit(self) -> int: ...

    def rollback(self) -> None: ...

    def reset(self) -> None: ...


@dataclass(frozen=True)
class CacheSpec:
    """
    Everything a cache needs to size itself, fixed for one window of one stream.

    ``max_frames`` is the most frames a window ever commits: the session opens a new
    window before that, so a pool sized for it never overflows.
    """

    special_tokens: int
    patches_per_frame: int
    scale_frames: int
    sliding_window: int
    max_frames: int
    global_layers: int
    global_heads: int
    global_head_dim: int
    camera_layers: int
    camera_heads: int
    camera_head_dim: int
    device: torch.device
    dtype: torch.dtype
    backend: AttentionBackend = AttentionBackend.SDPA
    kv_splits: int = 0   # FlashInfer key parts per call (0: auto, see PagedStreamCache)
    camera_dtype: torch.dtype = torch.float32  # what the camera head computes in


CacheFactory = Callable[[CacheSpec], 'tuple[StreamCache, StreamCache]']


def paged_cache_factory(spec: CacheSpec) -> 'tuple[StreamCache, StreamCache]':
    """
    Paged caches sized from the spec; their memory is allocated here, once.

    The aggregator pool holds ``scale_frames + sliding_window + 1`` patch pages and the
    special tokens of ``max_frames`` frames; the camera head's holds ``max_frames``
    tokens per layer in ``camera_dtype`` (float32 unless the heads run under autocast).
    """
    from lingbot_ros.cache.layout import aggregator_layout, camera_head_layout
    from lingbot_ros.cache.stream import PagedStreamCache
    agg_layout = aggregator_layout(
        patch_tokens=spec.patches_per_frame, scale_frames=spec.scale_frames,
        sliding_window=spec.sliding_window, special_capacity=spec.max_frames,
        special_tokens=spec.special_tokens)
    agg = PagedStreamCache.allocate(agg_layout, spec.global_layers, spec.global_heads,
                                    spec.global_head_dim, spec.dtype, spec.device,
                                    spec.backend, spec.kv_splits)
    camera = PagedStreamCache.allocate(camera_head_layout(capacity=spec.max_frames),
                                       spec.camera_layers, spec.camera_heads,
                                       spec.camera_head_dim, spec.camera_dtype, spec.device,
                                       AttentionBackend.SDPA)
    return agg, camera


class KeptCaches:
    """
    A cache factory that first hands out the cache pairs a throwaway stream left behind.

    The engine's warm-up runs a stream per camera at configure; its caches are kept here
    with whatever the runner captured over them (a streaming frame's CUDA graph is bound
    to its caches). A camera's session of the same spec then takes a kept pair instead of
    allocating one, and its first streamed frame replays a graph instead of capturing one
    while the camera's frames pile up. A spec no kept pair matches lets them all go first:
    their memory is what the new pair needs.
    """

    def __init__(self, factory: CacheFactory) -> None:
        self.factory = factory
        self._kept: List[Tuple[CacheSpec, tuple]] = []
        self._lock = threading.Lock()

    def __call__(self, spec: CacheSpec) -> 'tuple[StreamCache, StreamCache]':
        with self._lock:
            for i, (kept_spec, pair) in enumerate(self._kept):
                if kept_spec == spec:
                    del self._kept[i]
                    return pair
            self._kept.clear()
        return self.factory(spec)

    def keep(self, spec: CacheSpec, pair: tuple) -> None:
        """Keep a pair for the next session of ``spec``."""
        with self._lock:
            self._kept.append((spec, pair))

    @property
    def kept(self) -> int:
        """Count the pairs waiting for a session."""
        with self._lock:
            return len(self._kept)

    def release(self) -> None:
        """Let every kept pair go."""
        with self._lock:
            self._kept.clear()
