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
The one thread that owns the model: bounded newest-wins queues in, results out.

Subscription callbacks only convert and :meth:`FrameQueue.put`; everything that
touches a session (submit, drain, reset, config update) happens here, so the ROS
executor never waits on the GPU. Nothing in this module imports rclpy: the node hands
in a :class:`Sink` that publishes (on its own output thread) and logs.

One frame at a time on the device, the host's work on it overlapped with the next:
the worker launches a frame (``Session.submit``) only once the device has finished the
frame before it, and then lands that one (its outputs to the host, its result to the
sink) while the device runs the new frame. A frame therefore never waits on the device
behind another (its latency is one model call plus the host's share), and the device
waits for the host only while the next frame is prepared. When no frame comes, the one
in flight lands as soon as the device is done with it: a :class:`LandingWatch` thread
waits on the device and wakes the worker.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass, field
import sys
import threading
import time
from typing import Any, Callable, Deque, Optional, Protocol

from lingbot_ros.model.config import ConfigError
from lingbot_ros.ros.camera import CameraStream, RESIZE_AFTER
from lingbot_ros.ros.counters import Stage
from lingbot_ros.ros.reasons import Event, Level, Rejection, Topic
from lingbot_ros.streaming.errors import FrameRejected, out_of_memory_error, SizeChanged
from lingbot_ros.streaming.result import FrameResult, FrameTimings
import numpy as np


NAN_RESET_AFTER = 3  # consecutive non-finite outputs before the session is rebuilt
RESET_FLUSH_S = 10.0  # a reset waits this long at most for the old map's messages to go out


class WorkerBusy(RuntimeError):
    """The previous worker thread is still inside a step; a second one must not start."""


@dataclass(frozen=True)
class Frame:
    """One converted image waiting for the worker."""

    camera: int
    image: np.ndarray
    stamp_ns: int
    received: float  # monotonic seconds
    frame_id: str


class FrameQueue:
    """Per-camera bounded queues, newest wins; one condition wakes the worker."""

    def __init__(self, cameras: int, size: int) -> None:
        self._queues: list[Deque[Frame]] = [deque() for _ in range(cameras)]
        self._size = max(1, int(size))
        self._cond = threading.Condition()
        self._next = 0
        self._closed = False
        self._waiting = 0  # threads blocked in get()

    def put(self, frame: Frame) -> Optional[Frame]:
        """Enqueue; return the frame dropped to make room (None when nothing was)."""
        with self._cond:
            q = self._queues[frame.camera]
            dropped = q.popleft() if len(q) >= self._size else None
            q.append(frame)
            self._cond.notify()
        return dropped

    def hand_over(self) -> None:
        """
        Let a worker blocked in :meth:`get` take the GIL at once (after a callback's put).

        Otherwise the callback's thread keeps the GIL through the executor's next turn of
        its wait set (rclpy's Python) while the woken worker waits for it, which adds to
        the ``queue_wait`` stage. A busy worker is left alone: the callback's thread then has
        no one to yield to and goes straight back to the executor.
        """
        with self._cond:
            waiting = self._waiting > 0
        if waiting:
            time.sleep(0)  # releases the GIL; the woken worker takes it

    def wait(self, timeout: float, until: Callable[[], bool]) -> None:
        """Block until ``until()`` holds, the queue closes or ``timeout`` passes; take nothing."""
        with self._cond:
            deadline = time.monotonic() + timeout
            while not self._closed and not until():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._cond.wait(left)

    def get(self, timeout: float,
            until: Optional[Callable[[], bool]] = None) -> Optional[Frame]:
        """
        Return the next frame, cameras served round-robin; None on timeout or close.

        ``until``: also return None once it is true (checked at every wake-up, under the
        queue's lock, so a :meth:`wake` after it became true is never missed).
        """
        with self._cond:
            deadline = time.monotonic() + timeout
            while not self._closed:
                for k in range(len(self._queues)):
                    i = (self._next + k) % len(self._queues)
                    if self._queues[i]:
                        self._next = (i + 1) % len(self._queues)
                        return self._queues[i].popleft()
                if until is not None and until():
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self._waiting += 1
                try:
                    self._cond.wait(left)
                finally:
                    self._waiting -= 1
            return None

    def clear(self, camera: Optional[int] = None) -> int:
        """Drop waiting frames (one camera or all); return how many."""
        with self._cond:
            queues = self._queues if camera is None else [self._queues[camera]]
            n = sum(len(q) for q in queues)
            for q in queues:
                q.clear()
            return n

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class LandingWatch:
    """
    Wakes the worker when a frame it left in flight is done on the device.

    One daemon thread runs the waits it is handed (``Session.flight_waiter``: a wait on
    the device that releases the GIL), each followed by ``wake``. It reads and writes
    nothing of the sessions; the worker lands the frame itself.
    """

    def __init__(self, wake: Callable[[], None]) -> None:
        self._wake = wake
        self._waits: Deque[Optional[Callable[[], None]]] = deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None

    def watch(self, wait: Callable[[], None]) -> None:
        """Wake the worker once ``wait`` returns."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name='lingbot-landing',
                                                daemon=True)
                self._thread.start()
            self._waits.append(wait)
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """End the thread after the waits handed over so far."""
        with self._cond:
            thread = self._thread
            self._waits.append(None)
            self._cond.notify()
        if thread is not None:
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waits:
                    self._cond.wait()
                wait = self._waits.popleft()
            if wait is None:
                return
            try:
                wait()
            except Exception:  # noqa: BLE001,S110 - the worker sees the error when it lands
                pass
            self._wake()


@dataclass(frozen=True)
class Output:
    """One finished result handed to the sink, with what counting its delivery needs."""

    camera: CameraStream
    result: FrameResult
    received: Optional[float]  # monotonic receive time of its frame (None: unknown)
    handed: float = field(default_factory=time.monotonic)  # when the worker handed it over

    def delivered(self, began: Optional[float] = None) -> None:
        """
        Count the frame as processed; the sink calls it once the frame's messages are out.

        ``began``: when the sink started on the frame (monotonic), which splits the time
        since the hand-over into the wait for the sink's turn and the sending itself.
        """
        done = time.monotonic()
        latency = None if self.received is None else (done - self.received) * 1e3
        stages = {} if began is None else {Stage.HANDOFF: (began - self.handed) * 1e3,
                                           Stage.PUBLISH: (done - began) * 1e3}
        self.camera.counters.on_processed(done, latency, stages)


class Sink(Protocol):
    """
    What the worker needs: publishing, (throttled) logging, and word of a new map.

    ``publish`` and ``map_restarted`` may return before the work is done (the node's sink
    sends on its own thread, in the order handed over); ``flush`` waits for all of it.
    """

    def publish(self, output: Output) -> None: ...

    def report(self, camera: Optional[CameraStream], topic: Topic, text: str,
               level: Level) -> None: ...

    def map_restarted(self, camera: CameraStream) -> None: ...

    def flush(self, timeout: float) -> bool: ...


class Worker:
    """
    Runs sessions on queued frames in one thread; the node starts and stops it.

    At most one thread ever runs the sessions: :meth:`stop` keeps the handle of a thread
    that did not finish within its timeout (a long step), and :meth:`start` refuses with
    :class:`WorkerBusy` while that thread lives.
    """

    def __init__(self, cameras: list, queue: FrameQueue, sink: Sink,
                 stream_config: Callable[[], Any]) -> None:
        self.cameras = cameras
        self.queue = queue
        self.sink = sink
        self._stream_config = stream_config
        self._thread: Optional[threading.Thread] = None
        self._stop: Optional[threading.Event] = None
        self._resets: list = []  # callbacks waiting for the next reset of every session
        self._jobs: list = []    # (job, future) to run between two frames, nothing in flight
        self._live = False       # a thread is in its loop and will serve resets
        self._lock = threading.Lock()
        self.errors = 0  # exceptions caught outside a step (each reported)

    # --- control (any thread) ----------------------------------------------------------

    def start(self, queue: Optional[FrameQueue] = None) -> None:
        """Start the thread on ``queue`` (or the current one); WorkerBusy if one still runs."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise WorkerBusy('the previous worker thread is still finishing a step')
            if queue is not None:
                self.queue = queue
            self._stop = threading.Event()
            self._live = True
            self._thread = threading.Thread(target=self._loop, args=(self._stop, self.queue),
                                            name='lingbot-worker', daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 30.0) -> bool:
        """Ask the thread to end and wait up to ``timeout``; True once it has ended."""
        with self._lock:
            thread, stop = self._thread, self._stop
        if stop is not None:
            stop.set()
        self.queue.close()
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            return False  # keep the handle: start() must not run a second thread
        with self._lock:
            if self._thread is thread:
                self._thread = None
        return True

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def request_reset(self, on_done: Optional[Callable[[], None]] = None) -> threading.Event:
        """
        Rebuild every session before the next frame; the event is set once that is done.

        ``on_done`` runs (in the thread that did the reset) at the same moment, for callers
        that must not wait, such as a service answered asynchronously.
        """
        done = threading.Event()

        def finished() -> None:
            done.set()
            if on_done is not None:
                on_done()
        with self._lock:
            self._resets.append(finished)
            running = self._live
        self.queue.wake()
        if not running:  # nothing runs the sessions: do it here
            self._serve_reset()
        return done

    def run_between_frames(self, job: Callable[[], Any]) -> Future:
        """
        Run ``job`` where it may touch the sessions: on the worker, between two frames.

        The frames in flight land (and are handed to the sink) first, so no session holds
        one while ``job`` runs. The future gets what ``job`` returns, or what it raised.
        Without a running thread the job runs here, as a reset does.
        """
        done: Future = Future()
        with self._lock:
            self._jobs.append((job, done))
            running = self._live
        self.queue.wake()
        if not running:
            self._serve_reset()
        return done

    # --- the thread ----------------------------------------------------------------------

    def _loop(self, stop: threading.Event, queue: FrameQueue) -> None:
        landing = LandingWatch(queue.wake)
        while not stop.is_set():
            frame = None
            try:
                self._serve_reset()
                if self._device_busy():  # launch nothing behind a frame still running
                    queue.wait(0.1, until=lambda: stop.is_set() or not self._device_busy())
                    self._serve_reset()
                if not self._device_busy():
                    frame = queue.get(timeout=0.1, until=self._flight_done)
                    self._serve_reset()
                if frame is not None and not stop.is_set():
                    self.process(frame)
                    session = self.cameras[frame.camera].session
                    if session.in_flight:
                        landing.watch(session.flight_waiter())
                self._land(only_done=True)
            except Exception as exc:  # noqa: BLE001 - the GPU thread must outlive any bug
                self.errors += 1
                cam = self.cameras[frame.camera] if frame is not None else None
                self.sink.report(cam, Event.WORKER_ERROR,
                                 f'worker: {type(exc).__name__}: {exc}', Level.ERROR)
        try:
            self._land(only_done=False)  # no frame the sessions kept goes unpublished
        except Exception as exc:  # noqa: BLE001
            self.errors += 1
            self.sink.report(None, Event.WORKER_ERROR, f'worker: {type(exc).__name__}: {exc}',
                             Level.ERROR)
        landing.close()
        with self._lock:
            self._live = False  # from here on, request_reset serves resets itself
        self._serve_reset()  # one asked for while stopping is still answered

    def _device_busy(self) -> bool:
        """Whether a frame launched ahead is still running on the device (worker thread)."""
        return any(cam.session is not None and cam.session.in_flight
                   and not cam.session.flight_ready() for cam in self.cameras)

    def _flight_done(self) -> bool:
        """Whether a frame left in flight is done on the device (worker thread)."""
        return any(cam.session is not None and cam.session.in_flight
                   and cam.session.flight_ready() for cam in self.cameras)

    def _land(self, only_done: bool) -> None:
        """Land the frames left in flight (those done on the device, or all of them)."""
        for cam in self.cameras:
            session = cam.session
            if session is None or not session.in_flight:
                continue
            if only_done and not session.flight_ready():
                continue
            results = self._guarded(cam, None, session.drain)
            if results is not None:
                self._deliver(cam, results)

    def _serve_reset(self) -> None:
        """Serve the resets and the jobs asked for since the last call (worker thread)."""
        with self._lock:
            waiting, self._resets = self._resets, []
            jobs, self._jobs = self._jobs, []
        if jobs:
            self._land(only_done=False)
        for job, done in jobs:
            try:
                done.set_result(job())
            except Exception as exc:  # noqa: BLE001 (the asker reports it)
                done.set_exception(exc)
        if not waiting:
            return
        self._land(only_done=False)  # the frames in flight belong to the old map: out first
        for cam in self.cameras:
            cleared = self.queue.clear(cam.index)
            if cleared:
                cam.counters.on_dropped(cleared)
            self._reset(cam)
            cam.pending_reset.clear()
        self.sink.flush(RESET_FLUSH_S)  # the old map's last messages out, its track cleared
        for finished in waiting:
            finished()

    def _reset(self, cam: CameraStream) -> None:
        if cam.session.in_flight:
            cam.counters.on_dropped(1)  # a frame in flight goes with the session's state
        cam.session.reset()
        cam.counters.on_session_reset()
        cam.forget()
        self.sink.map_restarted(cam)

    def process(self, frame: Frame) -> None:
        """Step one frame through its camera's session and hand results to the sink."""
        cam = self.cameras[frame.camera]
        if cam.pending_reset.is_set():
            cam.pending_reset.clear()
            self._reset(cam)
        cfg = self._stream_config()
        if cfg != cam.session.config:
            try:
                cam.session.update(cfg)
            except ConfigError as exc:  # a field that needs a reset: keep the running config
                self.sink.report(cam, Event.CONFIG, f'not applied: {exc}', Level.WARN)
        cam.frame_id = frame.frame_id or cam.frame_id
        cam.received_at[frame.stamp_ns] = frame.received
        t0 = time.monotonic()
        waited_ms = (t0 - frame.received) * 1e3 if frame.received else None
        cam.waited_ms[frame.stamp_ns] = waited_ms
        results = self._guarded(cam, frame.stamp_ns, lambda: self._step(cam, frame))
        if results is None:
            return
        now = time.monotonic()
        if not results and not cam.session.in_flight:  # a scale frame, buffered
            cam.counters.on_stepped(now, (now - t0) * 1e3, {Stage.QUEUE: waited_ms})
            cam.counters.set_buffered(cam.counters.buffered + 1)
        elif any(not r.timings.streamed for r in results):  # the scale call
            cam.counters.on_stepped(now, (now - t0) * 1e3, {Stage.QUEUE: waited_ms})
        self._deliver(cam, results)

    def _guarded(self, cam: CameraStream, stamp_ns: Optional[int],
                 call: Callable[[], list]) -> Optional[list]:
        """
        Run a session call; count and report what it refused (None then).

        ``stamp_ns``: the frame the call submitted (None for a drain). A frame found
        unusable when it lands names its stamp in the error.
        """
        try:
            return call()
        except out_of_memory_error() as exc:
            self._forget_stamp(cam, stamp_ns)
            self._reject(cam, Rejection.OUT_OF_MEMORY, f'out of memory, frame dropped: {exc}',
                         Level.WARN)
            _empty_device_cache()
        except SizeChanged as exc:  # session unchanged
            self._forget_stamp(cam, stamp_ns)
            self._reject(cam, Rejection.SIZE_CHANGE, str(exc), Level.WARN)
        except FrameRejected as exc:  # non-finite output
            self._forget_stamp(cam, stamp_ns)
            self._non_finite(cam, str(exc), exc.frames)
        except Exception as exc:  # noqa: BLE001 (a bug must not stop the stream)
            self._forget_stamp(cam, stamp_ns)
            self._reject(cam, Rejection.ERROR, f'{type(exc).__name__}: {exc}', Level.ERROR)
        return None

    def _deliver(self, cam: CameraStream, results: list) -> None:
        """Count and hand landed results to the sink, oldest first."""
        now = time.monotonic()
        streamed = [r for r in results if r.timings.streamed]
        for r in streamed:
            waited = cam.waited_ms.pop(r.stamp_ns, None)
            step_ms = r.timings.step + (r.timings.prepare or 0.0)
            cam.counters.on_stepped(now, step_ms, _stages(r.timings, waited))
        if results:
            cam.counters.set_buffered(0)
            self._follow_map(cam, results[0].map_epoch)
        for result in results:
            received = cam.received_at.pop(result.stamp_ns, None)
            if not _finite(result):
                if self._non_finite(cam, f'non-finite pose for stamp {result.stamp_ns}; '
                                         'not published'):
                    break  # the session was reset: the rest belong to the old one
                continue
            cam.nan_run = 0
            try:
                self.sink.publish(Output(cam, result, received))
            except Exception as exc:  # noqa: BLE001 (one result lost, not the step's rest)
                self.errors += 1
                self.sink.report(cam, Event.PUBLISH_FAILED,
                                 f'publishing stamp {result.stamp_ns} failed: '
                                 f'{type(exc).__name__}: {exc}', Level.ERROR)
        cam.cache_stats = cam.session.stats()  # after the hand-over: the pose goes out first
        if len(cam.received_at) > 4 * max(1, getattr(cam.session.config, 'scale_frames', 8)):
            cam.received_at.clear()  # stamps the session never returned; keep it bounded
            cam.waited_ms.clear()

    def _step(self, cam: CameraStream, frame: Frame) -> list:
        """Submit to the session; a camera that changed resolution for good gets a new one."""
        try:
            results = cam.session.submit(frame.image, frame.stamp_ns)
        except SizeChanged:
            hw = tuple(frame.image.shape[:2])
            if not cam.size_changed_for_good(hw):
                raise
            self.sink.report(cam, Event.RESOLUTION_CHANGE,
                             f'the camera now sends {hw[1]}x{hw[0]} ({RESIZE_AFTER} frames in '
                             'a row): new session, the next poses start a new map', Level.WARN)
            self._reset(cam)
            results = cam.session.submit(frame.image, frame.stamp_ns)
        cam.size_accepted()
        return results

    def _follow_map(self, cam: CameraStream, epoch: int) -> None:
        """Forget the old map's path and odometry when the session started a new map itself."""
        if cam.map_epoch is not None and epoch != cam.map_epoch:
            cam.forget()  # e.g. re-seeding a window failed: poses restart from a new origin
            cam.counters.on_session_reset()
            self.sink.map_restarted(cam)
            self.sink.report(cam, Event.MAP_RESTART, 'the session started a new map; path and '
                             'odometry restart from it', Level.WARN)
        cam.map_epoch = epoch

    def _non_finite(self, cam: CameraStream, text: str, frames: int = 1) -> bool:
        """Count non-finite output(s); reset the session after a run of them (True then)."""
        self._reject(cam, Rejection.NAN_OUTPUT, text, Level.WARN, frames)
        cam.nan_run += 1
        if cam.nan_run < NAN_RESET_AFTER:
            return False
        self.sink.report(cam, Event.SESSION_RESET, f'{cam.nan_run} non-finite outputs in a '
                         'row: resetting the session', Level.WARN)
        self._reset(cam)
        return True

    def _forget_stamp(self, cam: CameraStream, stamp_ns: Optional[int]) -> None:
        cam.received_at.pop(stamp_ns, None)
        cam.waited_ms.pop(stamp_ns, None)

    def _reject(self, cam: CameraStream, reason: Rejection, text: str, level: Level,
                frames: int = 1) -> None:
        cam.counters.on_rejected(reason, frames)
        self.sink.report(cam, reason, text, level)


def _stages(t: FrameTimings, waited_ms: Optional[float]) -> dict:
    """Split a streamed frame's part of the latency as the session timed it."""
    return {Stage.QUEUE: waited_ms, Stage.PREPARE: t.prepare, Stage.MODEL: t.model,
            Stage.FINISH: t.step - t.model}


def _finite(result: FrameResult) -> bool:
    return bool(np.isfinite(result.pose_c2w).all() and np.isfinite(result.intrinsics).all())


def _empty_device_cache() -> None:
    """Give the allocator's free blocks back after an out-of-memory error."""
    torch = sys.modules.get('torch')
    try:
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001,S110 (best effort)
        pass
