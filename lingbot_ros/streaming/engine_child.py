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
The model's process: ``python -m lingbot_ros.streaming.engine_child SOCKET FRAMES SIZE PPID``.

Started by :class:`~lingbot_ros.streaming.engine_process.EngineProcess`, never by hand.
It loads the engine, then answers one request at a time until asked to stop or until the
node's process is gone (its socket closes, and a thread looks every second).
Ctrl-C in a terminal reaches the whole process group: this process ignores it and leaves
when the node, which handles it, closes the engine.
"""

from __future__ import annotations

from dataclasses import fields
import mmap
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from typing import Any, Optional

from lingbot_ros.streaming.device_memory import read_device_memory
from lingbot_ros.streaming.engine_process import (Loaded, LoadFailed, memory_file, Op,
                                                  Progress, Reply, Request, ResultsFile,
                                                  share_arrays, SharedArray, Status)
import numpy as np

MEMORY_EVERY_S = 1.0  # device memory is read at most this often (a driver call)
PARENT_CHECK_S = 1.0  # how often this process looks whether the node's still runs


def _die_with_parent(ppid: int) -> None:
    """
    Leave as soon as the node's process is gone, even in the middle of a long call.

    Its socket's end tells this process at its next read or write; a thread that looks
    every PARENT_CHECK_S also covers a load or a step that takes long. (Linux's
    parent-death signal would fire when the *thread* that started this process ends,
    such as a worker thread after a deactivate, not the node.)
    """
    def watch() -> None:
        while True:
            if os.getppid() != ppid:
                os._exit(0)
            time.sleep(PARENT_CHECK_S)
    threading.Thread(target=watch, name='lingbot-parent-watch', daemon=True).start()


def portable(exc: BaseException) -> BaseException:
    """Return ``exc`` if it survives pickling, else a RuntimeError that says what it was."""
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 (any failure to pickle)
        return RuntimeError(f'{type(exc).__name__}: {exc}')


class ResultsArea:
    """
    The file this process lays the large arrays of a reply in, for the node to copy out.

    Made when a reply first needs it and again, twice as large, when one outgrows it (a
    scale call returns all its frames at once); each new file's descriptor goes to the
    node over the socket, ahead of the reply that uses it.
    """

    def __init__(self, conn: Any, ppid: int) -> None:
        self.conn, self.ppid = conn, ppid
        self.map: Optional[mmap.mmap] = None
        self.used = 0

    def begin(self, nbytes: int) -> None:
        """Make room for ``nbytes`` from offset 0 (a new, larger file when needed)."""
        self.used = 0
        if self.map is not None and nbytes <= len(self.map):
            return
        size = max(nbytes, 2 * len(self.map) if self.map is not None else 0, 1 << 20)
        fd = memory_file('lingbot-results', size)
        try:
            if self.map is not None:
                self.map.close()
            self.map = mmap.mmap(fd, size)
            from multiprocessing.reduction import send_handle
            self.conn.send(ResultsFile(size))
            send_handle(self.conn, fd, self.ppid)
        finally:
            os.close(fd)

    def place(self, array: np.ndarray) -> SharedArray:
        """Copy ``array`` in after what this reply placed so far; say where it went."""
        offset = -(-self.used // 64) * 64  # 64-byte aligned
        self.used = offset + array.nbytes
        return SharedArray.lay(self.map, offset, array)

    def share(self, results: list) -> list:
        """Lay the results' large arrays in the file; the results refer to them."""
        need = sum(-(-getattr(r, f.name).nbytes // 64) * 64 for r in results
                   for f in fields(r) if isinstance(getattr(r, f.name), np.ndarray))
        if need == 0:
            return results
        self.begin(need)
        return share_arrays(results, self.place)


class Server:
    """Runs the requests of one node on one engine; sessions by name."""

    def __init__(self, engine: Any, conn: Any, frames: mmap.mmap, ppid: int) -> None:
        self.engine, self.conn, self.frames = engine, conn, frames
        self.results = ResultsArea(conn, ppid)
        self.sessions: dict = {}
        self._memory, self._memory_at = None, -float('inf')

    def status(self) -> Status:
        engine, now = self.engine, time.monotonic()
        if now - self._memory_at >= MEMORY_EVERY_S:
            self._memory, self._memory_at = read_device_memory(engine.device), now
        digest = engine.checkpoint.digest if engine.checkpoint is not None else None
        return Status(graph_status=engine.graph_status, compile_status=engine.compile_status,
                      cuda_graphs=bool(engine.runner.cuda_graphs), memory=self._memory,
                      sha256=digest.peek() if digest is not None else None,
                      sha256_error=digest.error if digest is not None else None)

    def loaded(self) -> Loaded:
        e = self.engine
        return Loaded(description=e.description, device=str(e.device),
                      dtype=str(e.dtype).replace('torch.', ''), backend=e.backend,
                      backend_reason=e.backend_reason, compiled_blocks=e.compiled_blocks,
                      load_phases=dict(e.load_phases), model_config=e.model_config,
                      config=e.config,
                      checkpoint_spec=e.checkpoint.spec if e.checkpoint else None,
                      checkpoint_path=str(e.checkpoint.path) if e.checkpoint else None,
                      hardware_id=e.hardware_id,
                      status=self.status())

    def serve(self) -> int:
        """Answer requests until STOP or the node's end of the socket closes."""
        while True:
            try:
                request = self.conn.recv()
            except (EOFError, OSError):
                return 0
            if request.op == Op.STOP:
                return 0
            reply = self.handle(request)
            try:
                self.conn.send(reply)
            except (BrokenPipeError, ConnectionError):
                return 0
            except Exception as exc:  # noqa: BLE001 (a value that does not pickle)
                self.conn.send(Reply(self.status(), error=RuntimeError(
                    f'the reply to {request.op.name} did not pickle: {exc}')))

    def handle(self, request: Request) -> Reply:
        """Run one request; its exception goes back to be raised in the node's process."""
        session = self.sessions.get(request.session)
        try:
            value = self._run(request, session)
        except Exception as exc:  # noqa: BLE001 (everything is the node's to handle)
            if isinstance(exc, _OUT_OF_MEMORY):
                _empty_device_cache()
            elif not isinstance(exc, _EXPECTED):
                traceback.print_exc()  # a bug: its traceback in the node's log
            return Reply(self.status(), error=portable(exc),
                         stats=session.stats() if session is not None else None)
        session = self.sessions.get(request.session)
        return Reply(self.status(), value=value,
                     stats=session.stats() if session is not None else None)

    def _run(self, request: Request, session: Optional[Any]) -> Any:
        op, args = request.op, request.args
        if op == Op.NEW_SESSION:
            if request.session in self.sessions:
                raise ValueError(f'a session named {request.session!r} exists already')
            created = self.engine.new_session(request.session, args[0])
            self.sessions[request.session] = created
            return created.config
        if op == Op.WARM_UP:
            return self.engine.warm_up(*args)
        if session is None:
            raise ValueError(f'no session named {request.session!r}')
        if op == Op.STEP:
            image = args[0].view(self.frames)  # the frame as the node laid it
            return self.results.share(session.step(image, args[1]))
        if op == Op.RESET:
            session.reset()
            return None
        if op == Op.UPDATE:
            session.update(args[0], reset=args[1])
            return session.config
        raise ValueError(f'unknown request {op!r}')


def _expected_errors() -> tuple:
    """Return the exceptions a frame or a config raise as expected (no traceback printed)."""
    from lingbot_ros.model.config import ConfigError
    from lingbot_ros.streaming.errors import FrameRejected, SizeChanged
    return (ConfigError, FrameRejected, SizeChanged, ValueError)


try:
    from torch.cuda import OutOfMemoryError as _OUT_OF_MEMORY
except ImportError:  # pragma: no cover (an older torch)
    _OUT_OF_MEMORY = RuntimeError
_EXPECTED = _expected_errors()


def _empty_device_cache() -> None:
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001,S110 (best effort after an out-of-memory)
        pass


def main(argv: Optional[list] = None) -> int:
    """Load the engine the node sends, say so, then serve; the exit status says how it ended."""
    argv = sys.argv if argv is None else argv
    sock_fd, frames_fd, size, ppid = (int(v) for v in argv[1:5])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent(ppid)
    from multiprocessing.connection import Connection
    conn = Connection(sock_fd)
    frames = mmap.mmap(frames_fd, size)
    # the heavy imports first, while the node's process reads its parameters
    from lingbot_ros.streaming.engine import Engine
    try:
        cfg = conn.recv()
    except (EOFError, OSError):
        return 0
    try:
        engine = Engine.load(cfg, progress=lambda text: conn.send(Progress(text)))
    except Exception as exc:  # noqa: BLE001 (the node says why configure failed)
        conn.send(LoadFailed(portable(exc)))
        return 1
    server = Server(engine, conn, frames, ppid)
    conn.send(server.loaded())
    return server.serve()


if __name__ == '__main__':
    sys.exit(main())
