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
A thread-pool executor that waits instead of spinning while its pool is busy.

rclpy's ``MultiThreadedExecutor`` (up to and including the Kilted release, before
ros2/rclpy#1547) hands the thread pool a task and, on the next turn, finds the same task
"not executing, not done" and yields it again, without waiting. While another thread holds
the GIL (the GPU worker's per-frame Python), the pool threads cannot even start, so the
spinning thread loops in Python, starving them further, and a camera's frames are lost
before the node takes them. A robot's distro may still carry that executor, so the node
always spins with this one. It keeps the set of tasks it handed to the pool and not yet
started: such a task is never handed over again; the spinning thread instead sleeps on a
condition (the GIL released) until a pool thread picks work up. A coroutine task suspended
on a future (the ``~/reset`` service waiting for the worker) is resumed at most every
``RESUME_S``.

The callback groups passed as ``inline`` (the node's image callbacks, which only convert
and enqueue) run in the spinning thread itself, as a single-threaded executor runs them: an
image then waits for no pool thread to wake and take the GIL, and the spinning thread does
not turn its wait set once more for a sample still untaken.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import threading
import time
from typing import Any, Callable, Iterable, Optional

from rclpy.exceptions import InvalidHandle
from rclpy.executors import (ConditionReachedException, Executor, ExternalShutdownException,
                             ShutdownException, TimeoutException)

QUEUED_WAIT_S = 0.005  # longest the spinning thread waits for the pool to start a task
RESUME_S = 0.005       # a suspended coroutine task is polled at most this often


class PoolExecutor(Executor):
    """Run callbacks in ``num_threads`` pool threads; see the module docstring."""

    def __init__(self, num_threads: int = 4, *, context: Any = None,
                 inline: Iterable[Any] = ()) -> None:
        super().__init__(context=context)
        self._inline = tuple(inline)  # callback groups run in the spinning thread
        self._pool = ThreadPoolExecutor(max(1, int(num_threads)),
                                        thread_name_prefix='lingbot-executor')
        self._cond = threading.Condition()
        self._queued: set = set()   # tasks in the pool's queue, not started
        self._ran: dict = {}        # task -> monotonic time a pool thread last ran it
        self._errors: list = []     # exceptions of callbacks, raised in the spinning thread

    def spin_once(self, timeout_sec: Optional[float] = None) -> None:
        self._spin_once_impl(timeout_sec)

    def spin_once_until_future_complete(self, future: Any,
                                        timeout_sec: Optional[float] = None) -> None:
        future.add_done_callback(lambda _: self.wake())
        self._spin_once_impl(timeout_sec, future.done)

    def _spin_once_until_future_complete(self, future: Any,
                                         timeout_sec: Optional[float] = None) -> None:
        self._spin_once_impl(timeout_sec, future.done)

    def _spin_once_impl(self, timeout_sec: Optional[float] = None,
                        wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, entity, _ = self.wait_for_ready_callbacks(timeout_sec, None,
                                                               wait_condition)
        except (ShutdownException, ExternalShutdownException, TimeoutException,
                ConditionReachedException):
            self._raise_errors()
            return
        if any(getattr(entity, 'callback_group', None) is g for g in self._inline):
            self._call(handler)
            self._raise_errors()
            return
        with self._cond:
            if handler in self._queued:  # yielded again before a pool thread took it
                self._cond.wait(QUEUED_WAIT_S)
                self._raise_errors()
                return
            last = self._ran.get(handler)
        if last is not None:  # a coroutine that is waiting on a future: do not poll it hot
            pause = last + RESUME_S - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        with self._cond:
            self._queued.add(handler)
        try:
            self._pool.submit(self._run, handler)
        except RuntimeError:  # the pool was shut down meanwhile
            with self._cond:
                self._queued.discard(handler)
        self._raise_errors()

    def _run(self, handler: Any) -> None:
        with self._cond:
            self._queued.discard(handler)
            self._cond.notify_all()
        self._call(handler)

    def _call(self, handler: Any) -> None:
        """Run one task (in a pool thread, or inline); keep its error for the spinner."""
        try:
            handler()
            error = handler.exception()
        except BaseException as exc:  # noqa: BLE001 (handed to the spinning thread)
            error = exc
        if isinstance(error, InvalidHandle):
            error = None  # its entity was destroyed after it was ready: nothing left to run
        with self._cond:
            if handler.done():
                self._ran.pop(handler, None)
            else:
                self._ran[handler] = time.monotonic()
                for task in [t for t in self._ran if t.done()]:  # cancelled while waiting
                    del self._ran[task]
            if error is not None:
                self._errors.append(error)
        if error is not None:
            self.wake()

    def _raise_errors(self) -> None:
        with self._cond:
            if not self._errors:
                return
            error = self._errors.pop(0)
        raise error

    def wake(self) -> None:
        """Wake the spinning thread (rclpy's own ``_wake`` where a release lacks ``wake``)."""
        waker = getattr(super(), 'wake', None) or getattr(self, '_wake')
        waker()

    def shutdown(self, timeout_sec: Optional[float] = None) -> bool:
        """Stop taking callbacks, then let the pool finish what it started."""
        done = super().shutdown(timeout_sec)
        self._pool.shutdown(wait=True)
        return done
