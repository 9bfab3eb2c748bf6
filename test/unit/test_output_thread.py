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


"""The output thread: in order, bounded, flushed, drained on stop, and never the worker's wait."""

import threading
import time

from doubles import LandsAtOnce
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.counters import Stage
from lingbot_ros.ros.output_thread import OutputThread
from lingbot_ros.ros.worker import Frame, FrameQueue, Output, Worker
import numpy as np
import pytest


def _wait(predicate, seconds=5.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.005)
    return predicate()


@pytest.fixture
def out():
    errors = []
    thread = OutputThread(errors.append, capacity=3)
    thread.errors = errors
    yield thread
    thread.stop(5.0)


def test_jobs_run_in_order_on_the_thread_and_flush_waits_for_them(out):
    ran = []
    out.start()
    for i in range(20):
        out.submit(lambda i=i: ran.append((i, threading.current_thread().name)))
    assert out.flush(5.0)
    assert [i for i, _ in ran] == list(range(20))
    assert {name for _, name in ran} == {'lingbot-output'}


def test_a_full_queue_makes_submit_wait_and_nothing_is_dropped(out):
    gate, ran = threading.Event(), []
    out.start()
    out.submit(gate.wait)                    # the thread is busy with this one
    assert _wait(lambda: out.backlog == 0)
    for i in range(3):                       # fills the queue (capacity 3)
        out.submit(lambda i=i: ran.append(i))
    fourth = threading.Thread(target=out.submit, args=(lambda: ran.append(3),))
    fourth.start()
    time.sleep(0.2)
    assert fourth.is_alive() and out.backlog == 3  # waiting for room, not dropped
    gate.set()
    fourth.join(5.0)
    assert out.flush(5.0) and ran == [0, 1, 2, 3]


def test_stop_sends_what_was_handed_over_then_submit_runs_inline(out):
    gate, ran = threading.Event(), []
    out.start()
    out.submit(gate.wait)
    out.submit(lambda: ran.append('queued'))
    stopper = threading.Thread(target=out.stop, args=(5.0,))
    stopper.start()
    gate.set()
    stopper.join(5.0)
    assert ran == ['queued'] and not out.alive
    out.submit(lambda: ran.append(threading.current_thread().name))
    assert ran[-1] == threading.current_thread().name   # no thread: run by the caller
    out.start()                                         # and it starts again
    out.submit(lambda: ran.append(threading.current_thread().name))
    assert out.flush(5.0) and ran[-1] == 'lingbot-output'


def test_a_failing_job_is_reported_and_the_next_one_runs(out):
    ran = []
    out.start()

    def broken():
        raise RuntimeError('publisher destroyed')
    out.submit(broken)
    out.submit(lambda: ran.append(1))
    assert out.flush(5.0) and ran == [1]
    assert [str(e) for e in out.errors] == ['publisher destroyed']


def test_flush_times_out_while_a_job_is_stuck(out):
    gate = threading.Event()
    out.start()
    out.submit(gate.wait)
    assert not out.flush(0.1)
    gate.set()
    assert out.flush(5.0)


class _Session(LandsAtOnce):
    """One result per frame."""

    config = None

    def step(self, image, stamp_ns):
        from lingbot_ros.streaming.result import FrameResult, FrameTimings, FrameType
        eye = np.eye(3)
        return [FrameResult(stamp_ns=stamp_ns, index=0, frame_type=FrameType.KEYFRAME,
                            pose_c2w=np.eye(4), pose_enc=np.zeros(9, np.float32),
                            intrinsics=eye, intrinsics_model=eye, input_hw=(4, 4),
                            model_hw=(4, 4),
                            timings=FrameTimings(model=20.0, step=25.0, prepare=1.5))]

    def stats(self):
        from lingbot_ros.cache.stats import CacheStats
        return CacheStats()


class _HeldSink:
    """Sends like the node does (on an OutputThread), each send held until ``gate`` opens."""

    def __init__(self):
        self.thread = OutputThread(lambda exc: None, capacity=8)
        self.gate = threading.Event()
        self.sent = []

    def publish(self, output: Output):
        def send():
            began = time.monotonic()
            self.gate.wait()  # the first frame's sending is held; the others wait their turn
            self.sent.append(output.result.stamp_ns)
            output.delivered(began)
        self.thread.submit(send)

    def report(self, *args):
        pass

    def map_restarted(self, cam):
        self.thread.submit(cam.track.clear)

    def flush(self, timeout):
        return self.thread.flush(timeout)


def test_the_worker_steps_on_while_the_messages_are_still_being_sent():
    cam = CameraStream(0, 'c', '/c/image', _Session(), window=20)
    sink = _HeldSink()
    sink.thread.start()
    worker = Worker([cam], FrameQueue(1, 8), sink, lambda: None)

    def five_frames():
        for stamp in range(1, 6):
            worker.process(Frame(0, np.zeros((4, 4, 3), np.uint8), stamp, time.monotonic(), ''))
    stepping = threading.Thread(target=five_frames)
    try:
        stepping.start()
        stepping.join(5.0)
        # all five steps done while not one frame's messages could go out
        assert not stepping.is_alive() and sink.sent == [] and cam.counters.processed == 0
        sink.gate.set()
        assert sink.flush(5.0)
    finally:
        sink.gate.set()
        sink.thread.stop(5.0)
    assert sink.sent == [1, 2, 3, 4, 5]
    c = cam.counters
    assert c.processed == 5 and c.stage_percentile(Stage.PUBLISH, 100) > 0.0
    assert c.stage_percentile(Stage.QUEUE, 50) is not None
    # the step's split, from the session's timings: model, prepare, the rest of the step
    assert c.stage_percentile(Stage.MODEL, 50) == 20.0
    assert c.stage_percentile(Stage.PREPARE, 50) == 1.5
    assert c.stage_percentile(Stage.FINISH, 50) == 5.0
    # the later frames waited for the first one's turn: the hand-over stage holds that wait
    assert c.stage_percentile(Stage.HANDOFF, 100) > c.stage_percentile(Stage.PUBLISH, 0) >= 0
