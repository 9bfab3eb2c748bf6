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
One stream's paged KV cache: what the tests' dense reference cache computes, in bounded memory.

Same visibility and transaction as the dense reference (``begin`` -> ``attend`` per
layer -> ``commit`` or ``rollback``; ``reset``), but the keys and values live in a
:class:`KVPool` allocated once. Bookkeeping runs once per call in ``begin``,
``commit`` and ``rollback`` (never per layer): the slot allocator keeps the visible
patch pages next to the special pages, so each layer's visible set is one contiguous
run; page moves it asks for are copied for all layers at once.

A call that would not fit raises :class:`CacheOverflow` from ``begin`` with the state
unchanged; ``check`` answers the same question without raising. ``stats`` reads host
counters only.

For a CUDA graph that holds the whole frame, ``stage`` (after ``begin``) puts where the
call's keys go and what it sees into fixed device buffers, and ``attend_staged`` reads
only those and the pool's fixed addresses: keys are scattered by index, FlashInfer runs
in its graph mode over the layer's whole flat view, SDPA masks the stream's whole
region. The same kernels then serve every later call of that size.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Optional, Union

import torch

from .backends import (AttentionBackend, auto_kv_splits, compute_dtype, FlashInferRagged, is_fp8,
                       MAX_KV_SPLITS, paged_sdpa_run, resolve_backend, sdpa_run, storable)
from .layout import StreamLayout
from .overflow import CacheOverflow
from .page_table import PageTable, Run
from .pool import KVPool
from .slots import SlotAllocator
from .stats import CacheStats
from .words import pair_as_words


@dataclass(frozen=True)
class CacheState:
    """
    What a cache holds between calls, enough to continue it exactly: no pool, no call.

    ``keys`` / ``values`` are the visible run, every layer, in pool order
    (``[layers, tokens, heads, head_dim]``, the pool's dtype): the patch pages of
    ``slot_frame`` (last slot first) then the special tokens of the ``frames`` frames.
    """

    frames: int
    slot_frame: tuple
    evictions: int
    rollbacks: int
    overflow_events: int
    keys: torch.Tensor
    values: torch.Tensor


class PagedStreamCache:
    """
    One stream's region of a pool, its page table and its transactions.

    ``kv_splits`` (FlashInfer only): into how many parts each call's keys are cut
    (:class:`FlashInferRagged`); 0 picks by the call's size and the device
    (:func:`auto_kv_splits`).
    """

    def __init__(self, pool: KVPool, stream: int = 0,
                 backend: Union[AttentionBackend, str] = AttentionBackend.AUTO,
                 kv_splits: int = 0) -> None:
        if not (isinstance(kv_splits, int) and 0 <= kv_splits <= MAX_KV_SPLITS):
            raise ValueError(f'kv_splits={kv_splits!r} is not allowed: 0 (auto) .. '
                             f'{MAX_KV_SPLITS}')
        self.kv_splits = kv_splits
        self.pool = pool
        self.stream = stream
        self.layout: StreamLayout = pool.layouts[stream]
        lay = self.layout
        self.special_tokens = lay.special_tokens
        self.scale_frames = lay.scale_frames
        self.sliding_window = lay.sliding_window
        self.page = pool.page_size
        self.first_page = pool.first_page[stream]
        self.special_page = self.first_page + lay.patch_pages   # patch slot 0 is just below
        self.backend, self.backend_reason = resolve_backend(
            backend, pool.device, dtype=pool.dtype, head_dim=pool.head_dim)
        self.table = PageTable(1, lay.pages, self.page, pool.page_ids)
        self._flashinfer: dict[int, FlashInferRagged] = {}   # by splits
        self._slots = SlotAllocator(lay.scale_frames, lay.sliding_window, lay.patch_pages)
        self.overflow_events = 0
        self.page_moves = 0           # pages copied (all layers) to keep runs contiguous
        self.generation = 0           # bumps whenever the visible layout changes
        self._planned: Optional[tuple] = None
        self._staged: Optional[_Staged] = None
        self.reset()

    @classmethod
    def allocate(cls, layout: StreamLayout, layers: int, heads: int, head_dim: int,
                 dtype: torch.dtype = torch.float32,
                 device: Union[str, torch.device] = 'cpu',
                 backend: Union[AttentionBackend, str] = AttentionBackend.AUTO,
                 kv_splits: int = 0) -> 'PagedStreamCache':
        """Allocate a pool for this one stream and return its cache."""
        return cls(KVPool([layout], layers, heads, head_dim, dtype, device), 0, backend,
                   kv_splits)

    # --- transaction -----------------------------------------------------------------

    def reset(self) -> None:
        """Forget every frame (the pool stays allocated; overflow_events is kept)."""
        self._slots.reset()
        self._pending = 0
        self._defer = False
        self.evictions = 0
        self.rollbacks = 0
        self.generation += 1

    def check(self, num_frames: int, defer_eviction: bool = False) -> Optional[CacheOverflow]:
        """Return the overflow ``begin`` would raise for this call, or None (changes nothing)."""
        if num_frames < 1:
            raise ValueError(f'num_frames={num_frames!r} is not allowed: >= 1')
        lay = self.layout
        frames = self._slots.frames
        need = (frames + num_frames) * lay.special_tokens
        have = lay.special_pages * self.page
        if need > have:
            return CacheOverflow('special', need, have, 'tokens', frames)
        if lay.patch_tokens:
            need = self._slots.needed(num_frames, defer_eviction)
            if need > lay.patch_pages:
                return CacheOverflow('patch', need, lay.patch_pages, 'pages', frames)
        return None

    def begin(self, num_frames: int, defer_eviction: bool = False) -> None:
        """Open a call of ``num_frames`` frames; raise CacheOverflow if it cannot fit."""
        if self._pending:
            raise RuntimeError('begin() while a call is pending: commit or roll back first')
        event = self.check(num_frames, defer_eviction)
        if event is not None:
            self.overflow_events += 1
            raise event
        if self.layout.patch_tokens:
            self._move(self._slots.begin(num_frames, defer_eviction))
        self._pending = num_frames
        self._defer = defer_eviction
        self.generation += 1

    def commit(self) -> int:
        """Keep the open call; run the (deferred) eviction. Return frames evicted."""
        self._require_open()
        if self.layout.patch_tokens:
            moves, evicted = self._slots.commit()
            self._move(moves)
        else:
            self._slots.frames += self._pending
            evicted = 0
        self._pending = 0
        self.evictions += evicted
        self.generation += 1
        return evicted

    def rollback(self) -> None:
        """Drop the open call: no trace remains (hidden window frames come back)."""
        self._require_open()
        if self.layout.patch_tokens:
            self._move(self._slots.rollback())
        self._pending = 0
        self.rollbacks += 1
        self.generation += 1

    def _require_open(self) -> None:
        if not self._pending:
            raise RuntimeError('commit()/rollback() without begin()')

    def _move(self, moves: list) -> None:
        self.page_moves += len(moves)
        for src, dst in moves:
            self.pool.move_pages(self.special_page - 1 - src, self.special_page - 1 - dst)

    # --- saved state -------------------------------------------------------------------

    def export_state(self, device: Union[str, torch.device, None] = None) -> CacheState:
        """Copy what the cache holds (no call may be open) onto ``device`` (default: its own)."""
        if self._pending:
            raise RuntimeError('export_state() while a call is pending: commit or roll back')
        keys, values = self.pool.tokens(*self.visible_tokens())
        device = self.pool.device if device is None else torch.device(device)

        def copy(t: torch.Tensor) -> torch.Tensor:
            return torch.empty(t.shape, dtype=t.dtype, device=device).copy_(t)
        return CacheState(frames=self._slots.frames, slot_frame=tuple(self._slots.slot_frame),
                          evictions=self.evictions, rollbacks=self.rollbacks,
                          overflow_events=self.overflow_events, keys=copy(keys),
                          values=copy(values))

    def import_state(self, state: CacheState) -> None:
        """
        Continue from ``state``: its frames and keys, into this pool's own memory, in place.

        The pool's tensors (and any page table or graph that holds their addresses) stay
        the same objects; the page table follows at the next call. A state that does not
        fit this cache is a ValueError, and then the cache is left reset.
        """
        if self._pending:
            raise RuntimeError('import_state() while a call is pending: commit or roll back')
        lay, pool = self.layout, self.pool
        tokens = len(state.slot_frame) * lay.patch_tokens + state.frames * lay.special_tokens
        shape = (pool.layers, tokens, pool.heads, pool.head_dim)
        for name, t in (('keys', state.keys), ('values', state.values)):
            if tuple(t.shape) != shape or t.dtype != pool.dtype:
                raise ValueError(f'cached {name} {tuple(t.shape)} {t.dtype} do not fit this '
                                 f'cache: expected {shape} {pool.dtype}')
        if state.frames * lay.special_tokens > lay.special_pages * self.page:
            raise ValueError(f'{state.frames} frames do not fit this cache: at most '
                             f'{lay.special_pages * self.page // max(1, lay.special_tokens)}')
        self.reset()
        self._slots.restore(state.frames, list(state.slot_frame))
        keys, values = pool.tokens(*self.visible_tokens())
        keys.copy_(state.keys)
        values.copy_(state.values)
        self.evictions, self.rollbacks = state.evictions, state.rollbacks
        self.overflow_events = state.overflow_events
        self.generation += 1

    # --- counters ----------------------------------------------------------------------

    @property
    def frames(self) -> int:
        """Count committed frames: the temporal extent, evicted ones included."""
        return self._slots.frames

    @property
    def pending_frames(self) -> int:
        """Frames of the open call (0 when none is open)."""
        return self._pending

    @property
    def patch_frames_resident(self) -> int:
        """Count committed frames whose patch tokens are still visible."""
        if not self.layout.patch_tokens:
            return min(self._slots.frames, self.scale_frames)
        return self._slots.resident

    def stats(self) -> CacheStats:
        """Counters as plain numbers (host only; ``window_index`` is the session's)."""
        lay = self.layout
        frames = self._slots.frames
        scale = min(frames, lay.scale_frames) if lay.patch_tokens else 0
        run = self._slots.run
        pending_pages = run - self._slots.resident + (
            len(self._slots.pending.hidden) if self._slots.pending else 0)
        special = frames * lay.special_tokens
        used_tokens = self._slots.used * lay.patch_tokens + (
            (frames + self._pending) * lay.special_tokens)
        return CacheStats(
            frames=frames, keyframes=max(0, frames - lay.scale_frames),
            rollbacks=self.rollbacks, evictions=self.evictions,
            scale_pages=scale, live_pages=self._slots.resident - scale,
            free_pages=lay.patch_pages - self._slots.used, pending_pages=pending_pages,
            special_tokens=special, special_pages=math.ceil(special / self.page),
            bytes_used=used_tokens * self.pool.token_bytes,
            bytes_reserved=lay.pages * self.page * self.pool.token_bytes,
            overflow_events=self.overflow_events)

    # --- the visible run -------------------------------------------------------------

    def visible_tokens(self) -> tuple[int, int]:
        """Token range [start, end) of the visible run in a layer's flat pool view."""
        special = (self._slots.frames + self._pending) * self.special_tokens
        start = (self.special_page - self._slots.run) * self.page
        return start, self.special_page * self.page + special

    def visible_run(self) -> Run:
        """Return the visible run as pages (what the page table holds)."""
        start, end = self.visible_tokens()
        count = math.ceil((end - start) / self.page)
        last = end - start - (count - 1) * self.page if count else self.page
        return Run(start // self.page, count, last, 0)

    # --- attention -----------------------------------------------------------------------

    def _write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the open call's keys and values for ``layer`` ([1, H, N, D])."""
        n = self._pending
        if n == 0:
            raise RuntimeError('attend() outside begin()/commit()')
        b, h, tokens, d = k.shape
        lay = self.layout
        if b != 1 or h != self.pool.heads or d != self.pool.head_dim \
                or tokens != n * lay.tokens_per_frame:
            raise ValueError(
                f'k shape={tuple(k.shape)} is not allowed: [1, {self.pool.heads}, '
                f'{n} * {lay.tokens_per_frame}, {self.pool.head_dim}]')
        s = lay.special_tokens
        k_flat, v_flat = self.pool.flat(layer)
        start = self.special_page * self.page + self._slots.frames * s
        for src, dst in ((k, k_flat), (v, v_flat)):
            src = storable(src, dst.dtype)  # float8 pools: clamp to its range first
            per_frame = src[0].unflatten(1, (n, lay.tokens_per_frame))   # [H, n, T, D]
            if s:
                dst[start:start + n * s].view(n, s, h, d).copy_(
                    per_frame[:, :, :s].permute(1, 2, 0, 3))
            if lay.patch_tokens:
                pages = dst.view(-1, self.page, h, d)
                for i0, count, page in self._patch_blocks():
                    pages[page:page + count].copy_(
                        per_frame[:, i0:i0 + count, s:].permute(1, 2, 0, 3))

    def _patch_blocks(self) -> list[tuple[int, int, int]]:
        """(first call frame, frames, first page) for runs of stored call frames."""
        blocks: list[tuple[int, int, int]] = []
        for i, slot in enumerate(self._slots.pending.slots):
            if slot is None:
                continue
            page = self.special_page - 1 - slot
            if blocks and blocks[-1][0] + blocks[-1][1] == i and \
                    blocks[-1][2] + blocks[-1][1] == page:
                i0, count, first = blocks[-1]
                blocks[-1] = (i0, count + 1, first)
            else:
                blocks.append((i, 1, page))
        return blocks

    def _plan(self, queries: int, q_dtype: torch.dtype) -> None:
        if self._planned is not None and self._planned[:2] == (self.generation, q_dtype):
            return
        if self.backend is AttentionBackend.PAGED_SDPA:  # ragged FlashInfer needs no table
            self.table.update([self.visible_run()._replace(queries=queries)])
        if self.backend is AttentionBackend.FLASHINFER:
            splits = self.splits_for(queries)
            if splits not in self._flashinfer:
                self._flashinfer[splits] = FlashInferRagged(self.pool.device, splits=splits)
            start, end = self.visible_tokens()
            self._flashinfer[splits].plan(queries, end - start, self.pool.heads,
                                          self.pool.head_dim,
                                          compute_dtype(q_dtype, self.pool.dtype),
                                          self.pool.dtype)
            self._planned = (self.generation, q_dtype, splits)
        else:
            self._planned = (self.generation, q_dtype, 1)

    def splits_for(self, queries: int) -> int:
        """Return how many parts a call of ``queries`` queries cuts its keys into."""
        if self.kv_splits:
            return self.kv_splits
        return auto_kv_splits(queries, self.pool.heads, self.pool.head_dim, self.pool.device)

    def attend_cached(self, layer: int, q: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` over the visible run (after ``_write``), by the backend."""
        if self.backend is AttentionBackend.SDPA:
            start, end = self.visible_tokens()
            k_flat, v_flat = self.pool.flat(layer)
            return sdpa_run(q, k_flat[start:end], v_flat[start:end])
        self._plan(q.shape[2], q.dtype)
        if self.backend is AttentionBackend.FLASHINFER:
            start, end = self.visible_tokens()
            k_flat, v_flat = self.pool.flat(layer)
            return self._flashinfer[self._planned[2]].run(q, k_flat[start:end],
                                                          v_flat[start:end])
        return paged_sdpa_run(q, self.pool.k[layer], self.pool.v[layer], self.table)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """Store the call's k, v for ``layer`` and attend over the visible set."""
        self._write(layer, k, v)
        return self.attend_cached(layer, q)

    # --- attention inside a CUDA graph ------------------------------------------------------

    @property
    def capturable(self) -> bool:
        """Whether ``attend_staged`` may be captured (paged_sdpa gathers on the host)."""
        return self.backend is not AttentionBackend.PAGED_SDPA

    def stage(self) -> bool:
        """
        Write the open call's positions and visible range into the fixed staging buffers.

        Returns False (and stages nothing) when the call cannot run staged: a call frame
        whose patches are not stored, or a call of another size than the first one staged
        (the buffers, and a graph captured over them, are sized for that one).
        """
        n = self._pending
        if not n or not self.capturable:
            return False
        lay = self.layout
        slots = self._slots.pending.slots if lay.patch_tokens else [None] * n
        if lay.patch_tokens and None in slots:
            return False
        tokens = n * lay.tokens_per_frame
        if self._staged is None:
            self._staged = _Staged.allocate(self, tokens)
        st = self._staged
        if st.dest.numel() != tokens:
            return False
        s, t = lay.special_tokens, lay.tokens_per_frame
        special = self.special_page * self.page + self._slots.frames * s
        for f, slot in enumerate(slots):
            row = st.dest[f * t:(f + 1) * t]
            if s:
                torch.add(st.special_offsets, special + f * s, out=row[:s])
            if lay.patch_tokens:
                torch.add(st.patch_offsets, (self.special_page - 1 - slot) * self.page,
                          out=row[s:])
        start, end = self.visible_tokens()
        if st.flashinfer is not None:
            st.unplanned = (tokens, start, end)
            if st.q_dtype is not None:   # else at the first attend_staged, once q is seen
                self._plan_staged()
        else:
            torch.logical_and(st.positions >= start, st.positions < end, out=st.mask)
        return True

    def _plan_staged(self) -> None:
        st = self._staged
        tokens, start, end = st.unplanned
        st.flashinfer.plan(tokens, end - start, self.pool.heads, self.pool.head_dim,
                           compute_dtype(st.q_dtype, self.pool.dtype), self.pool.dtype,
                           kv_offset=start)
        st.unplanned = None

    def attend_staged(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor) -> torch.Tensor:
        """``attend`` for the staged call, from fixed addresses only (capturable)."""
        st = self._staged
        if st is None:
            raise RuntimeError('attend_staged() before stage()')
        if st.q_dtype is None:
            st.q_dtype = q.dtype
        if q.dtype != st.q_dtype:
            raise ValueError(f'q dtype={q.dtype} is not allowed: the staging was made for '
                             f'{st.q_dtype}')
        if st.unplanned is not None:
            if q.is_cuda and torch.cuda.is_current_stream_capturing():
                raise RuntimeError('attend_staged() captured before its plan: run it once '
                                   'eagerly after stage() first')
            self._plan_staged()
        k_flat, v_flat = self.pool.flat(layer)
        for src, dst in ((k, k_flat), (v, v_flat)):
            tokens = storable(src, dst.dtype)[0].transpose(0, 1)   # [N, H, D]
            _scatter_rows(dst, st.dest, tokens.to(dst.dtype))
        if st.flashinfer is not None:
            return st.flashinfer.run(q, k_flat, v_flat)
        lo, hi = st.region
        return sdpa_run(q, k_flat[lo:hi], v_flat[lo:hi], st.mask)


def _scatter_rows(dst: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> None:
    """
    ``dst[rows] = src`` along dim 0, in place and capturable, for every pool dtype.

    The rows move as 8-byte words where they fit (``words.as_words``: a quarter of the
    kernel's steps); otherwise a float8 pool is written through its bytes, since PyTorch
    has no ``index_copy_`` for float8 (CPU or CUDA).
    """
    words = pair_as_words(dst, src)
    if words is not None:
        dst, src = words
    elif is_fp8(dst.dtype):
        dst, src = dst.view(torch.uint8), src.view(torch.uint8)
    dst.index_copy_(0, rows, src)


class _Staged:
    """A cache's fixed buffers for one call size: scatter positions, visible range, plan."""

    def __init__(self, dest: torch.Tensor, special_offsets: torch.Tensor,
                 patch_offsets: torch.Tensor, flashinfer: Optional[FlashInferRagged],
                 region: tuple[int, int], positions: Optional[torch.Tensor],
                 mask: Optional[torch.Tensor]) -> None:
        self.dest = dest                        # [call tokens] flat positions, call order
        self.special_offsets = special_offsets  # 0 .. special_tokens-1
        self.patch_offsets = patch_offsets      # 0 .. patch_tokens-1
        self.q_dtype: Optional[torch.dtype] = None  # the queries' dtype, from the first call
        self.flashinfer = flashinfer            # graph-mode wrapper (FlashInfer backend)
        self.unplanned: Optional[tuple] = None  # (queries, start, end) staged, not planned
        self.region = region                    # SDPA: the stream's tokens in a flat view
        self.positions = positions              # SDPA: their flat positions
        self.mask = mask                        # SDPA: True where visible

    @classmethod
    def allocate(cls, cache: PagedStreamCache, tokens: int) -> '_Staged':
        lay, device = cache.layout, cache.pool.device
        ar = torch.arange(max(lay.special_tokens, lay.patch_tokens), device=device)
        dest = torch.zeros(tokens, dtype=torch.int64, device=device)
        region = (cache.first_page * cache.page, (cache.first_page + lay.pages) * cache.page)
        if cache.backend is AttentionBackend.FLASHINFER:
            return cls(dest, ar[:lay.special_tokens], ar[:lay.patch_tokens],
                       FlashInferRagged(device, graph=True,
                                        splits=cache.splits_for(tokens)),
                       region, None, None)
        positions = torch.arange(*region, device=device)
        mask = torch.zeros(positions.numel(), dtype=torch.bool, device=device)
        return cls(dest, ar[:lay.special_tokens], ar[:lay.patch_tokens], None, region,
                   positions, mask)
