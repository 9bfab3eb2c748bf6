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
A plain dense KV cache with the reference's visibility rules: the yardstick.

Simple on purpose (lists of tensors, ``torch.cat`` per call): it defines what every
faster cache must return, and the property tests compare the paged cache against it.

Visibility for a stream with ``scale_frames`` pinned frames and a window of
``sliding_window`` frames: the ``special_tokens`` leading tokens of every committed
frame stay visible forever; the remaining (patch) tokens of the first ``scale_frames``
frames stay visible forever; the patch tokens of the newest ``sliding_window`` other
frames are visible. A call's own frames are always visible to it. With
``defer_eviction`` a pending frame still sees the window frame its commit will evict.
A camera-head cache is the same object with ``special_tokens=1`` and no patch tokens.
:func:`dense_cache_factory` gives a session two of them in place of the paged caches.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from lingbot_ros.streaming.caches import CacheSpec, StreamCache
import torch


class FrameRole(Enum):
    """Which visibility rule a cached frame's patch tokens follow."""

    SCALE = 'scale'    # one of the first scale_frames: visible forever
    WINDOW = 'window'  # visible while among the newest sliding_window others


@dataclass
class _Frame:
    """One cached frame: per layer (k, v) of its special and its patch tokens."""

    special: dict
    patch: dict
    role: FrameRole


class DenseStreamCache:
    """Reference cache for one stream; implements ``CachedAttention`` plus a transaction."""

    def __init__(self, special_tokens: int, scale_frames: int, sliding_window: int) -> None:
        if special_tokens < 0 or scale_frames < 0 or sliding_window < 1:
            raise ValueError('special_tokens, scale_frames >= 0 and sliding_window >= 1 required')
        self.special_tokens = special_tokens
        self.scale_frames = scale_frames
        self.sliding_window = sliding_window
        self.reset()

    # --- transaction ---------------------------------------------------------------

    def reset(self) -> None:
        """Forget everything."""
        self._frames: list[_Frame] = []
        self._pending: list[_Frame] = []
        self._defer = False
        self.evictions = 0
        self.rollbacks = 0

    def begin(self, num_frames: int, defer_eviction: bool = False) -> None:
        """Open a call of ``num_frames`` frames (pending until commit or rollback)."""
        if self._pending:
            raise RuntimeError('begin() while a call is pending: commit or roll back first')
        n_scale = sum(f.role is FrameRole.SCALE for f in self._frames)
        roles = []
        for _ in range(num_frames):
            roles.append(FrameRole.SCALE if n_scale < self.scale_frames else FrameRole.WINDOW)
            n_scale += roles[-1] is FrameRole.SCALE
        self._pending = [_Frame({}, {}, r) for r in roles]
        self._defer = defer_eviction

    def commit(self) -> int:
        """Keep the pending frames, run the (deferred) eviction; return frames evicted."""
        self._frames.extend(self._pending)
        self._pending = []
        evicted = 0
        for f in self._window_evictable():
            f.patch.clear()
            evicted += 1
        self.evictions += evicted
        return evicted

    def rollback(self) -> None:
        """Drop the pending frames: no trace remains."""
        self._pending = []
        self.rollbacks += 1

    # --- counters --------------------------------------------------------------------

    @property
    def frames(self) -> int:
        """Count committed frames, evicted ones included: the temporal extent."""
        return len(self._frames)

    @property
    def patch_frames_resident(self) -> int:
        """Count committed frames whose patch tokens are still visible."""
        return sum(f.role is FrameRole.SCALE or bool(f.patch) for f in self._frames)

    def _window_evictable(self) -> list[_Frame]:
        window = [f for f in self._frames if f.role is FrameRole.WINDOW and f.patch]
        return window[:max(0, len(window) - self.sliding_window)]

    # --- attention ---------------------------------------------------------------------

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Store the call's k, v for ``layer`` and attend over the visible set."""
        n = len(self._pending)
        if n == 0:
            raise RuntimeError('attend() outside begin()/commit()')
        b, h, tokens, d = k.shape
        per_frame = tokens // n
        s = self.special_tokens
        kf = k.view(b, h, n, per_frame, d)
        vf = v.view(b, h, n, per_frame, d)
        for i, f in enumerate(self._pending):  # copies: the caller may reuse k and v
            f.special[layer] = (kf[:, :, i, :s].clone(), vf[:, :, i, :s].clone())
            if per_frame > s:
                f.patch[layer] = (kf[:, :, i, s:].clone(), vf[:, :, i, s:].clone())
        everything = self._frames + self._pending
        visible_patches = [f for f in everything if f.role is FrameRole.SCALE]
        window = [f for f in everything if f.role is FrameRole.WINDOW and layer in f.patch]
        if not self._defer:
            window = window[-self.sliding_window:]
        visible_patches += window
        keys = [f.special[layer][0] for f in everything]
        values = [f.special[layer][1] for f in everything]
        keys += [f.patch[layer][0] for f in visible_patches if layer in f.patch]
        values += [f.patch[layer][1] for f in visible_patches if layer in f.patch]
        return torch.nn.functional.scaled_dot_product_attention(
            q, torch.cat(keys, dim=2), torch.cat(values, dim=2))


def dense_cache_factory(spec: CacheSpec) -> 'tuple[StreamCache, StreamCache]':
    """Dense reference caches: the aggregator's and the camera head's (no window)."""
    agg = DenseStreamCache(special_tokens=spec.special_tokens, scale_frames=spec.scale_frames,
                           sliding_window=spec.sliding_window)
    camera = DenseStreamCache(special_tokens=1, scale_frames=0, sliding_window=1)
    return agg, camera
