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
Per-camera counters and bounded windows for rates and latency percentiles.

Written by the subscription callbacks (received, rejected at conversion, dropped), by
the worker (rejected by the model, step and queue-wait times) and by the output thread
(processed, latency, publish times and failures); read by the diagnostics timer. Several
threads write some of the same fields (``rejected``, ``dropped``), so every write goes
through a method that holds :attr:`CameraCounters.lock`, and readers that want a
consistent picture hold it too.
"""

from __future__ import annotations

from collections import Counter, deque, OrderedDict
from enum import Enum
import threading
import time
from typing import Any, Deque, Mapping, Optional

from lingbot_ros.ros.reasons import Rejection
import numpy as np


class Window:
    """The last ``size`` samples of a quantity (bounded, so hours of streaming cost nothing)."""

    def __init__(self, size: int) -> None:
        self._values: Deque[float] = deque(maxlen=max(2, int(size)))

    def add(self, value: float) -> None:
        self._values.append(float(value))

    def percentile(self, q: float) -> Optional[float]:
        values = list(self._values)
        return float(np.percentile(values, q)) if values else None

    def __len__(self) -> int:
        return len(self._values)


class RateMeter:
    """Events per second over the last ``size`` event times (monotonic clock)."""

    def __init__(self, size: int) -> None:
        self._times: Deque[float] = deque(maxlen=max(2, int(size)))

    def tick(self, now: Optional[float] = None) -> None:
        self._times.append(time.monotonic() if now is None else now)

    def rate(self, now: Optional[float] = None) -> float:
        """Return events per second; decays to 0 once events stop arriving."""
        times = list(self._times)
        if len(times) < 2:
            return 0.0
        now = time.monotonic() if now is None else now
        span = max(times[-1] - times[0], now - times[-1], 1e-9)
        if now - times[-1] > 2 * (times[-1] - times[0]) / (len(times) - 1) + 1.0:
            span = now - times[0]  # stalled: stretch the window to now
        return (len(times) - 1) / span


class Stage(Enum):
    """
    The parts of one frame's latency in the node, in order; /diagnostics has p50 and p99 of each.

    Together they cover the image stamp to the frame's last message sent: HANDOFF holds the
    wait for the output thread's turn while the previous frame's messages still go out.
    """

    ARRIVAL = 'arrival'       # image stamp -> the callback took it, on the node's clock
    CONVERT = 'convert'       # the callback's conversion to an RGB array
    QUEUE = 'queue_wait'      # the frame queued -> its step began
    PREPARE = 'prepare'       # resize and normalise, on the model's device
    MODEL = 'model'           # the model call, outputs on the host
    FINISH = 'finish'         # the rest of the step: pose and intrinsics, the cache's commit
    HANDOFF = 'handoff'       # the step's end -> the output thread began the frame
    PUBLISH = 'publish'       # building and sending the frame's messages


class Sent(Enum):
    """The messages a frame (or the map timer) sends; each is timed and its failures counted."""

    POSE = 'pose'
    ODOM = 'odom'
    PATH = 'path'
    TF = 'tf'
    CAMERA_INFO = 'camera_info'
    DEPTH = 'depth'
    POINTS = 'points'
    MAP_POINTS = 'map_points'
    BASE_ODOM = 'base_odom'
    MAP_TO_ODOM = 'map_to_odom'


# Frames each camera's rates, latency percentiles and drop rate are taken over: a few
# seconds of a camera, so /diagnostics follows a change within seconds.
STATS_WINDOW = 200
ARRIVAL_MAX_MS = 10_000.0  # older stamps (a bag of another day, another clock) are not timed


class CameraCounters:
    """What one camera stream has seen; the numbers /diagnostics reports."""

    def __init__(self, window: int) -> None:
        self.lock = threading.RLock()
        self.received = 0
        self.processed = 0
        self.dropped = 0
        self.lost_before_node = 0  # sent by the camera, never taken (publisher numbering)
        self.rejected: Counter = Counter()  # Rejection -> count
        self.publish_failures: Counter = Counter()  # Sent -> count
        self.stamp_resets = 0
        self.session_resets = 0
        self.buffered = 0
        self.first_received: Optional[float] = None
        self.last_received: Optional[float] = None
        self.last_stepped: Optional[float] = None
        self.last_processed: Optional[float] = None
        self.input_rate = RateMeter(window)
        self.processed_rate = RateMeter(window)
        self.step_ms = Window(window)
        self.latency_ms = Window(window)
        self.stage_ms = {stage: Window(window) for stage in Stage}
        self.output_ms: dict = {}  # Sent -> Window of its build-and-send times
        self._window = window
        self.outcomes: Deque[bool] = deque(maxlen=max(2, window))  # True: dropped

    def on_received(self, now: float) -> None:
        with self.lock:
            self.received += 1
            if self.first_received is None:
                self.first_received = now
            self.last_received = now
            self.input_rate.tick(now)

    def on_dropped(self, count: int = 1) -> None:
        with self.lock:
            self.dropped += count
            self.outcomes.extend([True] * count)

    def on_lost(self, count: int) -> None:
        """Frames the camera sent that never reached the callback (DDS history, wire)."""
        if count <= 0:
            return
        with self.lock:
            self.lost_before_node += count
            self.outcomes.extend([True] * min(count, self.outcomes.maxlen or count))

    def on_rejected(self, reason: Rejection, frames: int = 1) -> None:
        with self.lock:
            self.rejected[reason] += frames

    def on_publish_failed(self, output: Sent) -> None:
        with self.lock:
            self.publish_failures[output] += 1

    def on_output_sent(self, output: Sent, ms: float) -> None:
        """Time one output's build and send (one window per member of ``Sent``, at most)."""
        with self.lock:
            window = self.output_ms.get(output)
            if window is None:
                window = self.output_ms[output] = Window(self._window)
            window.add(ms)

    def on_stamp_reset(self) -> None:
        with self.lock:
            self.stamp_resets += 1

    def on_session_reset(self) -> None:
        with self.lock:
            self.session_resets += 1

    def set_buffered(self, frames: int) -> None:
        with self.lock:
            self.buffered = frames

    def on_converted(self, arrival_ms: Optional[float], convert_ms: float) -> None:
        """Count the image callback's part: the stamp's age on arrival, the conversion."""
        with self.lock:
            if arrival_ms is not None and 0.0 <= arrival_ms <= ARRIVAL_MAX_MS:
                self.stage_ms[Stage.ARRIVAL].add(arrival_ms)
            self.stage_ms[Stage.CONVERT].add(convert_ms)

    def on_stepped(self, now: float, step_ms: float,
                   stages: Optional[Mapping[Stage, Optional[float]]] = None) -> None:
        with self.lock:
            self.last_stepped = now
            self.step_ms.add(step_ms)
            self._add_stages(stages)

    def on_processed(self, now: float, latency_ms: Optional[float],
                     stages: Optional[Mapping[Stage, Optional[float]]] = None) -> None:
        with self.lock:
            self._add_stages(stages)
            self.processed += 1
            self.last_processed = now
            self.processed_rate.tick(now)
            self.outcomes.append(False)
            if latency_ms is not None:
                self.latency_ms.add(latency_ms)

    def _add_stages(self, stages: Optional[Mapping[Stage, Optional[float]]]) -> None:
        for stage, ms in (stages or {}).items():
            if ms is not None:
                self.stage_ms[stage].add(ms)

    def stage_percentile(self, stage: Stage, q: float) -> Optional[float]:
        return self.stage_ms[stage].percentile(q)

    def rejected_count(self, reason: Rejection) -> int:
        with self.lock:
            return self.rejected.get(reason, 0)

    @property
    def rejected_total(self) -> int:
        with self.lock:
            return sum(self.rejected.values())

    def drop_rate(self) -> float:
        """Fraction of recent frames lost: before the node, or in its newest-wins queue."""
        with self.lock:
            outcomes = list(self.outcomes)
        return sum(outcomes) / len(outcomes) if outcomes else 0.0

    def stalled_for(self, now: float, horizon_s: float) -> Optional[float]:
        """Seconds without a completed step while input keeps arriving; None when fine."""
        if self.last_received is None or now - self.last_received > horizon_s:
            return None  # no recent input: quiet, not stalled
        since = self.last_stepped if self.last_stepped is not None else self.first_received
        idle = now - since
        return idle if idle > horizon_s else None


# Frames a camera sent that the node never took, from the publishers' numbering. A
# best-effort reader of depth N keeps the newest N samples and overwrites the rest without a
# trace. DDS numbers every sample a writer sends (1, 2, 3, ...) and rmw hands that number and
# the writer's GID to the callback (MessageInfo), so a jump from 7 to 10 means two frames were
# lost before the node, on the wire or in the reader's history; a number that goes back means
# the writer restarted (nothing lost). Bounded: the newest MAX_WRITERS writers are followed.
MAX_WRITERS = 16  # writers followed per topic (a camera has one; a restarted driver, a few)


class SequenceGaps:
    """Per-writer last sequence number of one topic; ``observe`` returns frames lost."""

    def __init__(self) -> None:
        self._last: OrderedDict = OrderedDict()  # writer GID -> last sequence number seen

    def observe(self, info: Optional[Mapping[str, Any]]) -> int:
        """Count the samples between this one and the writer's previous (0 if unknown)."""
        if not info:
            return 0
        seq = info.get('publication_sequence_number')
        if not isinstance(seq, int) or seq <= 0:
            return 0  # this rmw does not number samples
        writer = _writer_key(info.get('publisher_gid'))
        last = self._last.pop(writer, None)
        self._last[writer] = seq
        while len(self._last) > MAX_WRITERS:
            self._last.popitem(last=False)
        if last is None or seq <= last:
            return 0  # first sample of this writer, or it restarted
        return seq - last - 1


def _writer_key(gid: Any) -> Any:
    """Return a hashable key for rmw's publisher GID (a dict of bytes, or None)."""
    if gid is None:
        return None
    if isinstance(gid, Mapping):
        data = gid.get('data', gid)
        try:
            return (gid.get('implementation_identifier'), bytes(data))
        except (TypeError, ValueError):
            return repr(gid)
    try:
        return bytes(gid)
    except (TypeError, ValueError):
        return repr(gid)
