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

"""Test doubles: the submit/drain surface of a session that finishes a frame at once."""

from typing import Callable

import numpy as np


def _nothing() -> None:
    return None


class RecordingLog:
    """A logger that keeps each line as ``(level, text)``: INFO or WARN."""

    def __init__(self) -> None:
        self.lines: list = []

    def info(self, text: str) -> None:
        self.lines.append(('INFO', text))

    def warning(self, text: str) -> None:
        self.lines.append(('WARN', text))


class LandsAtOnce:
    """
    ``Session.submit``'s surface over the subclass's ``step``: nothing is left in flight.

    For fake sessions whose frames are done when ``step`` returns, so that the worker drives
    them as it drives a real one.
    """

    in_flight = False

    def submit(self, image_rgb: np.ndarray, stamp_ns: int) -> list:
        """Run the frame to the end (``step``); return what it completed."""
        return self.step(image_rgb, stamp_ns)

    def drain(self) -> list:
        """Nothing is left in flight: nothing to land."""
        return []

    def flight_ready(self) -> bool:
        return True

    def flight_waiter(self) -> Callable[[], None]:
        return _nothing
