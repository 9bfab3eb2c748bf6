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

"""The worker with frames left in flight: one frame on the device at a time, landed behind."""

from dataclasses import replace
import threading
import time

from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.reasons import Rejection
from lingbot_ros.ros.worker import FrameQueue, Worker
from lingbot_ros.streaming.session import FrameRejected
import pytest
from worker_doubles import Cfg, FakeSession, frame as _frame, rig as _rig, Sink


class PipelinedFakeSession(FakeSession):
    """
    Holds each streamed result in flight, as ``Session.submit`` does on a GPU.

    The "device" finishes a frame when the test sets ``done``; ``drain`` and the next
    ``submit`` land it (blocking until then, as a real landing waits for the device).
    """

    def __init__(self, **kw):
        super().__init__(**kw)
        self.flight = None
        self.done = threading.Event()
        self.submits = []

    def reset(self):
        super().reset()
        self.flight = None

    @property
    def in_flight(self):
        return self.flight is not None

    def flight_ready(self):
        return self.flight is None or self.done.is_set()

    def flight_waiter(self):
        return self.done.wait

    def _landed(self):
        flight, self.flight = self.flight, None
        if flight is None:
            return []
        self.done.wait(5)
        return [replace(flight, timings=replace(flight.timings, step=2.0, model=1.5))]

    def submit(self, image, stamp):
        self.submits.append(stamp)
        streaming = self.index > 0
        out = self.step(image, stamp)
        if not streaming:
            return out  # the scale call lands at once
        landed = self._landed()
        self.done.clear()
        self.flight = out[0]
        return landed

    def drain(self):
        return self._landed()


def _pipelined_rig():
    cams = [CameraStream(0, 'c0', '/c0/image', PipelinedFakeSession(), window=50)]
    queue, sink = FrameQueue(1, 4), Sink()
    return cams, queue, sink, Worker(cams, queue, sink, lambda: Cfg())


def _wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.005)
    return condition()


def _started_with_three(worker, queue):
    """Start the worker and queue two scale frames and one streamed frame."""
    worker.start()
    for stamp in (10, 20, 30):
        queue.put(_frame(0, stamp))


def test_a_frame_in_flight_lands_when_the_device_is_done_without_a_next_frame():
    cams, queue, sink, worker = _pipelined_rig()
    session = cams[0].session
    _started_with_three(worker, queue)
    try:
        assert _wait_for(lambda: len(sink.published) == 2)  # the scale frames
        assert _wait_for(lambda: session.in_flight and not queue_has(queue))
        time.sleep(0.05)
        assert [s for _, s in sink.published] == [10, 20]  # 30 waits on the device
        session.done.set()  # the device is done: the landing watch wakes the worker
        assert _wait_for(lambda: len(sink.published) == 3)
        assert not session.in_flight and cams[0].counters.processed == 3
        assert cams[0].counters.step_ms.percentile(100) == pytest.approx(2.0)  # its own
    finally:
        assert worker.stop(timeout=5)


def queue_has(queue):
    return any(queue._queues)


def test_a_frame_that_comes_first_is_queued_behind_the_one_in_flight():
    cams, queue, sink, worker = _pipelined_rig()
    session = cams[0].session
    for stamp in (10, 20):
        worker.process(_frame(0, stamp))  # the scale call
    worker.process(_frame(0, 30))
    assert session.in_flight and [s for _, s in sink.published] == [10, 20]
    session.done.set()  # (set before the submit below lands 30, which waits for it)
    worker.process(_frame(0, 40))  # submitted first, then 30 lands
    assert session.submits[-1] == 40 and session.in_flight
    assert [s for _, s in sink.published] == [10, 20, 30]


def test_no_frame_is_launched_behind_one_still_running_on_the_device():
    """A frame waits in the queue, not on the device: it never waits behind another there."""
    cams, queue, sink, worker = _pipelined_rig()
    session = cams[0].session
    _started_with_three(worker, queue)
    try:
        assert _wait_for(lambda: session.in_flight and session.submits[-1] == 30)
        queue.put(_frame(0, 40))
        queue.put(_frame(0, 50))
        time.sleep(0.1)
        assert session.submits[-1] == 30 and queue_has(queue)  # the device still runs 30
        session.done.set()  # 30 done: 40 goes to the device, then 30 lands behind it
        assert _wait_for(lambda: session.submits[-1] == 40)
        assert _wait_for(lambda: [s for _, s in sink.published] == [10, 20, 30])
        time.sleep(0.1)
        assert session.submits[-1] == 40 and queue_has(queue)  # 50 waits for 40
    finally:
        threading.Timer(0.2, session.done.set).start()
        assert worker.stop(timeout=5)


def test_stopping_and_resetting_land_the_frame_in_flight_first():
    cams, queue, sink, worker = _pipelined_rig()
    session = cams[0].session
    _started_with_three(worker, queue)
    try:
        assert _wait_for(lambda: session.in_flight)
        session.done.set()
        worker.request_reset().wait(5)
        assert [s for _, s in sink.published] == [10, 20, 30] and session.resets == 1
        assert cams[0].counters.dropped == 0
        queue.put(_frame(0, 40))
        queue.put(_frame(0, 50))
        queue.put(_frame(0, 60))
        assert _wait_for(lambda: session.in_flight and session.submits[-1] == 60)
        time.sleep(0.05)
        assert [s for _, s in sink.published][-2:] == [40, 50]
    finally:
        threading.Timer(0.2, session.done.set).start()  # the device, done during the stop
        assert worker.stop(timeout=5)
    assert [s for _, s in sink.published][-3:] == [40, 50, 60]  # 60 landed at the stop


def test_a_rejection_that_costs_two_frames_counts_both():
    cams, _, sink, worker = _rig()
    session = cams[0].session
    for stamp in (10, 20):
        worker.process(_frame(0, stamp))

    def rejected(image, stamp):
        raise FrameRejected('non-finite pose for stamp 20; the frame queued behind it too',
                            frames=2)
    session.submit = rejected
    worker.process(_frame(0, 30))
    assert cams[0].counters.rejected_count(Rejection.NAN_OUTPUT) == 2
