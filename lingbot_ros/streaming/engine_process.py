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
The engine in a process of its own, so the model's Python shares no GIL with the node.

Why: in one process the node's other threads (the executor turning its wait set, the image
callbacks, the output and map threads building messages) take the GIL from the worker
between its CUDA launches. On the H200 at a 30 Hz camera a step took 49-55 ms p50 where
the model's call took 43-45, p99 up to 70, and 13.4 frames a second were processed
(``benchmarks/results/live_30hz_10k_h200.txt``). Here the model's process runs only the
model, its caches and the frame's pose math.

:class:`EngineProcess` starts ``python -m lingbot_ros.streaming.engine_child`` and offers
what the node uses of :class:`~lingbot_ros.streaming.engine.Engine`;
:class:`RemoteSession` what it uses of a session. One request is in flight at a time
(a lock): a frame's pixels cross in a shared memory file both processes map (one copy,
no pickling); requests and replies cross one socket pair
(:mod:`multiprocessing.connection`). Every reply carries the session's cache statistics
and the process's status (CUDA graphs, device memory, the checkpoint's sha256), so the
node's diagnostics never wait for the model's process. If it ends, the request under way
raises :class:`EngineRestarted` once a new one has taken over with every session opened
again (as :class:`RestartPolicy` allows; after that, :class:`EngineProcessLost`, for this
request and every later one). It ends by itself when the node's process goes (its end of
the socket closes, and it looks every second).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, fields, replace
from enum import Enum
import mmap
import os
from pathlib import Path
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Optional
import weakref

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.device_memory import DeviceMemory
from lingbot_ros.streaming.landing import LandsAtOnce
import numpy as np

STOP_WAIT_S = 10.0   # for the model's process to leave after being asked to
POLL_S = 0.5         # how often a wait for a reply checks that the process still lives
DEFAULT_IMAGE_BYTES = 4096 * 4096 * 3  # the node's default max_input_pixels, RGB
SHARED_MIN_BYTES = 64 * 1024  # arrays from this size come back in the results file
CHILD_MODULE = 'lingbot_ros.streaming.engine_child'


class EngineProcessLost(RuntimeError):
    """The model's process ended and was not restarted; every later call fails too."""


class EngineRestarted(RuntimeError):
    """
    The model's process ended during this call and a new one took over.

    The call's frame is lost; every session exists again under its name and
    configuration but starts over (a new map), as after a reset.
    """


@dataclass(frozen=True)
class RestartPolicy:
    """How often a model process that ended is replaced before the node gives up on it."""

    count: int = 3          # restarts allowed within ``window_s`` (0: never restart)
    window_s: float = 600.0


class Op(Enum):
    """What the node asks of the model's process."""

    NEW_SESSION = 'new_session'
    STEP = 'step'
    RESET = 'reset'
    UPDATE = 'update'
    WARM_UP = 'warm_up'
    STOP = 'stop'


@dataclass(frozen=True)
class Request:
    """One request: the operation, the session it is for, its arguments."""

    op: Op
    session: str = ''
    args: tuple = ()


@dataclass(frozen=True)
class Status:
    """The model process's state that diagnostics show, sent with every reply."""

    graph_status: str
    compile_status: str
    cuda_graphs: bool
    memory: Optional[DeviceMemory] = None
    sha256: Optional[str] = None
    sha256_error: Optional[str] = None


@dataclass(frozen=True)
class Reply:
    """The answer to one request: a value or the exception to raise, and the status."""

    status: Status
    value: Any = None
    error: Optional[BaseException] = None
    stats: Optional[CacheStats] = None  # the request's session's, after the request


@dataclass(frozen=True)
class Progress:
    """A long loading step starting or done (a kernel build), said while loading."""

    text: str


@dataclass(frozen=True)
class Loaded:
    """What the model's process says once the engine is loaded."""

    description: str
    device: str
    dtype: str
    backend: AttentionBackend
    backend_reason: str
    compiled_blocks: int
    load_phases: dict
    model_config: Any
    config: EngineConfig
    checkpoint_spec: Optional[str]
    checkpoint_path: Optional[str]
    hardware_id: str
    status: Status


@dataclass(frozen=True)
class LoadFailed:
    """The engine did not load; ``error`` is what Engine.load raised."""

    error: BaseException


@dataclass(frozen=True)
class SharedArray:
    """An array that lies in a file both processes map: where, its shape and dtype."""

    offset: int
    shape: tuple
    dtype: str

    @classmethod
    def lay(cls, buffer: Any, offset: int, array: np.ndarray) -> 'SharedArray':
        """Copy ``array`` into ``buffer`` at ``offset``; return where it lies."""
        np.copyto(np.ndarray(array.shape, array.dtype, buffer=buffer, offset=offset), array)
        return cls(offset, tuple(array.shape), array.dtype.str)

    def view(self, buffer: Any) -> np.ndarray:
        """Return the array as it lies in ``buffer`` (no copy)."""
        return np.ndarray(self.shape, np.dtype(self.dtype), buffer=buffer, offset=self.offset)


def memory_file(name: str, size: int) -> int:
    """
    Return the descriptor of a new ``size``-byte file in memory (closed by the caller).

    A memfd where the OS has them, else an unlinked temporary file: nothing to clean up,
    it goes with the last process that holds it. Its pages exist once written, so a
    large size costs only address space.
    """
    if hasattr(os, 'memfd_create'):
        fd = os.memfd_create(name)
    else:  # pragma: no cover (not Linux)
        with tempfile.TemporaryFile() as f:
            fd = os.dup(f.fileno())
    os.ftruncate(fd, size)
    return fd


@dataclass(frozen=True)
class ResultsFile:
    """The model's process made a larger results file; its descriptor follows on the socket."""

    size: int


def share_arrays(results: list, place: Callable[[np.ndarray], SharedArray]) -> list:
    """
    Replace each large array of the FrameResults by where ``place`` put it.

    Pickled through the socket, a frame's depth, confidence and colours (2.2 MB at a
    518-wide grid) cost the model's process a copy and the node's two more, with the
    GIL held in the node's process for the last; laid in the results file they cost one
    copy on each side.
    """
    out = []
    for result in results:
        changes = {f.name: place(value) for f in fields(result)
                   if isinstance(value := getattr(result, f.name), np.ndarray)
                   and value.nbytes >= SHARED_MIN_BYTES}
        out.append(replace(result, **changes) if changes else result)
    return out


def unshare_arrays(results: list, area: Any) -> list:
    """Copy each shared array of the FrameResults out of ``area`` (the results file)."""
    out = []
    for result in results:
        changes = {}
        for f in fields(result):
            ref = getattr(result, f.name)
            if isinstance(ref, SharedArray):
                changes[f.name] = ref.view(area).copy()
        out.append(replace(result, **changes) if changes else result)
    return out


class ImageSlot:
    """The file a frame's pixels cross in (:func:`memory_file`), written by the node's side."""

    def __init__(self, capacity: int) -> None:
        self.capacity = int(capacity)
        self.fd = memory_file('lingbot-frames', self.capacity)
        self.map = mmap.mmap(self.fd, self.capacity)

    def put(self, image: np.ndarray) -> SharedArray:
        """Copy ``image`` into the file; ValueError when it is larger than the file."""
        if image.nbytes > self.capacity:
            raise ValueError(f'a {image.shape} {image.dtype} frame ({image.nbytes} bytes) is '
                             f'larger than the {self.capacity} bytes the model process takes '
                             '(max_input_pixels)')
        return SharedArray.lay(self.map, 0, image)

    def close(self) -> None:
        """Unmap and close the file (again: nothing)."""
        if self.fd < 0:
            return
        self.map.close()
        os.close(self.fd)
        self.fd = -1


class _ForwardedDigest:
    """The checkpoint's sha256 as the model's process last said it (never waits)."""

    def __init__(self, owner: 'EngineProcess') -> None:
        self._owner = weakref.proxy(owner)

    def peek(self) -> Optional[str]:
        return self._owner.status.sha256

    @property
    def error(self) -> Optional[str]:
        return self._owner.status.sha256_error


@dataclass(frozen=True)
class RemoteCheckpoint:
    """The checkpoint the model's process loaded: spec, file and its sha256 when known."""

    spec: str
    path: Path
    digest: _ForwardedDigest


def _kill(proc: subprocess.Popen) -> None:
    """Make sure the model's process is gone (the node's process exits without close)."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Launch:
    """
    The model's process, started and importing, not yet told what to load.

    Started first, it imports torch and the model's code while the node's process does
    its own imports and reads its parameters: the two overlap instead of adding up.
    """

    def __init__(self, max_image_bytes: int = DEFAULT_IMAGE_BYTES,
                 python: Optional[str] = None) -> None:
        """Start ``python -m lingbot_ros.streaming.engine_child``; OSError if it cannot."""
        ours, theirs = socket.socketpair()
        self.slot = ImageSlot(max_image_bytes)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the folder holding lingbot_ros
        env['PYTHONPATH'] = os.pathsep.join(p for p in (root, env.get('PYTHONPATH')) if p)
        cmd = [python or sys.executable, '-m', CHILD_MODULE, str(theirs.fileno()),
               str(self.slot.fd), str(self.slot.capacity), str(os.getpid())]
        try:
            self.proc = subprocess.Popen(cmd, pass_fds=(theirs.fileno(), self.slot.fd),
                                         env=env)
        except OSError:
            ours.close()
            self.slot.close()
            raise
        finally:
            theirs.close()
        from multiprocessing.connection import Connection
        self.conn = Connection(ours.detach())
        self._finalizer = weakref.finalize(self, _kill, self.proc)

    def load(self, cfg: EngineConfig, progress: Callable[[str], None] = lambda _: None,
             restarts: RestartPolicy = RestartPolicy()) -> 'EngineProcess':
        """
        Load ``cfg`` in the model's process; EngineError (the process gone) if it cannot.

        ``progress`` hears the load's long steps as the process says them (a kernel build),
        then and when a process that ended is replaced under ``restarts``.
        """
        return EngineProcess(self, self.loaded(cfg, progress), progress, restarts)

    def loaded(self, cfg: EngineConfig,
               progress: Callable[[str], None] = lambda _: None) -> Loaded:
        """Send ``cfg``, pass on the progress said, return what the loaded process says."""
        from lingbot_ros.streaming.engine import EngineError
        cfg = cfg.validate()
        try:
            self.conn.send(cfg)
            while True:
                msg = _receive(self.conn, self.proc)
                if isinstance(msg, Progress):
                    progress(msg.text)
                elif isinstance(msg, Loaded):
                    self._finalizer.detach()  # its EngineProcess watches it from here
                    return msg
                elif isinstance(msg, LoadFailed):
                    raise msg.error
        except EngineProcessLost as exc:
            self.abandon()
            raise EngineError(f'the model process ended while loading: {exc}') from exc
        except BaseException:
            self.abandon()
            raise

    def abandon(self) -> None:
        """Stop the process without loading anything (configure failed before the load)."""
        self._finalizer()
        self.conn.close()
        self.slot.close()


class EngineProcess:
    """
    An engine loaded and run in a child process; use :meth:`start`, then as an Engine.

    Offers what the node uses of :class:`~lingbot_ros.streaming.engine.Engine`: the facts
    of the load (description, device, dtype, back end, checkpoint), ``graph_status``,
    ``compile_status``, :meth:`memory_estimate` (computed here, from the same formulas),
    :meth:`warm_up`, :meth:`new_session`, :meth:`device_memory`, and :meth:`close`.
    """

    def __init__(self, launch: Launch, loaded: Loaded, progress: Callable[[str], None],
                 restarts: RestartPolicy) -> None:
        self._lock = threading.Lock()
        self._lost: Optional[str] = None
        self._stats: dict = {}
        self._sessions: dict = {}  # name -> its configuration, to open it again after a restart
        self._progress, self._policy = progress, restarts
        self._restarted_at: deque = deque()
        self.restarts, self.last_restart = 0, ''
        self._take(launch, loaded)
        self.description = loaded.description
        self.backend, self.backend_reason = loaded.backend, loaded.backend_reason
        self.compiled_blocks = loaded.compiled_blocks
        self.load_phases = dict(loaded.load_phases)
        self.model_config = loaded.model_config
        self.config = loaded.config
        self.hardware_id = loaded.hardware_id  # named there: CUDA is never touched here
        import torch  # the node's process needs torch only for these two names
        self.device = torch.device(loaded.device)
        self.dtype = getattr(torch, loaded.dtype)
        self.checkpoint = None if loaded.checkpoint_spec is None else RemoteCheckpoint(
            loaded.checkpoint_spec, Path(loaded.checkpoint_path), _ForwardedDigest(self))

    def _take(self, launch: Launch, loaded: Loaded) -> None:
        """Use ``launch``'s process (loaded) for every request from here on."""
        self._proc, self._conn, self._slot = launch.proc, launch.conn, launch.slot
        self._max_image_bytes = launch.slot.capacity
        self._results: Optional[mmap.mmap] = None  # the model process's results file
        self._finalizer = weakref.finalize(self, _kill, launch.proc)
        self.status = loaded.status

    @classmethod
    def start(cls, cfg: EngineConfig, progress: Callable[[str], None] = lambda _: None,
              max_image_bytes: int = DEFAULT_IMAGE_BYTES,
              restarts: RestartPolicy = RestartPolicy()) -> 'EngineProcess':
        """Start the model's process and load ``cfg`` there (:meth:`Launch.load`)."""
        return Launch(max_image_bytes).load(cfg, progress, restarts)

    # --- what the node reads ----------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def alive(self) -> bool:
        return self._lost is None and self._proc.poll() is None

    @property
    def lost(self) -> Optional[str]:
        """
        Why the model's process is gone for good (None while one serves).

        One that ended is replaced at the next request, as ``restarts`` allows; only when
        it allows no more, or the replacement failed, is the engine lost.
        """
        return self._lost

    @property
    def graph_status(self) -> str:
        return self.status.graph_status

    @property
    def compile_status(self) -> str:
        return self.status.compile_status

    def device_memory(self) -> Optional[DeviceMemory]:
        """Return the device's memory as the model's process said it with its last reply."""
        return self.status.memory

    def memory_estimate(self, stream_cfg: StreamConfig, input_hw: tuple, cameras: int = 1):
        """Estimate as ``Engine.memory_estimate`` does, computed here (no round trip)."""
        from lingbot_ros.streaming.memory import estimate
        cfg = self.config.replace(cuda_graphs=self.status.cuda_graphs)
        return estimate(cfg, stream_cfg, input_hw, cameras, model_config=self.model_config,
                        backend=self.backend, device_type=self.device.type)

    # --- requests ---------------------------------------------------------------------

    def new_session(self, name: str, cfg: StreamConfig) -> 'RemoteSession':
        """Open a session in the model's process; the name must be new."""
        session = RemoteSession(self, name, self.call(Op.NEW_SESSION, name, cfg))
        self._sessions[name] = session.config
        return session

    def remember(self, name: str, cfg: StreamConfig) -> None:
        """Keep a session's configuration as it changed (a restart opens it so again)."""
        self._sessions[name] = cfg

    def warm_up(self, cfg: StreamConfig, input_hw: tuple, streaming_frames: int = 2) -> float:
        """Run ``Engine.warm_up`` in the model's process; return its seconds."""
        return self.call(Op.WARM_UP, '', cfg, tuple(input_hw), streaming_frames)

    def call(self, op: Op, session: str = '', *args: Any,
             image: Optional[np.ndarray] = None) -> Any:
        """Send one request and wait for its reply; raise what the model's process raised."""
        with self._lock:
            if self._lost is not None:
                raise EngineProcessLost(f'the model process is gone: {self._lost}')
            if image is not None:
                args = (self._slot.put(image),) + args
            try:
                reply = self._request(Request(op, session, args))
            except EngineProcessLost as exc:
                self._replace(str(exc))  # raises EngineRestarted, or EngineProcessLost
        self.status = reply.status
        if reply.stats is not None:
            self._stats[session] = reply.stats
        if reply.error is not None:
            raise reply.error
        return reply.value

    def _request(self, request: Request) -> Reply:
        """Send one request and receive its reply; EngineProcessLost if the process ended."""
        try:
            self._conn.send(request)
            return self._reply()
        except EngineProcessLost:
            raise
        except OSError as exc:  # the socket broke under a process not yet reaped
            try:
                self._proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
            why = _exit_text(self._proc) if self._proc.poll() is not None \
                else f'its socket failed: {exc}'
            raise EngineProcessLost(why) from exc

    def _replace(self, why: str) -> None:
        """
        Start a new model process for one that ended, with every session opened again.

        Raise :class:`EngineRestarted` once it serves; :class:`EngineProcessLost` when the
        policy allows no more restarts or the new one fails too (then nothing is retried).
        """
        now = time.monotonic()
        while self._restarted_at and now - self._restarted_at[0] > self._policy.window_s:
            self._restarted_at.popleft()
        self._discard()
        if len(self._restarted_at) >= self._policy.count:
            self._lost = why if not self.restarts else \
                f'{why}; {self.restarts} restart(s) already, no more within ' \
                f'{self._policy.window_s:.0f} s'
            raise EngineProcessLost(f'the model process ended: {self._lost}')
        self._restarted_at.append(now)
        self._progress(f'the model process ended ({why}); starting a new one')
        t0 = time.monotonic()
        try:
            launch = Launch(self._max_image_bytes)
            self._take(launch, launch.loaded(self.config, self._progress))
            for name, cfg in self._sessions.items():
                reply = self._request(Request(Op.NEW_SESSION, name, (cfg,)))
                if reply.error is not None:
                    raise reply.error
                self._stats.pop(name, None)
        except Exception as exc:  # noqa: BLE001 (EngineError, a lost process, OSError ...)
            self._discard()
            self._lost = f'{why}; the new model process failed: {type(exc).__name__}: {exc}'
            raise EngineProcessLost(f'the model process ended: {self._lost}') from exc
        self.restarts += 1
        self.last_restart = why
        raise EngineRestarted(f'the model process ended ({why}); a new one serves after '
                              f'{time.monotonic() - t0:.1f} s: every camera starts a new map')

    def _discard(self) -> None:
        """Close what the current process used; make sure it is gone."""
        self._finalizer()
        for closing in (self._conn.close, self._slot.close,
                        self._results.close if self._results is not None else None):
            if closing is not None:
                try:
                    closing()
                except (OSError, ValueError):
                    pass
        self._results = None

    def _reply(self) -> Reply:
        """Receive the reply, mapping a new results file said before it; copy arrays out."""
        while True:
            msg = _receive(self._conn, self._proc)
            if not isinstance(msg, ResultsFile):
                break
            from multiprocessing.reduction import recv_handle
            fd = recv_handle(self._conn)
            try:
                mapped = mmap.mmap(fd, msg.size, prot=mmap.PROT_READ)
            finally:
                os.close(fd)
            if self._results is not None:
                self._results.close()
            self._results = mapped
        if isinstance(msg.value, list) and self._results is not None:
            msg = replace(msg, value=unshare_arrays(msg.value, self._results))
        return msg

    def session_stats(self, name: str) -> CacheStats:
        return self._stats.get(name, CacheStats())

    def close(self, timeout: float = STOP_WAIT_S) -> Optional[int]:
        """Ask the model's process to leave, then make sure it did; return its exit status."""
        got = self._lock.acquire(timeout=timeout)  # a request in flight finishes first
        try:
            if got and self._proc.poll() is None:
                try:
                    self._conn.send(Request(Op.STOP))
                    self._proc.wait(timeout)
                except (OSError, subprocess.TimeoutExpired):
                    pass
            if self._proc.poll() is None:
                self._proc.terminate()
                try:
                    self._proc.wait(2.0)
                except subprocess.TimeoutExpired:
                    pass
            self._discard()  # kills it if still there
            if self._lost is None:
                self._lost = 'closed'
        finally:
            if got:
                self._lock.release()
        return self._proc.returncode


class RemoteSession(LandsAtOnce):
    """
    A session living in the model's process: ``step``, ``reset``, ``update``, ``stats``.

    Its process answers a step once the frame's results are on the host, so ``submit``
    leaves nothing in flight (frames are not queued ahead on the device here yet).
    """

    def __init__(self, engine: EngineProcess, name: str, cfg: StreamConfig) -> None:
        self._engine, self.name, self._cfg = engine, name, cfg

    @property
    def config(self) -> StreamConfig:
        return self._cfg

    def step(self, image_rgb: np.ndarray, stamp_ns: int) -> list:
        """As ``Session.step``: the frames completed by this one, as FrameResults."""
        if not isinstance(image_rgb, np.ndarray):
            raise ValueError(f'expected an [H, W, 3] uint8 RGB array, got '
                             f'{type(image_rgb).__name__}')
        return self._engine.call(Op.STEP, self.name, int(stamp_ns),
                                 image=np.ascontiguousarray(image_rgb))

    def reset(self) -> None:
        self._engine.call(Op.RESET, self.name)

    def update(self, cfg: StreamConfig, reset: bool = False) -> None:
        """As ``Session.update``; ConfigError (nothing changed) for a field needing a reset."""
        self._cfg = self._engine.call(Op.UPDATE, self.name, cfg, bool(reset))
        self._engine.remember(self.name, self._cfg)

    def stats(self) -> CacheStats:
        """Return the cache statistics sent with the last reply for this session."""
        return self._engine.session_stats(self.name)


def _receive(conn: Any, proc: subprocess.Popen) -> Any:
    """Wait for the next message, checking every POLL_S that the process still lives."""
    try:
        while not conn.poll(POLL_S):
            if proc.poll() is not None:
                raise EngineProcessLost(_exit_text(proc))
        return conn.recv()
    except (EOFError, ConnectionError) as exc:
        try:
            proc.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            raise EngineProcessLost(f'it closed its socket ({type(exc).__name__}) but still '
                                    'runs') from exc
        raise EngineProcessLost(_exit_text(proc)) from exc


def _exit_text(proc: subprocess.Popen) -> str:
    code = proc.returncode
    if code is None:
        return 'still running'
    if code < 0:
        return f'killed by signal {-code}'
    return f'exit status {code}'
