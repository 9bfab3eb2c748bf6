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
The thread that builds and sends each processed frame's messages, off the model's thread.

The worker hands every result over as a job and goes straight on to the next frame, so
building depth, points and the rest overlaps the next model step instead of adding to it
(at 30 Hz that is the difference between the model's rate and a slower one). Jobs run one
at a time in the order they were handed over, so a map restart handed over between two
results lands between them. The queue is bounded: when it is full the worker waits (a
committed frame is never dropped here), which is where a slow output shows up as a longer
step. Nothing here imports rclpy.
"""

from __future__ import annotations

from collections import deque
import threading
import time
from typing import Callable, Deque, Optional

CAPACITY = 32  # jobs waiting at most: more than one scale call's results (8) several times


class OutputThread:
    """Runs handed-over jobs in order on one thread; inline while the thread is not running."""

    def __init__(self, on_error: Callable[[BaseException], None], capacity: int = CAPACITY,
                 name: str = 'lingbot-output') -> None:
        self._on_error = on_error
        self._capacity = max(1, int(capacity))
        self._name = name
        self._jobs: Deque[Callable[[], None]] = deque()
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._running = False  # asked to run (False: the thread drains its queue and ends)
        self._live = False     # the thread takes jobs (False: submit runs them inline)
        self._submitted = 0
        self._done = 0

    @property
    def alive(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    @property
    def backlog(self) -> int:
        with self._cond:
            return len(self._jobs)

    def start(self) -> None:
        """Start the thread (again after a stop); a no-op while one runs."""
        with self._cond:
            if self._running:
                return
            previous = self._thread
        if previous is not None:
            previous.join()  # a stopped thread still sending its last jobs: let it finish
        with self._cond:
            if self._running:
                return
            self._running = self._live = True
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        """Hand a job over; wait while the queue is full; run it here if no thread runs."""
        with self._cond:
            if self._live:
                while self._live and len(self._jobs) >= self._capacity:
                    self._cond.wait(0.1)
                if self._live:  # still taking jobs: a draining thread takes this one too
                    self._jobs.append(job)
                    self._submitted += 1
                    self._cond.notify_all()
                    return
            self._submitted += 1
        self._run(job)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every job handed over so far has run; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def stop(self, timeout: float = 10.0) -> bool:
        """Run what is queued, then end the thread; False if it did not end in time."""
        with self._cond:
            self._running = False
            self._cond.notify_all()
            thread = self._thread
        if thread is None:
            return True
        thread.join(timeout)
        if thread.is_alive():
            return False
        with self._cond:
            if self._thread is thread:
                self._thread = None
        return True

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and self._running:
                    self._cond.wait()
                if not self._jobs:
                    self._live = False  # stopped and drained: from here submit runs inline
                    self._cond.notify_all()
                    return
                job = self._jobs.popleft()
                self._cond.notify_all()  # room for a waiting submit
            self._run(job)

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except Exception as exc:  # noqa: BLE001 (one frame's output lost, not the thread)
            self._on_error(exc)
        finally:
            with self._cond:
                self._done += 1
                self._cond.notify_all()
