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

"""Worker and message building without DDS: queueing, rejections, resets, conventions."""

from dataclasses import replace
import sys
import threading
import time

from lingbot_ros.model.config import ConfigError
from lingbot_ros.ros import messages
from lingbot_ros.ros.camera import CameraStream, RESIZE_AFTER, StampVerdict
from lingbot_ros.ros.conventions import MapConvention
from lingbot_ros.ros.reasons import Event, Level, Rejection
from lingbot_ros.ros.worker import FrameQueue, NAN_RESET_AFTER, Worker, WorkerBusy
from lingbot_ros.streaming.result import FrameResult, FrameType
import numpy as np
import pytest
from worker_doubles import Cfg, frame as _frame, rig as _rig


def test_queue_is_bounded_newest_wins_and_round_robin():
    q = FrameQueue(2, 2)
    assert q.put(_frame(0, 1)) is None and q.put(_frame(0, 2)) is None
    dropped = q.put(_frame(0, 3))
    assert dropped.stamp_ns == 1  # the oldest goes
    q.put(_frame(1, 10))
    order = [q.get(0.01).stamp_ns for _ in range(3)]
    assert order == [2, 10, 3]
    assert q.get(0.01) is None
    q.put(_frame(1, 11))
    assert q.clear() == 1


def test_hand_over_yields_the_gil_only_to_a_waiting_worker(monkeypatch):
    from lingbot_ros.ros import worker as worker_mod
    q, slept = FrameQueue(1, 2), []
    real_sleep = time.sleep
    monkeypatch.setattr(worker_mod.time, 'sleep', lambda s: slept.append(s) or real_sleep(s))
    q.put(_frame(0, 1))
    q.hand_over()
    assert slept == []  # no worker waits: straight back to the executor
    assert q.get(0.0).stamp_ns == 1
    got = []
    taker = threading.Thread(target=lambda: got.append(q.get(5.0)))
    taker.start()
    deadline = time.monotonic() + 5.0
    while not q._waiting:  # the taker blocked in get()
        assert time.monotonic() < deadline
        real_sleep(0.001)
    q.put(_frame(0, 2))
    q.hand_over()
    taker.join(5.0)
    assert slept == [0] and [f.stamp_ns for f in got] == [2]


def test_scale_frames_come_out_together_with_their_stamps():
    cams, _, sink, worker = _rig()
    for stamp in (10, 20, 30):
        worker.process(_frame(0, stamp))
    assert [s for _, s in sink.published] == [10, 20, 30]
    c = cams[0].counters
    assert c.processed == 3 and c.rejected_total == 0 and c.buffered == 0
    assert cams[0].cache_stats.keyframes == 3


def test_size_change_and_model_rejections_are_counted_and_keep_the_session():
    cams, _, sink, worker = _rig(reject_stamps={40})
    for stamp in (10, 20):
        worker.process(_frame(0, stamp))
    worker.process(_frame(0, 30, hw=(32, 32)))
    worker.process(_frame(0, 40))
    worker.process(_frame(0, 50))
    c = cams[0].counters
    assert c.rejected == {Rejection.SIZE_CHANGE: 1, Rejection.NAN_OUTPUT: 1}
    assert [s for _, s in sink.published] == [10, 20, 50]
    assert cams[0].session.resets == 0
    assert ('c0', Rejection.SIZE_CHANGE, Level.WARN) in sink.reports


def test_non_finite_results_are_not_published_and_a_run_of_them_resets():
    bad = {30 + 10 * i for i in range(NAN_RESET_AFTER)}
    cams, _, sink, worker = _rig(nan_stamps=bad)
    for stamp in range(10, 30 + 10 * NAN_RESET_AFTER + 10, 10):
        worker.process(_frame(0, stamp))
    published = [s for _, s in sink.published]
    assert not bad & set(published) and published[:2] == [10, 20]
    assert cams[0].counters.rejected[Rejection.NAN_OUTPUT] == NAN_RESET_AFTER
    assert cams[0].session.resets == 1 and cams[0].counters.session_resets == 1
    assert any(r[1] == Event.SESSION_RESET for r in sink.reports)
    assert sink.restarts == ['c0']  # the accumulated map starts over with the session


def test_stamp_gate_and_pending_reset():
    cams, _, sink, worker = _rig()
    cam = cams[0]
    new, dup, back = StampVerdict.NEW, StampVerdict.DUPLICATE, StampVerdict.BACKWARD
    assert [cam.intake.admit(s) for s in (5, 6, 6, 7, 3, 4)] == [new, new, dup, new, back, new]
    late = StampVerdict.OUT_OF_ORDER  # older by at most the window: dropped, the newest stays
    assert [cam.intake.admit(s, 10) for s in (100, 99, 90, 100, 101, 90, 105)] == \
        [new, late, late, dup, new, back, new]
    assert cam.intake.last_stamp == 105
    worker.process(_frame(0, 5))
    worker.process(_frame(0, 6))
    published = len(cam.track)
    cam.pending_reset.set()
    worker.process(_frame(0, 3))
    assert cam.session.resets == 1 and not cam.pending_reset.is_set()
    assert published == 2 and cam.track.previous is None and len(cam.track) == 0


def test_reset_request_is_served_by_the_running_thread():
    cams, queue, sink, worker = _rig(cameras=2)
    worker.start()
    try:
        for stamp in (1, 2, 3):
            queue.put(_frame(0, stamp))
            queue.put(_frame(1, stamp))
        done = worker.request_reset()
        assert done.wait(5.0)
        assert all(c.session.resets == 1 for c in cams)
    finally:
        worker.stop()
    assert not worker.alive


def test_runtime_config_reaches_the_session_before_the_next_frame():
    cams, queue, sink, _ = _rig()
    cfg = {'value': Cfg()}
    worker = Worker(cams, queue, sink, lambda: cfg['value'])
    worker.process(_frame(0, 1))
    cfg['value'] = Cfg(keyframe_interval=5)
    worker.process(_frame(0, 2))
    assert cams[0].session.updates == [Cfg(keyframe_interval=5)]


def _result(pose, depth=None, conf=None, colors=None):
    k = np.array([[10.0, 0, 2.0], [0, 10.0, 1.0], [0, 0, 1]])
    return FrameResult(stamp_ns=1_500_000_123, index=0, frame_type=FrameType.SCALE,
                       pose_c2w=pose, pose_enc=np.zeros(9, np.float32), intrinsics=k * 2,
                       intrinsics_model=k, input_hw=(8, 12), model_hw=(4, 6), depth=depth,
                       confidence=conf, colors=colors)


def test_rep103_map_puts_the_optical_axis_along_x():
    pose = np.eye(4)
    pose[:3, 3] = [0.0, 0.0, 2.0]  # two units along the first camera's optical axis
    r = _result(pose)
    mapped = messages.map_pose(r, MapConvention.REP103)
    np.testing.assert_allclose(mapped[:3, 3], [2.0, 0.0, 0.0])
    np.testing.assert_allclose(messages.map_pose(r, MapConvention.OPTICAL), pose)
    msg = messages.pose_stamped(mapped, r.stamp_ns, 'map')
    assert (msg.header.stamp.sec, msg.header.stamp.nanosec) == (1, 500_000_123)
    assert messages.stamp_ns(msg.header.stamp) == r.stamp_ns
    # the optical z axis expressed in the map is +x: rotate (0, 0, 1) by the quaternion
    q = msg.pose.orientation
    from lingbot_ros.streaming.trajectory import quat_to_matrix
    np.testing.assert_allclose(quat_to_matrix([q.x, q.y, q.z, q.w]) @ [0, 0, 1], [1, 0, 0],
                               atol=1e-12)


def test_point_cloud_unprojects_filters_and_packs_colour():
    depth = np.full((4, 6), 2.0, np.float32)
    conf = np.arange(24, dtype=np.float32).reshape(4, 6) + 1
    colors = np.zeros((4, 6, 3), np.uint8)
    colors[..., 0] = 255
    r = _result(np.eye(4), depth, conf, colors)
    cloud = messages.point_cloud(r, np.eye(4), 'map', decimation=1, min_confidence=0.0,
                                 percentile=50.0)
    pts = np.frombuffer(bytes(cloud.data), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                                  ('rgb', '<u4')])
    assert cloud.width == len(pts) == 12  # the upper half by confidence
    assert cloud.point_step == 16 and cloud.row_step == 16 * 12
    np.testing.assert_allclose(pts['z'], 2.0)
    # pixel (u=2, v=1) is the principal point: it lands on the optical axis
    centre = pts[(np.abs(pts['x']) < 1e-6) & (np.abs(pts['y']) < 1e-6)]
    assert len(centre) == 0  # row 1 has confidence below the median
    assert set(pts['rgb']) == {0xFF0000}
    decimated = messages.point_cloud(r, np.eye(4), 'map', 2, 0.0, 0.0)
    assert decimated.width == 6
    xs = np.frombuffer(bytes(decimated.data), '<f4').reshape(-1, 4)[:, 0]
    np.testing.assert_allclose(sorted(set(np.round(xs, 5))), [-0.4, 0.0, 0.4])


def test_camera_info_and_depth_carry_the_input_stamp():
    r = _result(np.eye(4), depth=np.ones((4, 6), np.float32))
    info = messages.camera_info(r, 'cam')
    assert (info.height, info.width) == (8, 12) and info.k[0] == 20.0 and info.p[0] == 20.0
    depth = messages.depth_image(r, 'cam')
    # registered to camera_info: the input's 8 x 12 pixels, not the 4 x 6 model grid
    assert (depth.height, depth.width) == (info.height, info.width) == (8, 12)
    assert depth.encoding == '32FC1' and depth.step == 48 and len(depth.data) == 384
    assert messages.stamp_ns(depth.header.stamp) == r.stamp_ns == messages.stamp_ns(
        info.header.stamp)


def test_odometry_twist_from_consecutive_poses():
    a, b = np.eye(4), np.eye(4)
    b[:3, 3] = [0.0, 0.0, 0.5]
    odom = messages.odometry(b, 2_000_000_000, 'map', 'cam', (1_500_000_000, a))
    assert odom.twist.twist.linear.z == pytest.approx(1.0)
    assert odom.child_frame_id == 'cam'


def test_worker_thread_stops_cleanly_while_idle():
    cams, queue, sink, worker = _rig()
    worker.start()
    stopped = threading.Event()
    threading.Thread(target=lambda: (worker.stop(), stopped.set())).start()
    assert stopped.wait(5.0)


def test_rejected_non_finite_frames_reset_the_session_after_a_run_of_them():
    stamps = list(range(100, 100 + NAN_RESET_AFTER))
    cams, _, sink, worker = _rig(reject_stamps=stamps)
    for stamp in (10, 20):
        worker.process(_frame(0, stamp))
    for stamp in stamps:
        worker.process(_frame(0, stamp))
    c = cams[0].counters
    assert c.rejected[Rejection.NAN_OUTPUT] == NAN_RESET_AFTER
    assert c.session_resets == 1 and cams[0].session.resets == 1
    assert ('c0', Event.SESSION_RESET, Level.WARN) in sink.reports


def test_a_config_change_that_needs_a_reset_is_reported_not_fatal():
    cams, queue, sink, worker = _rig()

    def refuse(cfg):
        raise ConfigError('scale_frames cannot change while streaming')
    cams[0].session.update = refuse
    worker._stream_config = lambda: Cfg(scale_frames=3)
    worker.process(_frame(0, 10))
    assert ('c0', Event.CONFIG, Level.WARN) in sink.reports
    assert cams[0].session.buffer == [10]  # the frame still ran, with the running config


def test_a_failing_publish_loses_only_that_result_and_the_thread_lives_on():
    cams, queue, sink, worker = _rig()
    calls = []

    def broken(output):
        calls.append(output.result.stamp_ns)
        if output.result.stamp_ns != 20:
            raise RuntimeError('output thread gone')
        output.delivered()

    def wait_for(predicate):
        deadline = time.monotonic() + 5
        while not predicate() and time.monotonic() < deadline:
            time.sleep(0.01)
        return predicate()
    sink.publish = broken
    worker.start()
    try:
        queue.put(_frame(0, 10))
        assert wait_for(lambda: cams[0].session.buffer == [10])
        queue.put(_frame(0, 20))   # hands over 10 and 20: 10 fails, 20 still goes out
        assert wait_for(lambda: calls == [10, 20] and cams[0].counters.processed == 1)
        queue.put(_frame(0, 30))   # the thread is still there to run it (and it fails)
        assert wait_for(lambda: calls == [10, 20, 30])
        assert worker.alive and calls == [10, 20, 30] and worker.errors == 2
        assert ('c0', Event.PUBLISH_FAILED, Level.ERROR) in sink.reports
    finally:
        worker.stop()


def test_a_new_map_from_the_session_clears_path_and_odometry():
    cams, _, sink, worker = _rig()
    for stamp in (10, 20, 30):
        worker.process(_frame(0, stamp))
    cam = cams[0]
    assert cam.track.previous[0] == 30 and len(cam.track.path()) == 3
    real = cam.session._result

    def next_map(stamp):  # as after a failed window re-seed: the session restarts its map
        return replace(real(stamp), map_epoch=1)
    cam.session._result = next_map
    worker.process(_frame(0, 40))
    assert ('c0', Event.MAP_RESTART, Level.WARN) in sink.reports
    assert cam.counters.session_resets == 1
    assert [s for s, _ in cam.track.records()] == [40] and cam.track.path() == ['pose']
    assert sink.restarts == ['c0']
    worker.process(_frame(0, 50))
    assert cam.counters.session_resets == 1  # same map: nothing more


def test_depth_follows_the_input_pixels_through_a_centre_crop():
    # a tall 20 x 6 input seen as its centre 6 x 6 rows (model grid 3 x 3, scale 0.5)
    km = np.array([[3.0, 0, 1.5], [0, 3.0, 1.5], [0, 0, 1]])
    ki = np.array([[6.0, 0, 3.0], [0, 6.0, 10.0], [0, 0, 1]])
    depth = np.arange(9, dtype=np.float32).reshape(3, 3)
    r = FrameResult(stamp_ns=1, index=0, frame_type=FrameType.SCALE, pose_c2w=np.eye(4),
                    pose_enc=np.zeros(9, np.float32), intrinsics=ki, intrinsics_model=km,
                    input_hw=(20, 6), model_hw=(3, 3), depth=depth)
    out = messages.depth_on_input(r)
    assert out.shape == (20, 6)
    assert np.isnan(out[:7]).all() and np.isnan(out[13:]).all()   # outside the crop
    np.testing.assert_array_equal(out[7:13:2, ::2], depth)          # 2 x 2 blocks per cell
    np.testing.assert_array_equal(out[8:13:2, 1::2], depth)


def test_a_single_odd_size_is_rejected_a_lasting_one_gets_a_new_session():
    cams, _, sink, worker = _rig()
    cam = cams[0]
    for stamp in (10, 20, 30):
        worker.process(_frame(0, stamp))
    worker.process(_frame(0, 40, hw=(32, 32)))   # one odd frame: rejected, counted
    worker.process(_frame(0, 50))                 # the stream goes on
    assert cam.counters.rejected == {Rejection.SIZE_CHANGE: 1} and cam.session.resets == 0
    # the driver restarts at another resolution: RESIZE_AFTER frames in a row
    stamps = [60 + 10 * i for i in range(RESIZE_AFTER)]
    for stamp in stamps:
        worker.process(_frame(0, stamp, hw=(40, 64)))
    assert cam.session.resets == 1 and cam.counters.session_resets == 1
    assert cam.counters.rejected[Rejection.SIZE_CHANGE] == RESIZE_AFTER
    assert ('c0', Event.RESOLUTION_CHANGE, Level.WARN) in sink.reports
    assert cam.session.hw == (40, 64) and cam.session.buffer == [stamps[-1]]
    # interleaved odd sizes never add up to a lasting change
    for i, hw in enumerate([(32, 32), (48, 64), (32, 32), (48, 64)] * RESIZE_AFTER):
        worker.process(_frame(0, 200 + i, hw=hw))
    assert cam.session.resets == 1


def test_a_camera_locked_by_a_bad_first_frame_recovers():
    cams, _, sink, worker = _rig()
    worker.process(_frame(0, 10, hw=(48, 62)))  # a bad first frame fixes the session size
    for i in range(RESIZE_AFTER + 3):
        worker.process(_frame(0, 20 + i))       # then only good frames
    assert cams[0].session.resets == 1
    assert [s for _, s in sink.published][-1] == 20 + RESIZE_AFTER + 2


def _held(session):
    """Make ``session.step`` wait for a release; return (entered, release) events."""
    entered, release = threading.Event(), threading.Event()
    real = session.step

    def slow(image, stamp):
        entered.set()
        release.wait(10)
        return real(image, stamp)
    session.step = slow
    return entered, release


def test_stop_keeps_a_busy_thread_and_start_refuses_a_second_one():
    cams, queue, sink, worker = _rig()
    entered, release = _held(cams[0].session)
    worker.start()
    try:
        queue.put(_frame(0, 10))
        assert entered.wait(5)
        assert worker.stop(timeout=0.2) is False and worker.alive
        with pytest.raises(WorkerBusy):
            worker.start(FrameQueue(1, 2))
        workers = [t for t in threading.enumerate() if t.name == 'lingbot-worker']
        assert len(workers) == 1
        release.set()
        assert worker.stop(timeout=5) is True and not worker.alive
        worker.start(FrameQueue(1, 2))  # now it may
        assert worker.alive
    finally:
        release.set()
        worker.stop()


def test_a_reset_asked_for_during_a_step_is_answered_after_it():
    cams, queue, sink, worker = _rig()
    entered, release = _held(cams[0].session)
    answered = []
    worker.start()
    try:
        queue.put(_frame(0, 10))
        assert entered.wait(5)
        done = worker.request_reset(on_done=lambda: answered.append(True))
        assert not done.wait(0.3) and answered == []  # not on the caller's thread
        release.set()
        assert done.wait(5) and answered == [True]
        assert cams[0].session.resets == 1
    finally:
        release.set()
        worker.stop()
    # with no thread running, the caller serves it at once
    assert worker.request_reset().is_set() and cams[0].session.resets == 2


def test_counters_written_from_two_threads_lose_nothing():
    cam = CameraStream(0, 'c', '/c', None, window=10)
    n = 20000

    def hammer(reason):
        for _ in range(n):
            cam.counters.on_rejected(reason)
            cam.counters.on_dropped()
    threads = [threading.Thread(target=hammer, args=(r,))
               for r in (Rejection.SIZE, Rejection.SIZE, Rejection.NAN_OUTPUT)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so unguarded += would lose counts
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert cam.counters.rejected[Rejection.SIZE] == 2 * n
    assert cam.counters.rejected_total == 3 * n and cam.counters.dropped == 3 * n
