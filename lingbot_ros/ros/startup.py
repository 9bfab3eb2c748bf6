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
How long the node took to start: the process's age and the phases of configure / activate.

The lifecycle transitions (``node.py``) fill :class:`Phases` in; ``lingbot_node`` logs and
reports the sum once the node is active. :func:`warm_up` is configure's longest phase on CUDA.
"""

from __future__ import annotations

import os
from pathlib import Path
import time
from typing import Any, Callable, Optional

from lingbot_ros.streaming.config import NOMINAL_INPUT_HW

PROCESS_T0 = time.monotonic()  # where /proc cannot say when the process started


def process_age() -> float:
    """Seconds since this process started (Linux /proc; else since this module loaded)."""
    try:
        fields = Path('/proc/self/stat').read_text().rsplit(')', 1)[1].split()
        started = int(fields[19]) / os.sysconf('SC_CLK_TCK')  # field 22: start, in ticks
        uptime = float(Path('/proc/uptime').read_text().split()[0])
        return max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - PROCESS_T0


class Phases:
    """
    Where start-up time goes: named phases of configure / activate, in seconds.

    Only the transitions' own time counts: :meth:`resume` at the start of a transition
    drops the wait before it (a lifecycle manager's, or a person's between ``ros2
    lifecycle set`` calls).
    """

    def __init__(self, before: Optional[float] = None) -> None:
        self._t = time.monotonic()
        self.parts: list = [] if before is None else [('process start to node ready', before, {})]

    def resume(self) -> None:
        """Start timing again: the time since the last phase closed is no start-up time."""
        self._t = time.monotonic()

    def mark(self, name: str, inner: Optional[dict] = None) -> None:
        """Close the phase that just ended; ``inner`` splits it further (seconds by name)."""
        now = time.monotonic()
        self.parts.append((name, now - self._t, dict(inner or {})))
        self._t = now

    def text(self) -> str:
        """
        Say e.g. '9.8 s from process start to active: parameters 0.00 s, model 7.10 s ...'.

        The total is the sum of the phases: from process start on the first configure
        (less any wait in unconfigured, reported as ``waited_unconfigured``), from the
        configure on a later one.
        """
        out = []
        for name, seconds, inner in self.parts:
            detail = ', '.join(f'{k} {v:.2f} s' for k, v in inner.items())
            out.append(f'{name} {seconds:.2f} s' + (f' ({detail})' if detail else ''))
        total = sum(seconds for _, seconds, _ in self.parts)
        since = 'process start' if self.parts and self.parts[0][0].startswith('process') \
            else 'configure'
        return f'{total:.1f} s from {since} to active: ' + '; '.join(out)


def warm_up(engine: Any, stream_cfg: Any, cameras: int, say: Callable[[str], None],
            warn: Callable[[str], None]) -> dict:
    """
    Run the cameras' first frames' one-off work at configure, not while their frames pile up.

    For a nominal camera: compiling (``torch_compile``), allocating the KV pools and
    capturing the CUDA graphs, which each camera's session of that size then takes over.
    ``say`` puts a line in the log and ``/diagnostics``; a failure only warns: the cameras
    then do the same work at their first frames. Return the seconds by part (the start-up
    phase's breakdown; empty after a failure).
    """
    size = f'{NOMINAL_INPUT_HW[1]}x{NOMINAL_INPUT_HW[0]}'
    what = 'compiling the blocks, ' if engine.compiled_blocks else ''
    say(f'warm-up: {what}KV pools and CUDA graphs for {cameras} {size} camera(s) (compiling '
        'takes tens of seconds the first time on a machine, seconds once cached)')
    try:
        times = engine.warm_up(stream_cfg, NOMINAL_INPUT_HW, cameras=cameras)
    except Exception as exc:  # noqa: BLE001 (the cameras then do it at their first frames)
        warn(f'warm-up failed ({type(exc).__name__}: {exc}); each camera compiles and '
             'captures at its first frames instead')
        return {}
    say(f'warm-up at {size} took {times.total_s:.1f} s ({times.text()}); a camera of another '
        'size compiles and captures at its first frames')
    return times.by_part()
