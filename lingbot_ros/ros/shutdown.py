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
How the node process stops: once, in order, whatever signals keep arriving.

A terminal's Ctrl-C on ``ros2 launch`` sends SIGINT to the whole process group: the node
gets it directly, and launch sends SIGINT (later SIGTERM) again. rclpy's own handlers
shut the context down inside the first signal (the worker then publishes into a dead
context) and raise KeyboardInterrupt at the second one (inside the cleanup). So the
node starts rclpy without its signal handlers and installs these instead: the first
SIGINT / SIGTERM asks the spin loop to end; every later one is only recorded. The stop
itself (worker, then publishers, then the context) runs in ``main`` afterwards.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """A one-way latch set by a stop signal or by the node itself (lifecycle shutdown)."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ''
        self.signals: list = []   # every stop signal received, in order (names)
        self._previous: dict = {}

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def request(self, reason: str) -> None:
        """Ask for the stop; only the first reason counts, later ones change nothing."""
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()

    def install(self) -> bool:
        """Take SIGINT and SIGTERM over (main thread only); False where that is not possible."""
        try:
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread (main() called from a test's thread)
            return False
        return True

    def ignore_from_now(self) -> None:
        """
        Ignore SIGINT and SIGTERM for the rest of the process (after the stop is done).

        At exit Python puts SIG_DFL back wherever a Python handler is installed, so
        launch's second SIGINT (or its SIGTERM) during interpreter shutdown would kill
        the process (exit -2 / -15) after a clean stop. SIG_IGN is the one it keeps.
        """
        try:
            for sig in STOP_SIGNALS:
                signal.signal(sig, signal.SIG_IGN)
        except ValueError:  # not the main thread
            pass

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        for sig, handler in self._previous.items():
            try:
                signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        self._previous = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        self.signals.append(name)
        self.request(name)  # a second one only adds to ``signals``: the stop is under way
