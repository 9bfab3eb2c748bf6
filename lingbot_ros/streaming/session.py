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
One camera stream's state machine, as the reference's streaming inference runs it.

Phases: the first ``scale_frames`` frames are buffered and run together in one call
(they attend to each other); every later frame is one call. The 3D-RoPE time index of
a call is the number of frames committed to the current window, so it advances only
on committed frames (a non-keyframe shares its index with the next frame).

Every call is a transaction over everything it changes (aggregator cache, camera-head
cache, time index, counters): ``begin`` -> forward -> ``commit`` or ``rollback``. A
keyframe known in advance (interval mode) begins without deferred eviction; a frame
whose fate is decided after the forward (interval non-keyframes, every flow-mode
frame) begins with eviction deferred, so a rollback leaves no trace anywhere,
camera-head cache included. This equals the reference's paged back end.

Windows bound memory and the RoPE table: before the time index would reach
``max_window_frames`` (at most the model's ``max_frame_num``) the session opens a new
window: fresh caches, the last ``scale_frames`` committed frames re-run as its scale
frames, and a Sim(3) from that overlap (see :mod:`~lingbot_ros.streaming.windows`)
maps the new window's poses and depths into the first window's frame. The keyframes
that will seed the next window always compute depth (the Sim(3) scale needs it); an
unplanned window (a cache overflow) with depth off keeps scale 1. If re-running the
overlap fails, the stream restarts with a fresh scale phase (a new map frame).

Device memory: if allocating the pools runs out of memory, the window is halved until
they fit. If a call runs out of memory (its activations did not fit beside the pools),
the call is rolled back, the pools are dropped, the window is halved (down to
``MIN_SLIDING_WINDOW``) and a new window is seeded from the overlap frames, as at a
window change; then the frame is tried again. The smaller window shows in ``stats()``
(``sliding_window``) and ``memory_shrinks``; only at the floor is the error raised.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field, replace
import math
import time
from typing import Any, Callable, Deque, List, Optional, Sequence

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.cache.overflow import CacheOverflow
from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.model.config import ConfigError, ModelConfig, SPECIAL_TOKENS
from lingbot_ros.streaming import products
from lingbot_ros.streaming.caches import CacheFactory, CacheSpec, StreamCache
from lingbot_ros.streaming.call_stats import Attended, CallPhase, CallStats, Resident
from lingbot_ros.streaming.config import KeyframeMode, StreamConfig
from lingbot_ros.streaming.errors import FrameRejected, SizeChanged
from lingbot_ros.streaming.host import HostCopy
from lingbot_ros.streaming.keyframes import make_policy
from lingbot_ros.streaming.result import FrameResult, FrameTimings, FrameType
from lingbot_ros.streaming.trajectory import (intrinsics_from_fov, invert_rigid,
                                              matrix_to_pose_enc, pose_enc_to_matrix)
from lingbot_ros.streaming.windows import align_overlap, Sim3
import numpy as np
import torch


MIN_SLIDING_WINDOW = 4  # the smallest window an out-of-memory shrink goes down to


@dataclass(frozen=True)
class Prepared:
    """One frame on the model grid: ``image [3, H, W]`` in [0, 1] on the model's device."""

    image: torch.Tensor
    model_to_input: np.ndarray  # 3x3: model-grid pixel coordinates -> input pixels
    input_hw: tuple


PrepareFn = Callable[[np.ndarray, StreamConfig], Prepared]
UploadFn = Callable[[torch.Tensor, torch.device], torch.Tensor]


@dataclass(frozen=True)
class SessionContext:
    """What an engine lends its sessions: the model and how to get caches and inputs."""

    model: Callable[..., Any]
    model_config: ModelConfig
    device: torch.device
    dtype: torch.dtype
    backend: AttentionBackend  # or its name: taken as the member
    cache_factory: CacheFactory
    prepare: Optional[PrepareFn] = None
    upload: Optional[UploadFn] = None  # a CPU tensor to the device (None: ``.to(device)``)
    kv_dtype: Optional[torch.dtype] = None  # the aggregator cache's storage (None: dtype)
    camera_kv_dtype: torch.dtype = torch.float32  # the camera head cache's (its compute dtype)
    kv_splits: int = 0  # FlashInfer key parts per call (0: auto)

    def __post_init__(self) -> None:
        object.__setattr__(self, 'backend', AttentionBackend.of(self.backend))


@dataclass
class RunOutputs:
    """
    Fixture-format arrays of a whole run (``outputs.npz`` names) and per-call stats.

    ``kv_stats`` holds one :class:`CallStats` per model call; ``as_record()`` gives it as a
    step of the fixtures' ``kv_stats*.json``.
    """

    arrays: dict
    kv_stats: List[CallStats]
    results: list


@dataclass
class _Kept:
    """A committed frame remembered for seeding the next window."""

    index: int
    image: torch.Tensor
    pose_map: np.ndarray
    depth_map: Optional[np.ndarray]


@dataclass
class _Window:
    index: int
    agg: StreamCache
    camera: StreamCache
    sim3: Sim3 = field(default_factory=Sim3)
    time: int = 0   # frames committed to this window = next RoPE time index
    seen: int = 0   # frames run in this window (committed or not)
    overlap: Deque[_Kept] = field(default_factory=deque)


@dataclass
class _Record:
    """Host copy of one frame's outputs plus what the run arrays need."""

    result: FrameResult
    window_iters: np.ndarray  # the camera head's per-iteration encodings, window frame
    sim3: Sim3                # the window's alignment into the map when they were made
    camera_tokens: np.ndarray
    depth_conf: Optional[np.ndarray]
    flow_px: float = math.nan

    def pose_enc_iters(self) -> np.ndarray:
        """
        Return the per-iteration encodings in the map frame, for the run arrays.

        Mapped only here: only an offline run reads them, and mapping four iterations
        through the Sim(3) on every live frame cost the worker about 3 ms a frame.
        """
        return np.stack([_mapped(self.sim3, e) for e in self.window_iters])


@dataclass(frozen=True)
class _HostOutputs:
    """A call's outputs on the host, one row per frame of the call (float32 unless noted)."""

    pose_enc: np.ndarray          # [S, 9]
    pose_enc_iters: np.ndarray    # [S, iterations, 9]
    camera_tokens: np.ndarray     # [S, 4, 2C]
    depth: Optional[np.ndarray]   # [S, H, W, 1]; None: the call ran without depth
    depth_conf: Optional[np.ndarray]  # [S, H, W]
    colors: Optional[np.ndarray]  # [S, H, W, 3] uint8


@dataclass(frozen=True)
class _Call:
    """
    One model call, from its forward until it is committed or rolled back.

    Its size, its outputs on the host, its time, and its stats as it began (``_finish``
    completes them into ``last_call_stats``).
    """

    frames: int
    host: _HostOutputs
    model_ms: float
    stats: CallStats


@dataclass(frozen=True)
class _Launched:
    """A model call queued on the device, its outputs on their way to the host."""

    frames: int
    copy: HostCopy
    started: float    # perf_counter seconds when the call began
    stats: CallStats  # as in _Call


@dataclass(frozen=True)
class _Flight:
    """
    A streamed frame launched ahead, its outputs not yet on the host.

    Committed or rolled back already (its fate was known before its forward). Landed by
    the next frame's call (after that frame is queued behind it on the device) or by
    ``drain``.
    """

    launched: _Launched
    prep: Prepared
    stamp_ns: int
    index: int
    window: _Window
    kept: bool
    prepare_ms: Optional[float]


def _mapped(sim3: Sim3, enc: np.ndarray) -> np.ndarray:
    """Return a pose encoding of a window's frame in the map frame (float32)."""
    if sim3.is_identity:
        return enc.astype(np.float32)
    return matrix_to_pose_enc(sim3.apply_pose(pose_enc_to_matrix(enc)),
                              enc[7:9]).astype(np.float32)


def _colors(images: torch.Tensor) -> torch.Tensor:
    """Return the model input as the uint8 RGB ``[S, H, W, 3]`` that colours the points."""
    return (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8) \
        .permute(0, 2, 3, 1)


OutOfMemory = torch.cuda.OutOfMemoryError
OOM_REASON_CHARS = 200


def _oom_reason(exc: BaseException) -> str:
    """Return the first line of an out-of-memory error, short enough for diagnostics."""
    text = str(exc).strip().splitlines()
    line = text[0] if text else type(exc).__name__
    return line[:OOM_REASON_CHARS]


class Session:
    """
    One stream: feed frames with :meth:`step` (live) or :meth:`run` (a whole array).

    Thread-compatible, not thread-safe: one caller at a time. ``trajectory`` keeps the
    last ``cfg.trajectory_length`` ``(stamp_ns, pose_c2w [4, 4])`` pairs.
    """

    def __init__(self, ctx: SessionContext, name: str, cfg: StreamConfig) -> None:
        self.name = name
        self._ctx = ctx
        self._cfg = self._checked(cfg)
        self._policy = make_policy(self._cfg)
        self.trajectory: Deque = deque(maxlen=self._cfg.trajectory_length)
        self.last_call_stats: List[CallStats] = []
        self._map_epoch = 0  # maps started over the session's life (never reset)
        self.reset()

    # --- configuration ------------------------------------------------------------------

    @property
    def config(self) -> StreamConfig:
        return self._cfg

    def _checked(self, cfg: StreamConfig) -> StreamConfig:
        cfg.validate()
        max_frames = self._ctx.model_config.aggregator.max_frame_num
        if cfg.scale_frames >= max_frames:
            raise ConfigError(f'scale_frames={cfg.scale_frames} is invalid: expected < the '
                              f"model's max_frame_num ({max_frames})")
        if cfg.max_window_frames > max_frames:
            raise ConfigError(f'max_window_frames={cfg.max_window_frames} is invalid: expected '
                              f"0 or <= the model's max_frame_num ({max_frames})")
        return cfg

    @property
    def window_limit(self) -> int:
        """Most frames one window commits (bounds RoPE time and cache sizes)."""
        max_frames = self._ctx.model_config.aggregator.max_frame_num
        return min(max_frames, self._cfg.max_window_frames or max_frames)

    def update(self, cfg: StreamConfig, reset: bool = False) -> None:
        """
        Apply a new configuration; runtime-safe fields take effect from the next frame.

        Fields outside ``config.RUNTIME_SAFE`` change the caches or the scale phase:
        they raise :class:`ConfigError` unless ``reset`` is true, which applies them
        and resets the session.
        """
        cfg = self._checked(cfg)
        needs_reset = cfg.restart_fields(self._cfg)
        if needs_reset and not reset:
            raise ConfigError(f'{", ".join(needs_reset)} cannot change while streaming: '
                              'allowed only with reset=True')
        self._cfg = cfg
        self._policy = make_policy(cfg)
        if self.trajectory.maxlen != cfg.trajectory_length:
            self.trajectory = deque(self.trajectory, maxlen=cfg.trajectory_length)
        if needs_reset:
            self.reset()

    # --- lifecycle ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the stream: caches, buffers, counters, trajectory."""
        self._buffer: list = []
        self._window: Optional[_Window] = None
        self._caches = None
        # Window frames in effect: the configured ones unless device memory ran out while
        # allocating the pools (then halved, down to MIN_SLIDING_WINDOW; a reset retries).
        self._window_frames = self._cfg.sliding_window
        self._input_hw: Optional[tuple] = None
        self._model_hw: Optional[tuple] = None
        self._index = 0               # frames seen by the session
        self._flight: Optional[_Flight] = None  # a frame submitted ahead, not landed yet
        self._reopen = False          # a kept frame was found non-finite: open a new window
        self._outbox: list = []       # records landed, not yet returned
        self._stream_frames = 0       # frames after the scale phase
        self._last_kf: Optional[tuple] = None  # (index, pose_map, K_model)
        self._windows_opened = 0
        self._keyframes = 0
        self._rollbacks = 0
        self._evictions = 0
        self._overflows = 0
        self._calls = 0
        self._memory_shrinks = 0      # windows halved because a call ran out of memory
        self.last_oom: Optional[str] = None  # why, the last time
        self.trajectory.clear()
        self.last_call_stats = []

    @property
    def window_index(self) -> int:
        return self._windows_opened

    @property
    def frames_seen(self) -> int:
        return self._index

    @property
    def memory_shrinks(self) -> int:
        """Count calls that ran out of device memory and halved the window (since reset)."""
        return self._memory_shrinks

    def stats(self) -> CacheStats:
        """Report the current window's cache state and the session's lifetime counters."""
        w = self._window
        if w is not None and hasattr(w.agg, 'stats'):
            base = w.agg.stats()
        elif w is not None:
            frames = w.agg.frames
            scale = min(frames, self._cfg.scale_frames)
            base = CacheStats(frames=frames, scale_pages=scale,
                              live_pages=w.agg.patch_frames_resident - scale,
                              special_tokens=frames * SPECIAL_TOKENS)
        else:
            base = CacheStats()
        return replace(base, keyframes=self._keyframes, rollbacks=self._rollbacks,
                       evictions=self._evictions, sliding_window=self._window_frames,
                       overflow_events=self._overflows,
                       window_index=self._windows_opened)

    # --- live entry point ---------------------------------------------------------------

    def step(self, image_rgb: np.ndarray, stamp_ns: int) -> list:
        """
        Feed one ``[H, W, 3]`` uint8 RGB frame; return the frames completed by it.

        ``[]`` while the scale frames are buffered, then all of their results at once,
        then one result per frame. A frame of another size than the stream's first
        raises ``ValueError`` and changes nothing (reset to change size). A model call
        that fails (exception, non-finite output: :class:`FrameRejected`) is rolled
        back; if it was the scale call, its buffered frames are dropped and the scale
        phase starts over.
        """
        return self._feed_frame(image_rgb, stamp_ns, pipelined=False)

    def _feed_frame(self, image_rgb: np.ndarray, stamp_ns: int, pipelined: bool) -> list:
        """Check and resize a live frame, then feed it (step or submit)."""
        self._check_frame(image_rgb)
        t0 = time.perf_counter()
        prepared = self._ctx.prepare(image_rgb, self._cfg)
        return self._feed(prepared, int(stamp_ns), self._cfg.scale_frames,
                          prepare_ms=(time.perf_counter() - t0) * 1e3, pipelined=pipelined)

    def _check_frame(self, image_rgb: np.ndarray) -> None:
        """Refuse what step/submit cannot take, before anything changes."""
        if not isinstance(image_rgb, np.ndarray) or image_rgb.dtype != np.uint8 \
                or image_rgb.ndim != 3 or image_rgb.shape[2] != 3:
            desc = (f'{image_rgb.dtype} {image_rgb.shape}' if isinstance(image_rgb, np.ndarray)
                    else type(image_rgb).__name__)
            raise ValueError(f'expected an [H, W, 3] uint8 RGB array, got {desc}')
        hw = tuple(image_rgb.shape[:2])
        if self._input_hw is not None and hw != self._input_hw:
            raise SizeChanged(f"frame size {hw[1]}x{hw[0]} differs from the stream's "
                              f'{self._input_hw[1]}x{self._input_hw[0]}; reset the session '
                              'to change size')
        if self._ctx.prepare is None:
            raise RuntimeError('this session has no frame preprocessing; use run()')

    # --- array entry point ----------------------------------------------------------------

    def run(self, images: torch.Tensor, stamps: Optional[Sequence[int]] = None,
            progress: Optional[Callable[[int], None]] = None) -> RunOutputs:
        """
        Run a whole ``[S, 3, H, W]`` stack in [0, 1] from a fresh state.

        The scale phase takes ``min(scale_frames, S)`` frames, as the reference does.
        ``stamps`` default to the frame index in nanoseconds. ``progress`` is called
        with the number of frames done after every call (a frame is done once its
        outputs are on the host). Each streamed frame is queued on the device before the
        one before is finished on the host, as :meth:`submit` does.
        """
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f'expected images [S, 3, H, W], got {tuple(images.shape)}')
        self.reset()
        s = images.shape[0]
        stamps = list(range(s)) if stamps is None else [int(x) for x in stamps]
        if len(stamps) != s:
            raise ValueError(f'{len(stamps)} stamps for {s} images')
        hw = (int(images.shape[2]), int(images.shape[3]))
        scale = min(self._cfg.scale_frames, s)
        records, stats = [], []
        for i in range(s):
            image = images[i].to(self._ctx.device) if self._ctx.upload is None \
                else self._ctx.upload(images[i], self._ctx.device)
            prep = Prepared(image=image.to(torch.float32),
                            model_to_input=np.eye(3), input_hw=hw)
            records += self._feed(prep, stamps[i], scale, keep_records=True, pipelined=True)
            stats += self.last_call_stats
            if progress is not None:
                progress(len(records))
        if self._flight is not None:
            self._land_flight()
            records += self._take(keep_records=True)
            if progress is not None:
                progress(len(records))
        return RunOutputs(arrays=self._arrays(records), kv_stats=stats,
                          results=[r.result for r in records])

    # --- pipelined entry point -------------------------------------------------------------

    def submit(self, image_rgb: np.ndarray, stamp_ns: int) -> list:
        """
        :meth:`step`, but a streamed frame may stay on the device: return what has landed.

        A frame whose keyframe decision is known before its forward (interval mode) is
        committed or rolled back at once and left in flight; the next ``submit`` queues
        its own frame behind it on the device, then lands it (waits for its outputs and
        builds its result) while the device works. The device then never waits for the
        host between frames. Call :meth:`drain` when no frame follows soon: until then
        the last frame's result is held back. Flow-mode frames and the scale phase run
        as in :meth:`step`; a frame that opens a window first lands the one in flight
        (whose keys may seed the window), then goes ahead itself.

        Unlike :meth:`step`, a committed frame found non-finite when it lands has
        already been kept: it is rejected (:class:`FrameRejected`) together with the
        frame queued behind it, and the next frame opens a new window seeded from the
        last keyframes.
        """
        return self._feed_frame(image_rgb, stamp_ns, pipelined=True)

    def drain(self) -> list:
        """Land the frame left in flight by :meth:`submit`, if any; return its result."""
        self.last_call_stats = []
        self._land_flight()
        return self._take(keep_records=False)

    @property
    def in_flight(self) -> bool:
        """Whether a frame submitted ahead has not landed yet."""
        return self._flight is not None

    def flight_ready(self) -> bool:
        """Whether :meth:`drain` would find the frame in flight done on the device."""
        return self._flight is None or self._flight.launched.copy.ready()

    def flight_waiter(self) -> Callable[[], None]:
        """
        Return a call that blocks until the frame now in flight is done on the device.

        It touches nothing of the session (another thread may run it, to wake the
        session's owner); the frame still lands only through :meth:`drain` or the next
        :meth:`submit`.
        """
        if self._flight is None:
            return lambda: None
        return self._flight.launched.copy.wait_ready

    # --- the state machine ------------------------------------------------------------

    def _feed(self, prep: Prepared, stamp_ns: int, scale: int, keep_records: bool = False,
              prepare_ms: Optional[float] = None, pipelined: bool = False) -> list:
        """
        Run one frame; return every record landed since the last return, oldest first.

        Records land in ``_outbox``: a frame landed before a later part of the same call
        failed is returned by the next call instead of being lost with the exception.
        """
        model_hw = tuple(prep.image.shape[-2:])
        if self._model_hw is not None and model_hw != self._model_hw:
            raise SizeChanged(f"model grid {model_hw} differs from the stream's "
                              f'{self._model_hw}; reset the session to change size')
        self.last_call_stats = []
        if self._window is None:
            self._land_flight(with_current=True)
            self._buffer.append((prep, stamp_ns))
            self._input_hw, self._model_hw = tuple(prep.input_hw), model_hw
            if len(self._buffer) >= scale:
                self._outbox += self._run_scale()
        else:
            self._run_stream(prep, stamp_ns, prepare_ms, ahead=pipelined)
        return self._take(keep_records)

    def _take(self, keep_records: bool) -> list:
        """Hand out the landed records (into the trajectory, in order)."""
        records, self._outbox = self._outbox, []
        for rec in records:
            self.trajectory.append((rec.result.stamp_ns, rec.result.pose_c2w))
        return records if keep_records else [r.result for r in records]

    def _caches_for(self, h: int, w: int) -> tuple:
        """Create (once per size) the caches through the injected factory."""
        mc = self._ctx.model_config
        p = mc.patch_size
        key = (h, w, self._cfg.scale_frames, self._window_frames, self.window_limit)
        if self._caches is None or self._caches[0] != key:
            agg, cam = mc.aggregator, mc.camera_head
            self._caches = None  # let the old pools go before new ones are allocated
            while True:
                spec = CacheSpec(
                    special_tokens=SPECIAL_TOKENS, patches_per_frame=(h // p) * (w // p),
                    scale_frames=self._cfg.scale_frames, sliding_window=self._window_frames,
                    max_frames=self.window_limit, global_layers=agg.depth,
                    global_heads=agg.num_heads, global_head_dim=agg.head_dim,
                    camera_layers=cam.trunk_depth * self._iterations(),
                    camera_heads=cam.num_heads, camera_head_dim=mc.head_width // cam.num_heads,
                    device=self._ctx.device, dtype=self._ctx.kv_dtype or self._ctx.dtype,
                    camera_dtype=self._ctx.camera_kv_dtype,
                    backend=self._ctx.backend, kv_splits=self._ctx.kv_splits)
                try:
                    self._caches = (key, *self._ctx.cache_factory(spec))
                    break
                except torch.cuda.OutOfMemoryError:
                    if self._window_frames <= MIN_SLIDING_WINDOW:
                        raise
                    # Too little device memory for this window: halve it and go on.
                    self._window_frames = max(MIN_SLIDING_WINDOW, self._window_frames // 2)
                    key = key[:3] + (self._window_frames,) + key[4:]
                    if self._ctx.device.type == 'cuda':
                        torch.cuda.empty_cache()
        _, gc, cc = self._caches
        gc.reset()
        cc.reset()
        return gc, cc

    def _iterations(self) -> int:
        return self._cfg.camera_iterations or self._ctx.model_config.camera_head.iterations

    def _run_scale(self) -> list:
        self._map_epoch += 1  # a scale phase starts a map of its own (not aligned to any other)
        entries, self._buffer = self._buffer, []
        images = torch.stack([p.image for p, _ in entries])
        while True:
            gc, cc = self._caches_for(*images.shape[-2:])
            window = _Window(index=self._windows_opened, agg=gc, camera=cc,
                             overlap=deque(maxlen=self._cfg.scale_frames))
            self._window = window
            oom = None
            try:
                seeds_next = len(entries) > self.window_limit - self._cfg.scale_frames
                call = self._forward(
                    window, images, CallPhase.SCALE, defer=False,
                    with_depth=self._cfg.with_depth or seeds_next,
                    frames=range(self._index, self._index + len(entries)))
                break
            except OutOfMemory as exc:
                self._window = None
                oom = self._shrinkable(exc)
            except BaseException:
                self._window = None
                raise
            window = gc = cc = None
            self._shrink_for_memory(oom)  # outside the handler: the call's tensors are gone
        self._finish(window, call.frames, call.stats, True)
        records = []
        for j, (prep, stamp) in enumerate(entries):
            rec = self._record(call, j, prep, stamp, FrameType.SCALE, window, self._index)
            self._index += 1
            self._remember(window, prep, rec)
            records.append(self._published(rec))
        self._last_kf = (self._index - 1, records[-1].result.pose_c2w,
                         records[-1].result.intrinsics_model)
        return records

    def _published(self, rec: _Record) -> _Record:
        """Drop depth computed only for internal use when the stream asked for none."""
        if not self._cfg.with_depth and rec.result.depth is not None:
            rec.result = replace(rec.result, depth=None, confidence=None, colors=None)
            rec.depth_conf = None
        return rec

    def _run_stream(self, prep: Prepared, stamp_ns: int, prepare_ms: Optional[float] = None,
                    ahead: bool = False) -> None:
        """
        Run one streamed frame; its record (and any landed before it) go to ``_outbox``.

        ``ahead``: a frame whose keyframe decision is known before its forward is
        committed or rolled back at once and left in flight; the frame in flight before it
        lands after this one is queued on the device.
        """
        t0 = time.perf_counter()
        if self._window.time >= self.window_limit or self._reopen:
            self._land_flight(with_current=True)  # it may seed the window: land it first
            self._open_window()
        window = self._window
        first = self._stream_frames == 0
        since = self._index - self._last_kf[0]
        decision = self._policy.before(since, first)
        ahead = ahead and decision is not None
        if not ahead:
            self._land_flight(with_current=True)
        # Depth is also needed by flow decisions and, for the Sim(3) scale, by the
        # keyframes that will seed the next window (the last scale_frames of this one).
        overflowed = False
        while True:
            seeds_next = decision is True and \
                window.time >= self.window_limit - self._cfg.scale_frames
            needs_depth = self._cfg.with_depth or self._policy.needs_flow or seeds_next
            oom = None
            try:
                launched = self._launch(
                    window, prep.image[None], CallPhase.STREAM, defer=decision is not True,
                    with_depth=needs_depth, frames=[self._index], decided=decision)
                break
            except CacheOverflow:
                # The cache refused the frame and changed nothing: open a window, retry once.
                self._overflows += 1
                if overflowed:
                    raise
                overflowed = True
                self._land_flight(with_current=True)
                self._open_window()
                window = self._window
                continue
            except OutOfMemory as exc:  # rolled back by _launch
                oom = self._shrinkable(exc)
            # Outside the handler, so the failed call's activations went with its traceback.
            self._land_flight(with_current=True)
            self._shrink_for_memory(oom)
            self._open_window()
            window = self._window
        index = self._index
        self._index += 1
        if ahead:
            self._commit_ahead(_Flight(launched=launched, prep=prep, stamp_ns=stamp_ns,
                                       index=index, window=window, kept=decision,
                                       prepare_ms=prepare_ms))
            return
        call = self._land(launched, window, 'the call')
        try:
            ftype = FrameType.KEYFRAME if decision else FrameType.NON_KEYFRAME
            rec = self._record(call, 0, prep, stamp_ns, ftype, window, index)
            if decision is None:
                rec.flow_px = self._flow(rec)
                decision = bool(self._policy.after(since, first, rec.flow_px))
                if not decision:
                    rec.result = replace(rec.result, frame_type=FrameType.NON_KEYFRAME)
                else:
                    rec.result = replace(rec.result, frame_type=FrameType.KEYFRAME)
        except BaseException:
            self._abort(window)
            raise
        self._finish(window, call.frames, call.stats, decision, flow_px=rec.flow_px)
        self._stream_frames += 1
        if decision:
            self._keyframes += 1
            self._remember(window, prep, rec)
            self._last_kf = (index, rec.result.pose_c2w, rec.result.intrinsics_model)
        else:
            self._rollbacks += 1
        timings = replace(rec.result.timings, step=(time.perf_counter() - t0) * 1e3,
                          prepare=prepare_ms)
        rec.result = replace(rec.result, timings=timings)
        self._outbox.append(self._published(rec))

    # --- frames launched ahead ------------------------------------------------------------

    def _commit_ahead(self, flight: _Flight) -> None:
        """Keep or drop a frame launched ahead now; land the one before it behind it."""
        self._finish(flight.window, flight.launched.frames, flight.launched.stats,
                     flight.kept)
        self._stream_frames += 1
        if flight.kept:
            self._keyframes += 1
            self._last_kf = (flight.index, *self._last_kf[1:])  # its pose follows at landing
        else:
            self._rollbacks += 1
        earlier, self._flight = self._flight, flight
        if earlier is None:
            return
        try:
            self._outbox.append(self._landed(earlier))
        except FrameRejected as exc:
            if not earlier.kept:
                raise  # rolled back: the frame queued behind it never saw it
            # Kept, and the frame behind it attended to it: both go, the window is re-seeded.
            self._flight = None
            flight.launched.copy.wait()
            self._reopen = True
            raise FrameRejected(f'{exc}; the frame queued behind it (stamp '
                                f'{flight.stamp_ns}) is dropped with it and the window is '
                                're-seeded', frames=2) from exc

    def _land_flight(self, with_current: bool = False) -> None:
        """
        Land the frame in flight, if any, into ``_outbox``.

        ``with_current``: called for a frame not yet run, which a rejection of the frame in
        flight then drops too (and says so: ``FrameRejected.frames`` counts it).
        """
        flight, self._flight = self._flight, None
        if flight is None:
            return
        try:
            self._outbox.append(self._landed(flight))
        except FrameRejected as exc:
            self._reopen = self._reopen or flight.kept  # kept: the window's keys are spoiled
            if not with_current:
                raise
            raise FrameRejected(f'{exc}; the frame that came after it is dropped with it',
                                frames=exc.frames + 1) from exc

    def _landed(self, flight: _Flight) -> _Record:
        """Wait for a launched frame's outputs and build its record."""
        call = self._land(flight.launched, None, f'stamp {flight.stamp_ns}')
        ftype = FrameType.KEYFRAME if flight.kept else FrameType.NON_KEYFRAME
        rec = self._record(call, 0, flight.prep, flight.stamp_ns, ftype, flight.window,
                           flight.index)
        if flight.kept:
            self._remember(flight.window, flight.prep, rec)
            if self._last_kf[0] == flight.index:
                self._last_kf = (flight.index, rec.result.pose_c2w,
                                 rec.result.intrinsics_model)
        step_ms = (time.perf_counter() - flight.launched.started) * 1e3
        timings = replace(rec.result.timings, step=step_ms, prepare=flight.prepare_ms)
        rec.result = replace(rec.result, timings=timings)
        return self._published(rec)

    def _open_window(self) -> None:
        """
        Start a new window seeded with the last committed frames, aligned by Sim(3).

        Running out of memory while re-running them halves the window (fresh, smaller
        pools) and tries again; at the smallest window the error is raised and the
        stream restarts with a scale phase.
        """
        old = self._window
        index, kept = old.index + 1, list(old.overlap)
        self._window = None  # a failure below restarts the stream with a scale phase
        self._reopen = False
        old.agg = old.camera = None  # the pools stay only in self._caches (dropped on a shrink)
        while True:
            oom = None
            try:
                self._seed_window(index, kept)
                return
            except OutOfMemory as exc:
                oom = self._shrinkable(exc)
            self._shrink_for_memory(oom)

    def _seed_window(self, index: int, kept: list) -> None:
        gc, cc = self._caches_for(*kept[0].image.shape[-2:])
        window = _Window(index=index, agg=gc, camera=cc,
                         overlap=deque(kept, maxlen=self._cfg.scale_frames))
        images = torch.stack([k.image for k in kept])
        with_depth = all(k.depth_map is not None for k in kept)
        call = self._forward(window, images, CallPhase.RESEED, defer=False,
                             with_depth=with_depth, frames=[k.index for k in kept])
        self._finish(window, call.frames, call.stats, True)
        host = call.host
        curr = pose_enc_to_matrix(host.pose_enc)
        depths = None if host.depth is None else list(host.depth[..., 0])
        window.sim3 = align_overlap([k.pose_map for k in kept], list(curr),
                                    [k.depth_map for k in kept] if with_depth else None, depths)
        self._window = window
        self._windows_opened += 1

    def _shrinkable(self, exc: BaseException) -> str:
        """Return why a call ran out of memory; re-raise when the window cannot shrink."""
        if self._window_frames <= MIN_SLIDING_WINDOW:
            raise exc  # at the smallest window there is nothing left to give
        return _oom_reason(exc)

    def _shrink_for_memory(self, reason: str) -> None:
        """
        Halve the window after a call ran out of device memory; drop the pools it had.

        The call was rolled back; the caller then seeds a window of the new size (a new
        pool is allocated by ``_caches_for``, itself halving further if that fails).
        """
        self._memory_shrinks += 1
        self.last_oom = (f'out of device memory at sliding_window={self._window_frames}; '
                         f'halved to {max(MIN_SLIDING_WINDOW, self._window_frames // 2)} '
                         f'({reason})')
        self._window_frames = max(MIN_SLIDING_WINDOW, self._window_frames // 2)
        if self._window is not None:
            self._window.agg = self._window.camera = None
        self._caches = None
        if self._ctx.device.type == 'cuda':
            torch.cuda.empty_cache()

    # --- one transaction ------------------------------------------------------------------

    def _forward(self, window: _Window, images: torch.Tensor, phase: CallPhase, *,
                 defer: bool, with_depth: bool, frames: Sequence[int],
                 decided: Optional[bool] = True) -> _Call:
        """Begin, run the model and copy its outputs to the host; roll back on failure."""
        launched = self._launch(window, images, phase, defer=defer, with_depth=with_depth,
                                frames=frames, decided=decided)
        return self._land(launched, window, 'the call')

    def _launch(self, window: _Window, images: torch.Tensor, phase: CallPhase, *,
                defer: bool, with_depth: bool, frames: Sequence[int],
                decided: Optional[bool] = True) -> _Launched:
        """Begin and queue the model call and the copy of its outputs; roll back on failure."""
        n = int(images.shape[0])
        window.agg.begin(n, defer_eviction=defer)
        try:
            window.camera.begin(n, defer_eviction=defer)
        except BaseException:
            window.agg.rollback()
            raise
        attended = self._attended(window, n, defer)
        t0 = time.perf_counter()
        try:
            out = self._ctx.model(images, time_index=window.time, first_frame=phase.first,
                                  scale_frames=phase.first, global_cache=window.agg,
                                  camera_cache=window.camera, with_depth=with_depth,
                                  camera_iterations=self._cfg.camera_iterations)
            colors = _colors(images) if with_depth else None
            copy = HostCopy({
                'pose_enc': out.pose_enc, 'pose_enc_iters': out.pose_enc_iters,
                'depth': out.depth if with_depth else None,
                'depth_conf': out.depth_conf if with_depth else None,
                'colors': colors, 'camera_tokens': out.camera_tokens,
            })
        except BaseException:
            self._abort(window)
            raise
        stats = CallStats(call_index=self._calls, window_index=window.index,
                          frame_indices=tuple(frames), phase=phase,
                          rope_time_index_start=window.time, attended=attended,
                          is_keyframe=decided)
        return _Launched(n, copy, t0, stats)

    def _land(self, launched: _Launched, window: Optional[_Window], what: str) -> _Call:
        """
        Wait for a launched call's outputs; refuse a non-finite pose.

        ``window``: the call's, while it is still open (rolled back on failure); None for
        a call already committed or rolled back.
        """
        try:
            host = _HostOutputs(**launched.copy.wait())
            if not np.all(np.isfinite(host.pose_enc)):
                raise FrameRejected(f'the model returned a non-finite pose for {what}; '
                                    'frame dropped')
        except BaseException:
            if window is not None:
                self._abort(window)
            raise
        model_ms = (time.perf_counter() - launched.started) * 1e3
        return _Call(launched.frames, host, model_ms, launched.stats)

    def _abort(self, window: _Window) -> None:
        window.agg.rollback()
        window.camera.rollback()

    def _finish(self, window: _Window, n: int, stats: CallStats, keep: bool,
                flow_px: float = math.nan) -> None:
        """Commit (run the deferred eviction, advance time) or roll back the open call."""
        if keep:
            self._evictions += int(window.agg.commit() or 0)
            window.camera.commit()
            window.time += n
        else:
            window.agg.rollback()
            window.camera.rollback()
        window.seen += n
        self._calls += 1
        self.last_call_stats.append(stats.finished(keep, self._resident(window), flow_px))

    # --- cache counters as the fixtures report them -------------------------------------

    def _attended(self, window: _Window, n: int, defer: bool) -> Attended:
        """Keys the call attends to: derived from committed counters and the call's size."""
        committed = window.agg.frames
        resident = window.agg.patch_frames_resident
        sc = self._cfg.scale_frames
        scale_done = min(committed, sc)
        pending_scale = min(n, max(sc - committed, 0))
        window_vis = resident - scale_done + n - pending_scale
        if not defer:
            window_vis = min(window_vis, self._window_frames)
        patches = self._patches_per_frame()
        tokens = SPECIAL_TOKENS * (committed + n) + patches * (scale_done + pending_scale
                                                               + window_vis)
        return Attended(agg_tokens_block0=tokens,
                        camera_frames_per_iter=(window.camera.frames + n,) * self._iterations())

    def _resident(self, window: _Window) -> Resident:
        frames, resident = window.agg.frames, window.agg.patch_frames_resident
        return Resident(total_frames_processed=window.time, patch_frames_resident=resident,
                        special_frames_resident=frames,
                        visible_kv_tokens=resident * self._patches_per_frame()
                        + frames * SPECIAL_TOKENS,
                        camera_frame_idx=window.seen,
                        camera_cache_frames=(window.camera.frames,) * self._iterations())

    def _patches_per_frame(self) -> int:
        p = self._ctx.model_config.patch_size
        return (self._model_hw[0] // p) * (self._model_hw[1] // p)

    # --- outputs --------------------------------------------------------------------------

    def _record(self, call: '_Call', j: int, prep: Prepared, stamp_ns: int, ftype: FrameType,
                window: _Window, index: int) -> _Record:
        """Build frame ``j`` of a call's host outputs, mapped into the session's frame."""
        host, model_ms = call.host, call.model_ms
        h, w = self._model_hw
        sim3 = window.sim3
        enc = _mapped(sim3, host.pose_enc[j])
        pose = pose_enc_to_matrix(enc)
        k_model = intrinsics_from_fov(enc[7], enc[8], h, w)
        depth = conf = colors = None
        if host.depth is not None:
            depth = (host.depth[j, ..., 0] * sim3.scale).astype(np.float32, copy=False)
            conf = host.depth_conf[j]
            colors = host.colors[j]
        result = FrameResult(
            stamp_ns=stamp_ns, index=index, frame_type=ftype, pose_c2w=pose,
            pose_enc=enc, intrinsics=np.asarray(prep.model_to_input, np.float64) @ k_model,
            intrinsics_model=k_model, input_hw=tuple(prep.input_hw), model_hw=(h, w),
            window_index=window.index, depth=depth, confidence=conf, colors=colors,
            timings=FrameTimings(model=model_ms), map_epoch=self._map_epoch)
        if self._cfg.with_depth and self._cfg.products.wanted:
            result = products.make(self._cfg.products, result)
        return _Record(result=result, window_iters=host.pose_enc_iters[j], sim3=sim3,
                       camera_tokens=host.camera_tokens[j], depth_conf=conf)

    def _remember(self, window: _Window, prep: Prepared, rec: _Record) -> None:
        r = rec.result
        window.overlap.append(_Kept(index=r.index, image=prep.image, pose_map=r.pose_c2w,
                                    depth_map=r.depth))

    def _flow(self, rec: _Record) -> float:
        """
        Mean flow (model-grid pixels) of the frame's motion against the last keyframe.

        Computed on the host copies in float64, in the map frame: a Sim(3) applied to
        both cameras and the depth leaves the flow unchanged, so keyframes of earlier
        windows compare correctly.
        """
        from lingbot_ros.streaming.flow import flow_magnitude
        _, kf_pose, kf_k = self._last_kf
        r = rec.result
        if r.depth is None:
            return math.inf
        as_t = torch.from_numpy
        return float(flow_magnitude(as_t(r.depth.astype(np.float64)), as_t(r.pose_c2w),
                                    as_t(r.intrinsics_model), as_t(kf_pose), as_t(kf_k)))

    def _arrays(self, records: list) -> dict:
        if not records:
            return {}
        res = [r.result for r in records]
        enc = np.stack([r.pose_enc for r in res]).astype(np.float32)
        mats = pose_enc_to_matrix(enc)
        h, w = res[0].model_hw
        arrays = {
            'pose_enc': enc,
            'pose_enc_iters': np.stack([r.pose_enc_iters() for r in records]),
            'extrinsic_w2c': mats[:, :3, :4].astype(np.float32),
            'extrinsic_c2w': invert_rigid(mats)[:, :3, :4].astype(np.float32),
            'intrinsic': intrinsics_from_fov(enc[:, 7], enc[:, 8], h, w).astype(np.float32),
        }
        if all(r.depth is not None for r in res):
            arrays['depth'] = np.stack([r.depth for r in res])[..., None]
            arrays['depth_conf'] = np.stack([r.depth_conf for r in records])
        arrays['debug_agg_camera_tokens'] = np.stack([r.camera_tokens for r in records])
        arrays['frame_type'] = np.array([int(r.frame_type) for r in res], dtype=np.uint8)
        arrays['is_keyframe'] = arrays['frame_type'] != FrameType.NON_KEYFRAME
        flows = [r.flow_px for r in records]
        if self._cfg.keyframe_mode == KeyframeMode.FLOW:
            arrays['flow_magnitude'] = np.array(flows, dtype=np.float64)
        if self._windows_opened:
            arrays['window_index'] = np.array([r.window_index for r in res], dtype=np.int32)
        return arrays
