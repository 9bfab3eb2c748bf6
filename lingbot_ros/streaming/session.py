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

Who owns what: :mod:`.windows` (``Windows``) the current window, its caches, the window
size in effect and the out-of-memory shrinks, and seeds a new window from the overlap
frames; :mod:`.flight` (``FramesInFlight``) the frame queued ahead on the device;
:mod:`.offline` (``StackRun``) an offline run's records and arrays. The session owns the
rest: the scale buffer, the frame index, the last keyframe, the counters of ``stats()``.
The keyframes that will seed the next window always compute depth (the Sim(3) scale
needs it); an unplanned window (a cache overflow) with depth off keeps scale 1. If
re-running the overlap fails, the stream restarts with a fresh scale phase (a new map).
"""

from __future__ import annotations

from collections import deque
from dataclasses import astuple, replace
import math
import time
from typing import Callable, Deque, List, Optional, Sequence

from lingbot_ros.cache.overflow import CacheOverflow
from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming import products
from lingbot_ros.streaming.call_stats import CallPhase, CallStats
from lingbot_ros.streaming.config import KeyframeMode, StreamConfig
from lingbot_ros.streaming.context import PrepareFn, SessionContext, UploadFn
from lingbot_ros.streaming.errors import FrameRejected, SizeChanged
from lingbot_ros.streaming.flight import (frame_record, FramesInFlight, host_copy, InFlight,
                                          land, Landed, Launched, Record)
from lingbot_ros.streaming.flow import host_flow
from lingbot_ros.streaming.keyframes import make_policy
from lingbot_ros.streaming.offline import RunOutputs, StackRun
from lingbot_ros.streaming.preprocess import Prepared
from lingbot_ros.streaming.relocalise import KeyframeTrack, ResumeReport
from lingbot_ros.streaming.result import FrameType
from lingbot_ros.streaming.state_file import Counters, SessionState
from lingbot_ros.streaming.windows import Kept, OutOfMemory, Window, Windows
import numpy as np
import torch

__all__ = ['FrameRejected', 'Prepared', 'PrepareFn', 'Session', 'SessionContext',
           'SizeChanged', 'UploadFn']


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
        self._keyframe_track = KeyframeTrack(self._cfg.trajectory_length)
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
        return self._windows.limit

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
        self._keyframe_track.bound(cfg.trajectory_length)
        if needs_reset:
            self.reset()

    # --- lifecycle ------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the stream: caches, buffers, counters, trajectory."""
        self._buffer: list = []
        # A new Windows drops the pools and tries the configured window size again.
        self._windows = Windows(self._ctx, self._cfg)
        self._flight = FramesInFlight(self._landed, self._windows.spoil)
        self._input_hw: Optional[tuple] = None
        self._model_hw: Optional[tuple] = None
        self._index = 0               # frames seen by the session
        self._outbox: list = []       # records landed, not yet returned
        self._stream_frames = 0       # frames after the scale phase
        self._last_kf: Optional[tuple] = None  # (index, pose_map, K_model)
        self._keyframes = 0
        self._rollbacks = 0
        self._evictions = 0
        self._overflows = 0
        self._calls = 0
        self.trajectory.clear()
        self._keyframe_track.clear()
        self.last_call_stats = []

    @property
    def window_index(self) -> int:
        return self._windows.opened

    @property
    def frames_seen(self) -> int:
        return self._index

    @property
    def memory_shrinks(self) -> int:
        """Count calls that ran out of device memory and halved the window (since reset)."""
        return self._windows.memory_shrinks

    @property
    def last_oom(self) -> Optional[str]:
        """Say why the window was last halved (None since reset)."""
        return self._windows.last_oom

    @property
    def resume_report(self) -> Optional[ResumeReport]:
        """Tell how the first frames after :meth:`import_state` sit against saved keyframes."""
        return self._keyframe_track.report

    def stats(self) -> CacheStats:
        """Report the current window's cache state and the session's lifetime counters."""
        return replace(self._windows.cache_stats(), keyframes=self._keyframes,
                       rollbacks=self._rollbacks, evictions=self._evictions,
                       sliding_window=self._windows.frames, overflow_events=self._overflows,
                       window_index=self._windows.opened)

    # --- saved state (streaming/state.py writes and checks it) -----------------------------

    def export_state(self, device: Optional[torch.device] = None) -> SessionState:
        """Return what the next frame reads (caches copied onto ``device``); drain() first."""
        if self._flight.busy or self._outbox:
            raise RuntimeError('export_state() with frames not handed out: drain() first')
        return SessionState(
            input_hw=self._input_hw, model_hw=self._model_hw, buffer=tuple(self._buffer),
            index=self._index, stream_frames=self._stream_frames, last_keyframe=self._last_kf,
            counters=Counters(self._keyframes, self._rollbacks, self._evictions,
                              self._overflows, self._calls),
            map_epoch=self._map_epoch, trajectory=tuple(self.trajectory),
            keyframes=self._keyframe_track.export(),
            windows=self._windows.export_state(device))

    def import_state(self, state: SessionState, report_frames: int) -> None:
        """Continue from ``state`` exactly; one that does not fit is a ValueError, no change."""
        windows = Windows(self._ctx, self._cfg)
        windows.import_state(state.windows, state.model_hw)
        self.reset()
        self._windows = windows
        self._flight = FramesInFlight(self._landed, windows.spoil)
        self._buffer = [(replace(p, image=p.image.to(self._ctx.device)), s)
                        for p, s in state.buffer]
        self._input_hw, self._model_hw = state.input_hw, state.model_hw
        self._index, self._stream_frames = state.index, state.stream_frames
        self._last_kf, self._map_epoch = state.last_keyframe, state.map_epoch
        (self._keyframes, self._rollbacks, self._evictions, self._overflows,
         self._calls) = astuple(state.counters)
        self.trajectory.extend(state.trajectory)
        self._keyframe_track.restore(state.keyframes, report_frames)

    # --- live entry points ----------------------------------------------------------------

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
        return self._flight.busy

    def flight_ready(self) -> bool:
        """Whether :meth:`drain` would find the frame in flight done on the device."""
        return self._flight.ready()

    def flight_waiter(self) -> Callable[[], None]:
        """
        Return a call that blocks until the frame now in flight is done on the device.

        It touches nothing of the session (another thread may run it, to wake the
        session's owner); the frame still lands only through :meth:`drain` or the next
        :meth:`submit`.
        """
        return self._flight.waiter()

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
            progress: Optional[Callable[[int], None]] = None,
            resume: bool = False) -> RunOutputs:
        """
        Run a whole ``[S, 3, H, W]`` stack in [0, 1] from a fresh state, or ``resume``.

        ``resume``: from the state the stream is in (one :meth:`import_state` restored).
        The scale phase takes ``min(scale_frames, S)`` frames, as the reference does.
        ``stamps`` default to the frame index in nanoseconds. ``progress`` is called
        with the number of frames done after every call (a frame is done once its
        outputs are on the host). Each streamed frame is queued on the device before the
        one before is finished on the host, as :meth:`submit` does.
        """
        stack = StackRun(images, stamps, self._cfg.scale_frames, progress)
        if not resume:
            self.reset()
        for prep, stamp in stack.frames(self._ctx.device, self._ctx.upload):
            stack.landed(self._feed(prep, stamp, stack.scale, keep_records=True,
                                    pipelined=True), self.last_call_stats)
        if self._flight.busy:
            self._land_flight()
            stack.landed(self._take(keep_records=True))
        return stack.outputs(flow=self._cfg.keyframe_mode == KeyframeMode.FLOW,
                             windowed=self._windows.opened > 0)

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
        if self._windows.current is None:
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
            self._keyframe_track.landed(rec.result)
        return records if keep_records else [r.result for r in records]

    def _run_scale(self) -> list:
        self._map_epoch += 1  # a scale phase starts a map of its own (not aligned to any other)
        entries, self._buffer = self._buffer, []
        images = torch.stack([p.image for p, _ in entries])
        while True:
            window = self._windows.start(*images.shape[-2:])
            oom = None
            try:
                seeds_next = len(entries) > self.window_limit - self._cfg.scale_frames
                call = self._forward(
                    window, images, CallPhase.SCALE, defer=False,
                    with_depth=self._cfg.with_depth or seeds_next,
                    frames=range(self._index, self._index + len(entries)))
                break
            except OutOfMemory as exc:
                self._windows.drop()
                oom = self._windows.shrinkable(exc)
            except BaseException:
                self._windows.drop()
                raise
            window = None
            self._windows.shrink(oom)  # outside the handler: the call's tensors are gone
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

    def _published(self, rec: Record) -> Record:
        """Drop depth computed only for internal use when the stream asked for none."""
        if not self._cfg.with_depth and rec.result.depth is not None:
            rec.result = replace(rec.result, depth=None, confidence=None, colors=None)
            rec.depth_conf = None
        return rec

    def _reseed(self, window: Window, images: torch.Tensor, frames: List[int],
                with_depth: bool) -> tuple:
        """Run and commit a new window's overlap call; return its pose_enc and depth."""
        call = self._forward(window, images, CallPhase.RESEED, defer=False,
                             with_depth=with_depth, frames=frames)
        self._finish(window, call.frames, call.stats, True)
        return call.host.pose_enc, call.host.depth

    def _run_stream(self, prep: Prepared, stamp_ns: int, prepare_ms: Optional[float] = None,
                    ahead: bool = False) -> None:
        """
        Run one streamed frame; its record (and any landed before it) go to ``_outbox``.

        ``ahead``: a frame whose keyframe decision is known before its forward is
        committed or rolled back at once and left in flight; the frame in flight before it
        lands after this one is queued on the device.
        """
        t0 = time.perf_counter()
        if self._windows.current.time >= self.window_limit or self._windows.spoiled:
            self._land_flight(with_current=True)  # it may seed the window: land it first
            self._windows.open_next(self._reseed)
        window = self._windows.current
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
                self._windows.open_next(self._reseed)
                window = self._windows.current
                continue
            except OutOfMemory as exc:  # rolled back by _launch
                oom = self._windows.shrinkable(exc)
            # Outside the handler, so the failed call's activations went with its traceback.
            self._land_flight(with_current=True)
            self._windows.shrink(oom)
            self._windows.open_next(self._reseed)
            window = self._windows.current
        index = self._index
        self._index += 1
        if ahead:
            self._commit_ahead(InFlight(launched=launched, prep=prep, stamp_ns=stamp_ns,
                                        index=index, window=window, kept=decision,
                                        prepare_ms=prepare_ms))
            return
        call = land(launched, window, 'the call')
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
            window.abort()
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

    def _commit_ahead(self, flight: InFlight) -> None:
        """Keep or drop a frame launched ahead now; land the one before it behind it."""
        self._finish(flight.window, flight.launched.frames, flight.launched.stats,
                     flight.kept)
        self._stream_frames += 1
        if flight.kept:
            self._keyframes += 1
            self._last_kf = (flight.index, *self._last_kf[1:])  # its pose follows at landing
        else:
            self._rollbacks += 1
        rec = self._flight.queue(flight)
        if rec is not None:
            self._outbox.append(rec)

    def _land_flight(self, with_current: bool = False) -> None:
        """Land the frame in flight, if any, into ``_outbox`` (see FramesInFlight.land)."""
        rec = self._flight.land(with_current)
        if rec is not None:
            self._outbox.append(rec)

    def _landed(self, flight: InFlight) -> Record:
        """Wait for a launched frame's outputs and build its record."""
        call = land(flight.launched, None, f'stamp {flight.stamp_ns}')
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

    # --- one transaction ------------------------------------------------------------------

    def _forward(self, window: Window, images: torch.Tensor, phase: CallPhase, *,
                 defer: bool, with_depth: bool, frames: Sequence[int],
                 decided: Optional[bool] = True) -> Landed:
        """Begin, run the model and copy its outputs to the host; roll back on failure."""
        launched = self._launch(window, images, phase, defer=defer, with_depth=with_depth,
                                frames=frames, decided=decided)
        return land(launched, window, 'the call')

    def _launch(self, window: Window, images: torch.Tensor, phase: CallPhase, *,
                defer: bool, with_depth: bool, frames: Sequence[int],
                decided: Optional[bool] = True) -> Launched:
        """Begin and queue the model call and the copy of its outputs; roll back on failure."""
        n = int(images.shape[0])
        window.begin(n, defer)
        attended = window.attended(n, defer, self._cfg.scale_frames, self._windows.frames,
                                   self._patches_per_frame(), self._windows.iterations)
        t0 = time.perf_counter()
        try:
            out = self._ctx.model(images, time_index=window.time, first_frame=phase.first,
                                  scale_frames=phase.first, global_cache=window.agg,
                                  camera_cache=window.camera, with_depth=with_depth,
                                  camera_iterations=self._cfg.camera_iterations)
            copy = host_copy(out, images, with_depth)
        except BaseException:
            window.abort()
            raise
        stats = CallStats(call_index=self._calls, window_index=window.index,
                          frame_indices=tuple(frames), phase=phase,
                          rope_time_index_start=window.time, attended=attended,
                          is_keyframe=decided)
        return Launched(n, copy, t0, stats)

    def _finish(self, window: Window, n: int, stats: CallStats, keep: bool,
                flow_px: float = math.nan) -> None:
        """Commit (run the deferred eviction, advance time) or roll back the open call."""
        self._evictions += window.end(n, keep)
        self._calls += 1
        after = window.resident(self._patches_per_frame(), self._windows.iterations)
        self.last_call_stats.append(stats.finished(keep, after, flow_px))

    def _patches_per_frame(self) -> int:
        p = self._ctx.model_config.patch_size
        return (self._model_hw[0] // p) * (self._model_hw[1] // p)

    # --- outputs --------------------------------------------------------------------------

    def _record(self, call: Landed, j: int, prep: Prepared, stamp_ns: int, ftype: FrameType,
                window: Window, index: int) -> Record:
        """Build frame ``j`` of a call's host outputs (see frame_record), its products too."""
        rec = frame_record(call, j, prep, stamp_ns, ftype, window, index, self._model_hw,
                           self._map_epoch)
        if self._cfg.with_depth and self._cfg.products.wanted:
            rec.result = products.make(self._cfg.products, rec.result)
        return rec

    def _remember(self, window: Window, prep: Prepared, rec: Record) -> None:
        r = rec.result
        window.remember(Kept(index=r.index, image=prep.image, pose_map=r.pose_c2w,
                             depth_map=r.depth))

    def _flow(self, rec: Record) -> float:
        """Mean flow (model-grid pixels) of the frame's motion against the last keyframe."""
        _, kf_pose, kf_k = self._last_kf
        r = rec.result
        return host_flow(r.depth, r.pose_c2w, r.intrinsics_model, kf_pose, kf_k)
