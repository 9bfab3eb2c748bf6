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

"""The node's save and resume without DDS: who does what, in which order, and what is said."""

from concurrent.futures import Future
import threading
import time

from doubles import LandsAtOnce, RecordingLog
from lingbot_ros.ros.camera import CameraStream, RESIZE_AFTER
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.outputs import SavedOutputs
from lingbot_ros.ros.reasons import Rejection
from lingbot_ros.ros.resume import apply_resumes, resume_paths, resume_sessions, state_file
from lingbot_ros.ros.resume_status import ResumeOutcome, ResumeStatus
from lingbot_ros.ros.scale_feed import ScaleFeed
from lingbot_ros.ros.state_service import capture_all, write_all
from lingbot_ros.ros.worker import Frame, FrameQueue, Worker
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.errors import StateError
from lingbot_ros.streaming.map_cloud import MapCloudConfig
from lingbot_ros.streaming.parameters import as_values, parse
from lingbot_ros.streaming.relocalise import KeyframePositions, ResumeReport
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.state import PublishedTrack
import numpy as np
import pytest


class Sink:
    """Publishes inline; the map's keyframes go to a map thread, as the node's outputs do."""

    def __init__(self, maps=None):
        self.maps, self.published = maps, []

    def publish(self, output):
        r = output.result
        self.published.append(r.stamp_ns)
        output.camera.track.add(r.stamp_ns, r.pose_c2w)
        if self.maps is not None and r.is_keyframe and r.depth is not None:
            self.maps.submit(output.camera.index, r, r.pose_c2w)

    def map_restarted(self, cam):
        cam.track.clear()

    def flush(self, timeout):
        return True

    def report(self, cam, topic, text, level):
        pass

    def export(self, cam):
        """Copy the camera's track as the output thread does (no scale source here)."""
        done = Future()
        done.set_result(SavedOutputs(scale=None,
                                     track=PublishedTrack.of(cam.track.records(), 'optical')))
        return done


# --- the worker runs a job between frames ------------------------------------------------

class InFlight(LandsAtOnce):
    """Keeps each frame in flight until the next submit or a drain, as a GPU session does."""

    def __init__(self):
        self.flight, self.seen = None, []
        self.config = StreamConfig()

    @property
    def in_flight(self):
        return self.flight is not None

    def stats(self):
        from lingbot_ros.cache.stats import CacheStats
        return CacheStats()

    def submit(self, image, stamp):
        landed = self.drain()
        k = np.eye(3)
        self.flight = FrameResult(stamp_ns=stamp, index=len(self.seen), pose_c2w=np.eye(4),
                                  frame_type=FrameType.KEYFRAME,
                                  pose_enc=np.zeros(9, np.float32), intrinsics=k,
                                  intrinsics_model=k, input_hw=(4, 4), model_hw=(4, 4))
        self.seen.append(stamp)
        return landed

    def drain(self):
        flight, self.flight = self.flight, None
        return [] if flight is None else [flight]


def test_a_job_runs_on_the_worker_between_frames_after_the_frame_in_flight_landed():
    cam = CameraStream(0, 'c', '/c', InFlight(), window=10)
    queue, sink = FrameQueue(1, 4), Sink()
    worker = Worker([cam], queue, sink, lambda: cam.session.config)
    worker.start()
    try:
        queue.put(Frame(0, np.zeros((4, 4, 3), np.uint8), 7, time.monotonic(), 'c'))
        deadline = time.monotonic() + 5
        while not cam.session.in_flight and time.monotonic() < deadline:
            time.sleep(0.005)
        seen = {}

        def job():
            seen['thread'] = threading.current_thread().name
            seen['in_flight'] = cam.session.in_flight
            seen['published'] = list(sink.published)
            return 'done'
        assert worker.run_between_frames(job).result(5) == 'done'
        assert seen == {'thread': 'lingbot-worker', 'in_flight': False, 'published': [7]}

        def fails():
            raise RuntimeError('no room')
        with pytest.raises(RuntimeError, match='no room'):
            worker.run_between_frames(fails).result(5)
        assert worker.alive
    finally:
        assert worker.stop(5)
    # no thread running: the job runs in the caller's thread, as a reset does
    assert worker.run_between_frames(lambda: threading.current_thread().name).result(0) == \
        threading.current_thread().name


# --- the map thread exports in order, restores at once -------------------------------------

def _keyframe(stamp, shift):
    k = np.array([[8.0, 0, 4.0], [0, 8.0, 3.0], [0, 0, 1]])
    pose = np.eye(4)
    pose[0, 3] = shift
    return FrameResult(stamp_ns=stamp, index=stamp, frame_type=FrameType.KEYFRAME,
                       pose_c2w=pose, pose_enc=np.zeros(9, np.float32), intrinsics=k,
                       intrinsics_model=k, input_hw=(6, 8), model_hw=(6, 8),
                       depth=np.full((6, 8), 2.0, np.float32),
                       confidence=np.full((6, 8), 2.0, np.float32),
                       colors=np.full((6, 8, 3), 90, np.uint8))


def test_a_map_export_holds_the_keyframes_queued_before_it_and_none_after():
    cfg = MapCloudConfig(voxel_size=0.01, decimation=1, confidence_percentile=0.0)
    maps = MapThread(1, cfg)
    gate = threading.Event()
    real = maps.run
    maps.run = lambda job: (gate.wait(10), real(job))
    maps.start()
    try:
        maps.submit(0, _keyframe(1, 0.0), np.eye(4))
        exported = maps.export(0)
        r = _keyframe(2, 5.0)
        maps.submit(0, r, r.pose_c2w)
        assert not exported.done()  # behind the first keyframe, still waiting
        gate.set()
        voxels = exported.result(10)
        assert len(voxels) == 48 and voxels.keyframes == 1
        assert maps.drain(10) and maps.counters(0).points == 96
    finally:
        gate.set()
        maps.stop()
    other = MapThread(1, cfg.replace(max_points=40))
    version = other.counters(0).version
    assert other.restore(0, voxels) == 8  # over the bound: the least recently seen go
    c = other.counters(0)
    assert c.points == 40 and c.keyframes == 1 and c.version > version
    with pytest.raises(ValueError, match='voxel size'):
        MapThread(1, cfg.replace(voxel_size=0.02)).restore(0, voxels)


# --- what /diagnostics says ---------------------------------------------------------------

def _report(distances):
    saved = KeyframePositions(map_epoch=0, index=np.arange(2), stamp_ns=np.arange(2),
                              position=np.zeros((2, 3)))
    report = ResumeReport(saved, frames=10)
    for i, d in enumerate(distances):
        pose = np.eye(4)
        pose[0, 3] = d
        k = np.eye(3)
        report.observe(FrameResult(stamp_ns=10 + i, index=10 + i, frame_type=FrameType.KEYFRAME,
                                   pose_c2w=pose, pose_enc=np.zeros(9, np.float32),
                                   intrinsics=k, intrinsics_model=k, input_hw=(4, 4),
                                   model_hw=(4, 4)))
    return report


@pytest.mark.parametrize('status, resets, state, warn', [
    (ResumeStatus('f', ResumeOutcome.RESUMED, report=_report([])), 0,
     'resumed: waiting for frames', False),
    (ResumeStatus('f', ResumeOutcome.RESUMED, report=_report([0.1, 0.2, 3.0])), 0,
     'relocalised within 0.2 model units', False),
    (ResumeStatus('f', ResumeOutcome.RESUMED, report=_report([2.0, 3.0])), 0,
     'far from the saved map: 2.5 model units', True),
    (ResumeStatus('f', ResumeOutcome.RESUMED, report=_report([0.1])), 1,
     'resumed, then the stream started a new map', False),
    (ResumeStatus('f', ResumeOutcome.RESUMED), 0,
     'resumed (no saved keyframe to measure against)', False),
    (ResumeStatus('f', ResumeOutcome.REFUSED, reason='state file f: newer'), 0,
     'refused, started a new map: state file f: newer', True),
])
def test_the_resume_state_says_where_the_camera_stands(status, resets, state, warn):
    view = status.view(resets, far=1.0)
    values = dict(view.values)
    assert (view.state, view.warn) == (state, warn)
    assert values['resume_state'] == state and values['resume_file'] == 'f'
    assert values['resume_distance_unit'] == 'model units'
    metric = status.view(resets, far=1.0, metres_per_unit=2.0)
    if 'within' in state:
        assert metric.state == 'relocalised within 0.4 m'  # the same fix, said in metres


def test_the_resume_pattern_names_each_camera():
    p = parse({'resume_state': '/s/{camera}_state.safetensors', 'camera_topics': ['/a', '/b']})
    assert [str(x) for x in resume_paths(p, ['a', 'b'])] == \
        ['/s/a_state.safetensors', '/s/b_state.safetensors']
    assert resume_paths(parse({}), ['a']) == []
    assert str(resume_paths(parse({'resume_state': '~/x'}), ['a'])[0]).endswith('/x')


# --- a save and a resume in one process ----------------------------------------------------

@pytest.fixture(scope='module')
def engine():
    return Engine.load(EngineConfig(preset='tiny', device='cpu'))


def _camera(engine, index, name, cfg):
    return CameraStream(index, name, f'/{name}', engine.new_session(name, cfg), window=10)


def test_a_saved_camera_resumes_with_its_map_and_track(engine, tmp_path):
    params = parse({'scale_frames': 2, 'image_size': 56, 'sliding_window': 2,
                    'camera_topics': ['/a', '/b'], 'map_voxel_size': 0.05,
                    'map_convention': 'optical',  # the sink's poses: the session's own
                    'resume_state': str(tmp_path / '{camera}_state.safetensors')})
    cfg = StreamConfig(scale_frames=2, image_size=56, sliding_window=2)
    map_cfg = MapCloudConfig(voxel_size=0.05)
    maps = MapThread(2, map_cfg)
    maps.start()
    cams = [_camera(engine, 0, 'a', cfg), _camera(engine, 1, 'b', cfg)]
    sink = Sink(maps)
    worker = Worker(cams, FrameQueue(2, 8), sink, lambda: cfg)
    rng = np.random.default_rng(0)
    for i in range(5):
        worker.process(Frame(0, rng.integers(0, 256, (40, 60, 3), dtype=np.uint8), 100 + i,
                             time.monotonic(), 'a'))
    try:
        taken = worker.run_between_frames(
            lambda: capture_all(worker, maps, engine.state_identity(), sink)).result(10)
        assert [t.camera.name for t in taken] == ['a']  # b saw no frame: nothing to save
        written, failed = write_all(tmp_path, taken, 'optical')
        assert maps.drain(10)
    finally:
        maps.stop()
    assert failed == [] and len(written) == 1
    assert written[0].startswith(f"{state_file(tmp_path, 'a')} (")
    assert 'frame 5' in written[0] and 'map voxels, 5 track poses)' in written[0]
    # resume: camera a continues; b has no file: refused, or without resume_required fresh
    fresh = [engine.new_session(n, cfg) for n in ('a', 'b')]
    log = RecordingLog()
    with pytest.raises(StateError, match='^camera b: state file .*b_state.safetensors: no such'):
        resume_sessions(engine, fresh, ['a', 'b'], params, log)
    lenient = parse({**as_values(params), 'resume_required': False})
    fresh, log = [engine.new_session(n, cfg) for n in ('a', 'b')], RecordingLog()
    resumed = resume_sessions(engine, fresh, ['a', 'b'], lenient, log)
    assert [r.status.outcome for r in resumed] == [ResumeOutcome.RESUMED, ResumeOutcome.REFUSED]
    assert [w for w, _ in log.lines] == ['INFO', 'WARN']
    back = [CameraStream(i, n, f'/{n}', s, window=10)
            for i, (n, s) in enumerate(zip(('a', 'b'), fresh))]
    maps2 = MapThread(2, map_cfg)
    apply_resumes(resumed, back, maps2, ScaleFeed(lenient, ['a', 'b'], 14, log), lenient, log)
    assert np.array_equal(maps2.rows(0)[0], maps.rows(0)[0]) and maps2.counters(0).points > 0
    before = cams[0].track.records()
    assert [s for s, _ in back[0].track.records()] == [s for s, _ in before] == list(
        range(100, 105))
    np.testing.assert_array_equal(np.stack([p for _, p in back[0].track.records()]),
                                  np.stack([p for _, p in before]))
    assert back[0].track.previous[0] == 104 and len(back[0].track.path()) == 5
    assert back[0].resume.map_note.endswith('voxels restored')
    assert back[0].resume.track_note == '5 poses restored'  # the saved track, as it was sent
    assert back[0].resume.scale_note == 'none in the file'  # scale_source none: no scale part
    assert back[1].resume.outcome is ResumeOutcome.REFUSED and len(back[1].track) == 0
    # the resumed camera goes on as the saved one does
    worker2 = Worker(back, FrameQueue(2, 8), Sink(), lambda: cfg)
    image = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    for w in (worker, worker2):
        w.process(Frame(0, image, 105, time.monotonic(), 'a'))
        w.run_between_frames(lambda: None).result(10)  # lands the frame in flight
    assert back[0].track.records()[-1][0] == 105
    np.testing.assert_array_equal(back[0].track.records()[-1][1],
                                  cams[0].track.records()[-1][1])
    # a camera of another size than the saved one is refused as at any size change: after
    # RESIZE_AFTER frames in a row a new session, a new map, and the resume says so
    other = rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)
    for i in range(RESIZE_AFTER):
        worker2.process(Frame(0, other, 200 + i, time.monotonic(), 'a'))
        worker2.run_between_frames(lambda: None).result(10)
    c = back[0].counters
    assert c.rejected[Rejection.SIZE_CHANGE] == RESIZE_AFTER - 1 and c.session_resets == 1
    assert back[0].resume.view(c.session_resets, 1.0).state == \
        'resumed, then the stream started a new map'
    assert len(back[0].track) == 0  # the saved poses left with the saved map
