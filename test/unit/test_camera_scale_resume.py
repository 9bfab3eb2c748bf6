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
A camera's scale saved and restored: its next frames land where they would have landed.

The yardstick is the camera that never stopped. A copy exported at frame k (through the
state file's encoding) and restored into a fresh camera must place every later frame the
same way: pose, covariance, base pose, ``map -> odom``, units, restarts. Then what the
resume does with a saved scale it cannot take, and the output thread's copy for a save.
"""

import json

from doubles import RecordingLog
from hypothesis import given, settings, strategies as st
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.camera_scale import CameraScale, FrameKind
from lingbot_ros.ros.outputs import Outputs
from lingbot_ros.ros.resume import apply_resumes, Resumed
from lingbot_ros.ros.resume_status import ResumeOutcome, ResumeStatus
from lingbot_ros.ros.scale_feed import ScaleFeed
from lingbot_ros.streaming.choices import MapConvention
from lingbot_ros.streaming.parameters import parse
from lingbot_ros.streaming.scale.estimate import ScaleSource
from lingbot_ros.streaming.scale.saved import decode, encode
from lingbot_ros.streaming.state import PublishedTrack
import numpy as np
import pytest
from synthetic_robot import random_rigid, robot_run
from test_camera_scale import _result, Inputs

seeds = st.integers(0, 2 ** 31 - 1)


def _scale(source, said=None, **kwargs):
    said = [] if said is None else said
    return CameraScale(source, MapConvention.REP103, lambda warn, text: said.append(text),
                       **kwargs)


def _through_a_file(saved):
    arrays, header = encode(saved)
    return decode(arrays, json.loads(json.dumps(header)))


def _same(a, b):
    assert (a.withheld, a.restarted, a.drives_map_to_odom) == \
        (b.withheld, b.restarted, b.drives_map_to_odom)
    for name in ('pose', 'covariance', 'base_pose', 'base_covariance', 'odom_in_map'):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            np.testing.assert_array_equal(x, y, err_msg=name)
    if a.placement is not None:
        assert (a.placement.scale, a.placement.metric) == (b.placement.scale, b.placement.metric)
        np.testing.assert_array_equal(a.result.depth, b.result.depth)


def _odometry_frames(seed, scale_m, n):
    run = robot_run(seed, scale_m, n=n, noise_m=0.003, windows=np.repeat([0, 1], n // 2),
                    window_scales=[scale_m, 1.1 * scale_m])
    return [(_result(i, run.camera_model[i], window=int(run.windows[i]), stamp_s=run.stamps[i]),
             lambda i=i: Inputs(run.base_to_camera, run.odometry[i], run.base_in_odom[i]))
            for i in range(n)]


def _depth_frames(n):
    rng = np.random.default_rng(7)
    out = []
    for i in range(n):
        result = _result(i, random_rigid(rng, 1.0), window=i // 6)
        sensor = result.depth * np.float32(1.7 + 0.01 * (i // 6))
        out.append((result, lambda s=sensor: Inputs(depth=s)))
    return out


def _fixed_frames(n):
    rng = np.random.default_rng(8)
    return [(_result(i, random_rigid(rng, 1.0), window=i // 4), lambda: Inputs(np.eye(4)))
            for i in range(n)]


def _go_on(ref, frames, k, **kwargs):
    """Run ``ref`` to frame k, restore a copy, run both on; return the copy and the logs."""
    for result, inputs in frames[:k]:
        ref.place(result, inputs(), base_status_of=lambda: 'known')
    saved = ref.export()
    got = _scale(ref.source, **kwargs)
    if saved is not None:
        assert got.restore(_through_a_file(saved)) is None
        assert got.report.state == ref.report.state and got.report.frame == ref.report.frame
    for result, inputs in frames[k:]:
        a = ref.place(result, inputs(), base_status_of=lambda: 'known')
        b = got.place(result, inputs(), base_status_of=lambda: 'known')
        _same(a, b)
        assert (a.placement is None) or ref.report.scale == got.report.scale
    return got


@settings(max_examples=6, deadline=None)
@given(seeds, st.floats(0.2, 5.0), st.integers(1, 79))
def test_a_restored_driving_camera_goes_on_as_the_one_never_stopped(seed, scale_m, k):
    frames = _odometry_frames(seed, scale_m, 80)
    ref = _scale(ScaleSource.ODOMETRY, drives=True)
    _go_on(ref, frames, k, drives=True)
    assert ref.report.frame == FrameKind.ANCHORED.value


@pytest.mark.parametrize('source, frames, kwargs', [
    (ScaleSource.DEPTH, _depth_frames(20), {}),
    (ScaleSource.FIXED, _fixed_frames(12), {'fixed_scale': 2.5}),
])
@pytest.mark.parametrize('k', [1, 5, 9])
def test_a_restored_depth_or_fixed_scale_goes_on_as_the_one_never_stopped(
        source, frames, kwargs, k):
    ref = _scale(source, **kwargs)
    _go_on(ref, frames, k, **kwargs)
    assert ref.report.units == 'metre'


def _saved_fixed(k=4, **kwargs):
    ref = _scale(ScaleSource.FIXED, fixed_scale=2.5, **kwargs)
    for result, inputs in _fixed_frames(k):
        ref.place(result, inputs())
    return ref.export()


@pytest.mark.parametrize('camera, words', [
    ({'source': ScaleSource.DEPTH}, 'saved with scale_source fixed, depth here'),
    ({'source': ScaleSource.FIXED, 'fixed_scale': 3.0}, 'saved with fixed_scale 2.5, 3 here'),
    ({'source': ScaleSource.FIXED, 'fixed_scale': 2.5, 'drives': True},
     'saved by a camera not driving map -> odom, this one drives it'),
])
def test_a_saved_scale_of_another_source_value_or_role_is_not_taken(camera, words):
    said = []
    fresh = _scale(camera.pop('source'), said, **camera)
    before = fresh.report
    assert fresh.restore(_saved_fixed()) == words
    assert fresh.report == before and fresh.export() is None  # as fresh as it was
    unavailable = _scale(ScaleSource.ODOMETRY, unavailable='no tf2_ros')
    saved = _odometry_export()
    assert unavailable.restore(saved) == 'scale_source odometry is unavailable here: no tf2_ros'


def _odometry_export():
    ref = _scale(ScaleSource.ODOMETRY)
    for result, inputs in _odometry_frames(3, 1.0, 40):
        ref.place(result, inputs())
    return ref.export()


def test_outputs_assumed_in_model_units_start_over_at_the_first_metric_frame():
    said = []
    scale = _scale(ScaleSource.FIXED, said, fixed_scale=2.0)
    scale.assume_published(FrameKind.MODEL)
    placed = scale.place(_result(0, np.eye(4)), Inputs())
    assert placed.restarted and placed.placement.metric
    assert said[0] == 'outputs: metres (the track and the map start over)'


# --- the output thread's copy, and what a resume does with it -----------------------------

class _Session:
    """What the resume reads of a session: its stats and its trajectory (model units)."""

    def __init__(self, trajectory):
        self.trajectory = trajectory

    def stats(self):
        from lingbot_ros.cache.stats import CacheStats
        return CacheStats()


class _Voxels:
    frame = 'rep103'

    def __len__(self):
        return 7


class _Maps:
    def __init__(self):
        self.restored = []

    def restore(self, index, voxels):
        self.restored.append(index)
        return 0


def _node(source='fixed', trajectory=(), **params):
    p = parse({'scale_source': source, 'fixed_scale': 2.5, 'path_max_length': 3, **params})
    cam = CameraStream(0, 'cam', '/cam', _Session(list(trajectory)), window=10)
    log = RecordingLog()
    return p, cam, ScaleFeed(p, ['cam'], 14, log), log


def test_the_output_thread_copies_the_scale_and_the_track_it_sent():
    params, cam, feed, _ = _node()
    out = Outputs(None, lambda: params, lambda: [cam], lambda: None, lambda: False)
    out.scale = feed
    for result, inputs in _fixed_frames(5):
        placed = feed.cameras[0].place(result, inputs())
        cam.track.add(result.stamp_ns, placed.pose)
    copied = out.export(cam).result(5)  # no thread running: copied at once
    assert copied.track.frame == 'rep103' and len(copied.track.stamp_ns) == 5
    np.testing.assert_array_equal(copied.track.pose[-1], cam.track.records()[-1][1])
    assert copied.scale.frame is FrameKind.METRIC and copied.scale.fixed_scale == 2.5
    out._thread.start()
    try:
        gate = []
        out._thread.submit(lambda: gate.append(cam.track.add(999, np.eye(4))))
        later = out.export(cam).result(5)  # after the job handed over before it
        assert later.track.stamp_ns[-1] == 999
    finally:
        out._thread.stop(5)


def _resume(source, saved_scale, track, convention='rep103', trajectory=()):
    params, cam, feed, log = _node(source, trajectory, map_convention=convention)
    resumed = Resumed(ResumeStatus('f', ResumeOutcome.RESUMED), voxels=_Voxels(),
                      scale=saved_scale, track=track)
    maps = _Maps()
    apply_resumes([resumed], [cam], maps, feed, params, log)
    return cam, feed.cameras[0], maps, log


def _track(n=4):
    poses = np.tile(np.eye(4), (n, 1, 1))
    poses[:, 0, 3] = np.arange(n) * 2.5
    return PublishedTrack(frame='rep103', stamp_ns=np.arange(n, dtype=np.int64), pose=poses)


def test_a_resumed_scale_keeps_the_saved_track_and_map():
    saved = _through_a_file(_saved_fixed())
    cam, scale, maps, log = _resume('fixed', saved, _track())
    assert cam.resume.scale_note.startswith('restored: fitted, 2.5 m per model unit, outputs in '
                                            'metres')
    assert cam.resume.track_note == '4 poses restored' and maps.restored == [0]
    assert [s for s, _ in cam.track.records()] == [0, 1, 2, 3] and len(cam.track.path()) == 3
    assert cam.track.previous[0] == 3
    placed = scale.place(_fixed_frames(5)[4][0], Inputs())
    assert not placed.restarted  # the same frame: the track goes on
    assert any('scale resumed' in t for _, t in log.lines)


def test_a_refused_scale_drops_what_was_saved_in_metres():
    saved = _through_a_file(_saved_fixed())
    cam, scale, maps, log = _resume('none', saved, _track())
    assert cam.resume.scale_note == 'not restored: saved with scale_source fixed, none here'
    assert cam.resume.track_note == 'not restored: saved in metres by a scale that did not ' \
        'resume'
    assert cam.resume.map_note == cam.resume.track_note
    assert len(cam.track) == 0 and maps.restored == []
    warned = [t for w, t in log.lines if w == 'WARN']
    assert len(warned) == 2 and all('\n' not in t for t in warned)


def test_outputs_saved_in_model_units_start_over_when_the_scale_arrives():
    # a file saved with scale_source none (no scale part) resumed by a node with a source
    cam, scale, maps, _ = _resume('fixed', None, _track())
    assert cam.resume.scale_note == 'none in the file' and len(cam.track) == 4
    assert scale.place(_fixed_frames(1)[0][0], Inputs()).restarted
    # a file without a track (the replay tool's): rebuilt from the trajectory, model units
    trajectory = [(10, np.eye(4)), (11, np.eye(4))]
    cam, scale, _, _ = _resume('fixed', _through_a_file(_saved_fixed()), None,
                               trajectory=trajectory)
    assert cam.resume.track_note == 'rebuilt from the trajectory in model units (none in the ' \
        'file)'
    assert [s for s, _ in cam.track.records()] == [10, 11]
    assert scale.place(_fixed_frames(5)[4][0], Inputs()).restarted
