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
A stream's windows: their caches, the Sim(3) that keeps them in one map frame, new ones.

Windows bound memory and the RoPE table: before the time index would reach
``max_window_frames`` (at most the model's ``max_frame_num``) the session opens a new
window: fresh caches, the last ``scale_frames`` committed frames (the overlap) re-run as
its scale frames, so the same frames have poses in both windows. As in the reference's
windowed inference, one anchor frame (the last overlap frame) fixes rotation and
translation, and the lower median of the depth ratios over all overlap pixels fixes the
scale; the Sim(3) maps the new window's poses and depths into the first window's frame.

Device memory: if allocating the pools runs out of memory, the window is halved until
they fit. If a call runs out of memory (its activations did not fit beside the pools),
the session rolls it back and :class:`Windows` drops the pools and halves the window
(down to ``MIN_SLIDING_WINDOW``); a new window is then seeded from the overlap frames,
as at a window change. Only at the floor is the error raised.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Deque, List, Optional, Sequence, Tuple

from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.cache.stream import CacheState
from lingbot_ros.model.config import SPECIAL_TOKENS
from lingbot_ros.streaming.caches import CacheSpec, StreamCache
from lingbot_ros.streaming.call_stats import Attended, Resident
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.context import SessionContext
from lingbot_ros.streaming.trajectory import matrix_to_pose_enc, pose_enc_to_matrix
import numpy as np
import torch

SCALE_LIMITS = (1e-3, 1e3)


@dataclass(frozen=True)
class Sim3:
    """``x -> scale * rotation @ x + translation``, acting on camera-to-world poses."""

    scale: float = 1.0
    rotation: np.ndarray = field(default_factory=lambda: np.eye(3))
    translation: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def apply_pose(self, pose_c2w: np.ndarray) -> np.ndarray:
        """Map a camera-to-world ``[4, 4]`` of the window into the map frame."""
        out = np.eye(4)
        out[:3, :3] = self.rotation @ pose_c2w[:3, :3]
        out[:3, 3] = self.scale * (self.rotation @ pose_c2w[:3, 3]) + self.translation
        return out

    def matrix(self) -> np.ndarray:
        """Return the 4x4 homogeneous matrix ``[[s R, t], [0, 1]]``."""
        out = np.eye(4)
        out[:3, :3] = self.scale * self.rotation
        out[:3, 3] = self.translation
        return out

    @property
    def is_identity(self) -> bool:
        return (self.scale == 1.0 and np.array_equal(self.rotation, np.eye(3))
                and not np.any(self.translation))


def lower_median(values: np.ndarray) -> float:
    """Median that returns the lower middle value for even counts (as torch.median)."""
    flat = np.sort(np.asarray(values).reshape(-1))
    return float(flat[(flat.size - 1) // 2])


def depth_scale(prev: Sequence[np.ndarray], curr: Sequence[np.ndarray]) -> Optional[float]:
    """Lower median of ``prev / curr`` over all valid pixels, clamped; None if none valid."""
    ratios = []
    eps = np.finfo(np.float32).eps
    for a, b in zip(prev, curr):
        a = np.asarray(a, dtype=np.float64).reshape(-1)
        b = np.asarray(b, dtype=np.float64).reshape(-1)
        ok = np.isfinite(a) & np.isfinite(b) & (np.abs(b) > eps)
        ratios.append(a[ok] / b[ok])
    ratios = np.concatenate(ratios) if ratios else np.zeros(0)
    ratios = ratios[np.isfinite(ratios)]
    if ratios.size == 0:
        return None
    return float(np.clip(lower_median(ratios), *SCALE_LIMITS))


def align_overlap(prev_poses: Sequence[np.ndarray], curr_poses: Sequence[np.ndarray],
                  prev_depths: Optional[Sequence[np.ndarray]] = None,
                  curr_depths: Optional[Sequence[np.ndarray]] = None) -> Sim3:
    """
    Sim(3) taking the new window's poses onto the previous window's (map-frame) poses.

    ``prev_*`` are the overlap frames as published (map frame, scaled depth),
    ``curr_*`` the same frames as the new window predicts them. The anchor is the last
    overlap frame; without usable depth the scale stays 1.
    """
    if len(prev_poses) == 0 or len(prev_poses) != len(curr_poses):
        raise ValueError('align_overlap needs the same non-zero number of poses on both sides')
    scale = None
    if prev_depths is not None and curr_depths is not None:
        scale = depth_scale(prev_depths, curr_depths)
    scale = 1.0 if scale is None else scale
    pa, ca = np.asarray(prev_poses[-1]), np.asarray(curr_poses[-1])
    rot = pa[:3, :3] @ ca[:3, :3].T
    trans = pa[:3, 3] - scale * (rot @ ca[:3, 3])
    return Sim3(scale=scale, rotation=rot, translation=trans)


def map_pose_enc(sim3: Sim3, enc: np.ndarray) -> np.ndarray:
    """Return a pose encoding of a window's frame in the map frame (float32)."""
    if sim3.is_identity:
        return enc.astype(np.float32)
    return matrix_to_pose_enc(sim3.apply_pose(pose_enc_to_matrix(enc)),
                              enc[7:9]).astype(np.float32)


MIN_SLIDING_WINDOW = 4  # the smallest window an out-of-memory shrink goes down to
OOM_REASON_CHARS = 200
OutOfMemory = torch.cuda.OutOfMemoryError


def _oom_reason(exc: BaseException) -> str:
    """Return the first line of an out-of-memory error, short enough for diagnostics."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line[:OOM_REASON_CHARS]


@dataclass
class Kept:
    """A committed frame remembered for seeding the next window."""

    index: int
    image: torch.Tensor
    pose_map: np.ndarray
    depth_map: Optional[np.ndarray]


@dataclass
class Window:
    """
    One window: its two caches, its alignment into the map, its clock, its overlap.

    A model call over it is a transaction: :meth:`begin` -> forward -> :meth:`end`
    (commit or roll back), or :meth:`abort` when the call failed.
    """

    index: int
    agg: Optional[StreamCache]
    camera: Optional[StreamCache]
    sim3: Sim3 = field(default_factory=Sim3)
    time: int = 0   # frames committed to this window = next RoPE time index
    seen: int = 0   # frames run in this window (committed or not)
    overlap: Deque[Kept] = field(default_factory=deque)  # the frames that seed the next

    def begin(self, frames: int, defer: bool) -> None:
        """Open a call of ``frames`` frames in both caches (both or neither)."""
        self.agg.begin(frames, defer_eviction=defer)
        try:
            self.camera.begin(frames, defer_eviction=defer)
        except BaseException:
            self.agg.rollback()
            raise

    def abort(self) -> None:
        """Roll back the open call in both caches."""
        self.agg.rollback()
        self.camera.rollback()

    def end(self, frames: int, keep: bool) -> int:
        """Commit (advance the clock) or roll back the open call; return frames evicted."""
        evicted = 0
        if keep:
            evicted = int(self.agg.commit() or 0)
            self.camera.commit()
            self.time += frames
        else:
            self.abort()
        self.seen += frames
        return evicted

    def remember(self, kept: Kept) -> None:
        """Keep a committed frame among those that will seed the next window."""
        self.overlap.append(kept)

    def release(self) -> None:
        """Let go of the caches (their pools stay with :class:`Windows` until dropped)."""
        self.agg = self.camera = None

    def export_state(self, device: Optional[torch.device] = None) -> 'WindowState':
        """Copy what the next call reads of this window (between calls), onto ``device``."""
        if not all(hasattr(c, 'export_state') for c in (self.agg, self.camera)):
            raise TypeError(f'{type(self.agg).__name__} caches cannot be saved: only paged '
                            'caches can')
        return WindowState(index=self.index, sim3=self.sim3, time=self.time, seen=self.seen,
                           overlap=tuple(self.overlap), agg=self.agg.export_state(device),
                           camera=self.camera.export_state(device))

    # --- cache counters as the fixtures report them -------------------------------------

    def attended(self, n: int, defer: bool, scale_frames: int, sliding_window: int,
                 patches: int, iterations: int) -> Attended:
        """Keys a call of ``n`` frames attends to: from committed counters and its size."""
        committed = self.agg.frames
        resident = self.agg.patch_frames_resident
        scale_done = min(committed, scale_frames)
        pending_scale = min(n, max(scale_frames - committed, 0))
        window_vis = resident - scale_done + n - pending_scale
        if not defer:
            window_vis = min(window_vis, sliding_window)
        tokens = SPECIAL_TOKENS * (committed + n) + patches * (scale_done + pending_scale
                                                               + window_vis)
        return Attended(agg_tokens_block0=tokens,
                        camera_frames_per_iter=(self.camera.frames + n,) * iterations)

    def resident(self, patches: int, iterations: int) -> Resident:
        """Report what the caches hold now (after a commit or a rollback)."""
        frames, resident = self.agg.frames, self.agg.patch_frames_resident
        return Resident(total_frames_processed=self.time, patch_frames_resident=resident,
                        special_frames_resident=frames,
                        visible_kv_tokens=resident * patches + frames * SPECIAL_TOKENS,
                        camera_frame_idx=self.seen,
                        camera_cache_frames=(self.camera.frames,) * iterations)


@dataclass(frozen=True)
class WindowState:
    """A window between calls: its place in the map, its clock, its overlap and caches."""

    index: int
    sim3: Sim3
    time: int
    seen: int
    overlap: Tuple[Kept, ...]
    agg: CacheState
    camera: CacheState


@dataclass(frozen=True)
class WindowsState:
    """The stream's windows between calls: the window in effect and the current one."""

    frames: int                    # the sliding window in effect (after memory shrinks)
    opened: int
    memory_shrinks: int
    last_oom: Optional[str]
    spoiled: bool
    current: Optional[WindowState]


# (window, images, frame indices, with depth) -> the call's pose_enc [S, 9], depth or None
SeedCall = Callable[[Window, torch.Tensor, List[int], bool],
                    Tuple[np.ndarray, Optional[np.ndarray]]]


class Windows:
    """
    The stream's current window and what it takes to open one: caches, seeding, shrinking.

    One per session state (a reset makes a new one, which retries the configured window):
    it reads only fields of ``cfg`` that cannot change without a reset. ``frames`` is the
    sliding window in effect: ``sliding_window`` unless device memory ran out (then
    halved, down to ``MIN_SLIDING_WINDOW``).
    """

    def __init__(self, ctx: SessionContext, cfg: StreamConfig) -> None:
        self._ctx = ctx
        self._scale_frames = cfg.scale_frames
        mc = ctx.model_config
        max_frames = mc.aggregator.max_frame_num
        # the most frames a window commits (bounds RoPE time and cache sizes)
        self.limit = min(max_frames, cfg.max_window_frames or max_frames)
        self.iterations = cfg.camera_iterations or mc.camera_head.iterations
        self._caches: Optional[tuple] = None  # (spec, aggregator cache, camera cache)
        self.current: Optional[Window] = None
        self.frames = cfg.sliding_window
        self.opened = 0            # windows seeded from an overlap so far
        self.memory_shrinks = 0    # windows halved because a call ran out of memory
        self.last_oom: Optional[str] = None  # why, the last time
        self.spoiled = False       # a kept frame was found non-finite: open a new window

    def _spec(self, h: int, w: int) -> CacheSpec:
        """Return what the caches of an ``h`` x ``w`` grid need at the window in effect."""
        ctx, mc = self._ctx, self._ctx.model_config
        p = mc.patch_size
        agg, cam = mc.aggregator, mc.camera_head
        return CacheSpec(
            special_tokens=SPECIAL_TOKENS, patches_per_frame=(h // p) * (w // p),
            scale_frames=self._scale_frames, sliding_window=self.frames,
            max_frames=self.limit, global_layers=agg.depth,
            global_heads=agg.num_heads, global_head_dim=agg.head_dim,
            camera_layers=cam.trunk_depth * self.iterations,
            camera_heads=cam.num_heads, camera_head_dim=mc.head_width // cam.num_heads,
            device=ctx.device, dtype=ctx.kv_dtype or ctx.dtype,
            camera_dtype=ctx.camera_kv_dtype, backend=ctx.backend, kv_splits=ctx.kv_splits)

    def caches_for(self, h: int, w: int) -> tuple:
        """Return the caches for an ``h`` x ``w`` grid, reset; made once per spec."""
        spec = self._spec(h, w)
        if self._caches is None or self._caches[0] != spec:
            self._caches = None  # let the old pools go before new ones are allocated
            while True:
                try:
                    self._caches = (spec, *self._ctx.cache_factory(spec))
                    break
                except torch.cuda.OutOfMemoryError:
                    if self.frames <= MIN_SLIDING_WINDOW:
                        raise
                    # Too little device memory for this window: halve it and go on.
                    self.frames = max(MIN_SLIDING_WINDOW, self.frames // 2)
                    spec = self._spec(h, w)
                    if self._ctx.device.type == 'cuda':
                        torch.cuda.empty_cache()
        _, agg, camera = self._caches
        agg.reset()
        camera.reset()
        return agg, camera

    def cache_stats(self) -> CacheStats:
        """Report the current window's caches (nothing of the session's counters)."""
        w = self.current
        if w is None:
            return CacheStats()
        if hasattr(w.agg, 'stats'):
            return w.agg.stats()
        frames = w.agg.frames
        scale = min(frames, self._scale_frames)
        return CacheStats(frames=frames, scale_pages=scale,
                          live_pages=w.agg.patch_frames_resident - scale,
                          special_tokens=frames * SPECIAL_TOKENS)

    def start(self, h: int, w: int) -> Window:
        """Make a stream's first window (a scale phase) current, on fresh caches."""
        agg, camera = self.caches_for(h, w)
        self.current = Window(index=self.opened, agg=agg, camera=camera,
                              overlap=deque(maxlen=self._scale_frames))
        return self.current

    def drop(self) -> None:
        """Forget the current window (a failed scale phase or re-seed)."""
        self.current = None

    def spoil(self) -> None:
        """Mark the current window's keys unusable: the next frame opens a new window."""
        self.spoiled = True

    def open_next(self, seed: SeedCall) -> None:
        """
        Start a new window seeded with the last committed frames, aligned by Sim(3).

        ``seed(window, images, frame indices, with_depth)`` runs the overlap through the
        model as the window's first call, commits it and returns its pose encodings and
        depth (None without) on the host.
        Running out of memory while doing so halves the window (fresh, smaller pools) and
        tries again; at the smallest window the error is raised, with no current window:
        the stream restarts with a scale phase.
        """
        old = self.current
        index, kept = old.index + 1, list(old.overlap)
        self.current = None
        self.spoiled = False
        old.release()  # the pools stay only in self._caches (dropped on a shrink)
        while True:
            oom = None
            try:
                self._seed(index, kept, seed)
                return
            except OutOfMemory as exc:
                oom = self.shrinkable(exc)
            self.shrink(oom)  # outside the handler: the call's tensors are gone

    def _seed(self, index: int, kept: List[Kept], seed: SeedCall) -> None:
        agg, camera = self.caches_for(*kept[0].image.shape[-2:])
        window = Window(index=index, agg=agg, camera=camera,
                        overlap=deque(kept, maxlen=self._scale_frames))
        images = torch.stack([k.image for k in kept])
        with_depth = all(k.depth_map is not None for k in kept)
        pose_enc, depth = seed(window, images, [k.index for k in kept], with_depth)
        curr = pose_enc_to_matrix(pose_enc)
        depths = None if depth is None else list(depth[..., 0])
        window.sim3 = align_overlap([k.pose_map for k in kept], list(curr),
                                    [k.depth_map for k in kept] if with_depth else None, depths)
        self.current = window
        self.opened += 1

    # --- saved state ---------------------------------------------------------------------

    def export_state(self, device: Optional[torch.device] = None) -> WindowsState:
        """Copy the windows' state (between calls) onto ``device`` (default: the stream's)."""
        current = None if self.current is None else self.current.export_state(device)
        return WindowsState(frames=self.frames, opened=self.opened,
                            memory_shrinks=self.memory_shrinks, last_oom=self.last_oom,
                            spoiled=self.spoiled, current=current)

    def import_state(self, state: WindowsState, model_hw: Optional[Tuple[int, int]]) -> None:
        """
        Continue from ``state`` (on a new :class:`Windows`): caches of its spec, filled.

        Checked against what this stream's caches hold before anything changes; a state
        that does not fit is a ValueError (a cache that then refuses it leaves no current
        window), one whose pools do not fit the device OutOfMemory. ``model_hw``: the
        stream's grid (None only without a window).
        """
        configured = self.frames
        if not min(configured, MIN_SLIDING_WINDOW) <= state.frames <= configured:
            raise ValueError(f'sliding window in effect {state.frames} is not allowed: '
                             f'{MIN_SLIDING_WINDOW}..{configured} (the configured one)')
        w = state.current
        if w is not None:
            self._check(w, model_hw)
        self.frames = state.frames
        if w is not None:
            agg, camera = self.caches_for(*model_hw)
            if self.frames != state.frames:  # halved: the saved pages do not fit the device
                raise OutOfMemory(f'out of device memory for the saved window of '
                                  f'{state.frames} frames (pools of {self.frames} fit)')
            try:
                agg.import_state(w.agg)
                camera.import_state(w.camera)
            except BaseException:
                agg.reset()
                camera.reset()
                raise
            self.current = Window(index=w.index, agg=agg, camera=camera, sim3=w.sim3,
                                  time=w.time, seen=w.seen,
                                  overlap=deque(self._on_device(w.overlap),
                                                maxlen=self._scale_frames))
        self.opened, self.memory_shrinks = state.opened, state.memory_shrinks
        self.last_oom, self.spoiled = state.last_oom, state.spoiled

    def _check(self, w: WindowState, model_hw: Optional[Tuple[int, int]]) -> None:
        """Raise ValueError unless ``w`` is what a window of this stream can hold."""
        if model_hw is None:
            raise ValueError('a window without the image grid it was made for')
        spec = self._spec(*model_hw)  # what the cache tensors hold does not depend on frames
        checks = (('aggregator', w.agg, spec.global_layers, spec.global_heads,
                   spec.global_head_dim, spec.dtype),
                  ('camera head', w.camera, spec.camera_layers, spec.camera_heads,
                   spec.camera_head_dim, spec.camera_dtype))
        for name, cache, layers, heads, dim, dtype in checks:
            for t in (cache.keys, cache.values):
                got = (t.shape[0], t.shape[2], t.shape[3]) if t.ndim == 4 else tuple(t.shape)
                if got != (layers, heads, dim) or t.dtype != dtype:
                    raise ValueError(f'the {name} cache {tuple(t.shape)} {t.dtype} does not '
                                     f'fit: [{layers}, tokens, {heads}, {dim}] {dtype}')
        if not w.time == w.agg.frames == w.camera.frames or not 0 < w.time <= self.limit:
            raise ValueError(f'window time {w.time} with {w.agg.frames} and '
                             f'{w.camera.frames} cached frames: expected equal, 1..{self.limit}')
        if len(w.overlap) > self._scale_frames:
            raise ValueError(f'{len(w.overlap)} overlap frames: at most {self._scale_frames}')
        for kept in w.overlap:
            if tuple(kept.image.shape) != (3, *model_hw) or (
                    kept.depth_map is not None and kept.depth_map.shape != tuple(model_hw)):
                raise ValueError(f'overlap frame {kept.index} is not on the {model_hw} grid')

    def _on_device(self, overlap: Sequence[Kept]) -> List[Kept]:
        """Return the overlap frames with their images on the stream's device."""
        return [Kept(index=k.index, image=k.image.to(self._ctx.device), pose_map=k.pose_map,
                     depth_map=k.depth_map) for k in overlap]

    def shrinkable(self, exc: BaseException) -> str:
        """Return why a call ran out of memory; re-raise when the window cannot shrink."""
        if self.frames <= MIN_SLIDING_WINDOW:
            raise exc  # at the smallest window there is nothing left to give
        return _oom_reason(exc)

    def shrink(self, reason: str) -> None:
        """
        Halve the window after a call ran out of device memory; drop the pools it had.

        The call was rolled back; the caller then seeds a window of the new size (a new
        pool is allocated by :meth:`caches_for`, itself halving further if that fails).
        """
        self.memory_shrinks += 1
        half = max(MIN_SLIDING_WINDOW, self.frames // 2)
        self.last_oom = (f'out of device memory at sliding_window={self.frames}; '
                         f'halved to {half} ({reason})')
        self.frames = half
        if self.current is not None:
            self.current.release()
        self._caches = None
        if self._ctx.device.type == 'cuda':
            torch.cuda.empty_cache()
