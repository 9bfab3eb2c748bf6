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

"""A camera's scale and published frame, fed result by result as the output thread feeds it."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st
from lingbot_ros.ros.camera_scale import CameraScale, FrameKind
from lingbot_ros.ros.conventions import OPTICAL_TO_REP103
from lingbot_ros.ros.placement import Placement
from lingbot_ros.streaming.choices import MapConvention
from lingbot_ros.streaming.map_cloud import packed_rows, unproject
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.scale.estimate import ScaleSource
from lingbot_ros.streaming.trajectory import invert_rigid
import numpy as np
import pytest
from synthetic_robot import random_rigid, robot_run

seeds = st.integers(0, 2 ** 31 - 1)
K = np.array([[40.0, 0.0, 28.0], [0.0, 40.0, 21.0], [0.0, 0.0, 1.0]])


def _result(i, pose, window=0, epoch=0, depth=None, stamp_s=None):
    rng = np.random.default_rng(i)
    depth = rng.uniform(1.0, 3.0, (42, 56)).astype(np.float32) if depth is None else depth
    stamp = int(round((i * 0.1 if stamp_s is None else stamp_s) * 1e9))
    return FrameResult(stamp_ns=stamp, index=i, frame_type=FrameType.KEYFRAME, pose_c2w=pose,
                       pose_enc=np.zeros(9, np.float32), intrinsics=K, intrinsics_model=K,
                       input_hw=(42, 56), model_hw=(42, 56), window_index=window,
                       map_epoch=epoch, depth=depth,
                       confidence=np.full((42, 56), 2.0, np.float32),
                       colors=rng.integers(0, 255, (42, 56, 3), dtype=np.uint8))


class Inputs:
    """One frame's inputs, as the node's feed would look them up."""

    def __init__(self, lever=None, odometry=None, odom_base=None, depth=None):
        self._lever, self._odometry, self._base, self._depth = lever, odometry, odom_base, depth
        self.asked = []

    def lever(self):
        self.asked.append('lever')
        return self._lever

    def odometry(self):
        return self._odometry

    def odom_base(self):
        return self._base if self._base is not None else self._odometry

    def depth(self):
        return self._depth


def _scale(source, said=None, **kwargs):
    said = [] if said is None else said
    return CameraScale(source, MapConvention.REP103, lambda warn, text: said.append(text),
                       **kwargs)


def test_without_a_source_the_outputs_are_as_before():
    scale = _scale(ScaleSource.NONE)
    pose = random_rigid(np.random.default_rng(1))
    result = _result(0, pose)
    placed = scale.place(result, Inputs())
    assert placed.result is result and placed.covariance is None and not placed.restarted
    np.testing.assert_array_equal(placed.pose, OPTICAL_TO_REP103 @ pose)
    assert placed.base_pose is None and placed.odom_in_map is None
    assert scale.report.state == 'none' and scale.report.units == 'model'
    assert scale.report.base == 'not needed'


def test_a_fixed_scale_puts_every_output_in_metres_from_the_first_frame():
    scale = _scale(ScaleSource.FIXED, fixed_scale=2.5)
    lever = rigid(np.eye(3), np.array([0.1, 0.0, 0.3]))
    for i in range(3):
        pose = random_rigid(np.random.default_rng(i), 1.0)
        result = _result(i, pose)
        rows = packed_rows(*unproject(result, OPTICAL_TO_REP103 @ pose, 2, 0.0, 0.0)[:2])
        result = replace(result, points_rows=rows, depth_input=result.depth.copy())
        placed = scale.place(result, Inputs(lever=lever), needs_lever=True,
                             base_status_of=lambda: 'known')
        assert not placed.restarted and placed.placement.metric
        expected = OPTICAL_TO_REP103 @ pose
        expected[:3, 3] *= 2.5  # the first window's metric frame keeps the model's origin
        np.testing.assert_allclose(placed.pose, expected, atol=1e-12)
        np.testing.assert_allclose(placed.result.depth, result.depth * 2.5, rtol=1e-6)
        np.testing.assert_allclose(placed.result.depth_input, result.depth * 2.5, rtol=1e-6)
        # the session's rows moved as points unprojected from the metric depth and pose
        metric_rows = packed_rows(*unproject(placed.result, placed.pose, 2, 0.0, 0.0)[:2])
        np.testing.assert_allclose(placed.result.points_rows[:, :3], metric_rows[:, :3],
                                   atol=1e-4)
        np.testing.assert_array_equal(placed.result.points_rows[:, 3], rows[:, 3])  # colour
        np.testing.assert_allclose(placed.base_pose @ lever, placed.pose, atol=1e-12)
        assert np.all(np.linalg.eigvalsh(placed.covariance) > 0)
    report = scale.report
    assert (report.state, report.units) == ('fitted', 'metre')
    assert (report.scale, report.sigma) == (2.5, 0.0)


@settings(max_examples=8, deadline=None)
@given(seeds, st.floats(0.05, 20.0), st.floats(0.0, 0.01))
def test_odometry_drives_map_to_odom_that_composes_to_the_base_pose(seed, scale_m, noise):
    run = robot_run(seed, scale_m, n=80, noise_m=noise)
    said = []
    scale = _scale(ScaleSource.ODOMETRY, said, drives=True)
    kinds, m2o = [], []
    for i in range(len(run.stamps)):
        result = _result(i, run.camera_model[i], stamp_s=run.stamps[i])
        placed = scale.place(result, Inputs(run.base_to_camera, run.odometry[i],
                                            run.base_in_odom[i]), base_status_of=lambda: 'known')
        kinds.append(scale.report.frame)
        if placed.withheld:
            assert placed.pose is None and placed.base_pose is None
            continue
        # map -> odom -> base_link is the node's base pose; the camera hangs off the base
        np.testing.assert_allclose(placed.odom_in_map @ run.base_in_odom[i], placed.base_pose,
                                   atol=1e-9)
        np.testing.assert_allclose(placed.base_pose @ run.base_to_camera, placed.pose,
                                   atol=1e-9)
        m2o.append(placed.odom_in_map)
    assert kinds[0] == FrameKind.WITHHELD.value and kinds[-1] == FrameKind.ANCHORED.value
    assert kinds.count(FrameKind.WITHHELD.value) == kinds.index(FrameKind.ANCHORED.value)
    assert scale.report.state == 'fitted' and scale.report.map_to_odom == 'broadcast'
    assert scale.report.scale == pytest.approx(scale_m, rel=0.02)
    # map starts where odom was when the scale arrived and stays there up to the noise
    np.testing.assert_allclose(m2o[0], np.eye(4), atol=1e-9)
    assert max(np.abs(m[:3, 3]).max() for m in m2o) < 0.05 + 20 * noise
    assert any('outputs: metres, map anchored to odom' in t for t in said)


def test_standing_still_gives_no_scale_and_the_driving_camera_withholds():
    run = robot_run(3, 1.0, n=40)
    scale = _scale(ScaleSource.ODOMETRY, drives=True)
    for i in range(40):
        placed = scale.place(_result(i, run.camera_model[i], stamp_s=run.stamps[i]),
                             Inputs(run.base_to_camera, run.odometry[0]),
                             base_status_of=lambda: 'known')
        assert placed.withheld
    report = scale.report
    assert report.state == 'waiting for motion' and report.scale is None
    assert report.note == 'the base is standing still' and report.units == 'model'
    assert report.map_to_odom == 'waiting for the scale'


def test_without_the_lever_arm_the_odometry_scale_waits_and_says_why():
    run = robot_run(4, 1.0, n=30)
    scale = _scale(ScaleSource.ODOMETRY)
    for i in range(30):
        placed = scale.place(_result(i, run.camera_model[i]), Inputs(None, run.odometry[i]),
                             base_status_of=lambda: 'unknown: no such frame')
    assert not placed.placement.metric and scale.report.state == 'waiting for motion'
    assert scale.report.note == 'waiting for base_frame -> camera (unknown: no such frame)'
    assert scale.report.base == 'unknown: no such frame'


def test_a_new_map_starts_the_scale_over_and_a_change_of_units_restarts_the_track():
    run = robot_run(5, 0.7, n=60)
    scale = _scale(ScaleSource.ODOMETRY)
    restarts = []
    for i in range(60):
        placed = scale.place(_result(i, run.camera_model[i], stamp_s=run.stamps[i]),
                             Inputs(run.base_to_camera, run.odometry[i]))
        restarts.append(placed.restarted)
    assert placed.placement.metric and restarts.count(True) == 1  # model units -> metres
    placed = scale.place(_result(60, run.camera_model[0], epoch=1, stamp_s=run.stamps[-1]),
                         Inputs(run.base_to_camera, run.odometry[0]))
    assert not placed.placement.metric and scale.report.state == 'waiting for motion'


def test_unavailable_source_keeps_model_units_and_says_why():
    scale = _scale(ScaleSource.ODOMETRY, unavailable='tf2_ros is not installed')
    inputs = Inputs(np.eye(4), np.eye(4))
    placed = scale.place(_result(0, np.eye(4)), inputs)
    assert not placed.placement.metric and inputs.asked == []
    assert scale.report.state == 'unavailable' and scale.report.unavailable
    assert scale.report.note == 'tf2_ros is not installed'


def test_depth_on_the_input_pixels_gives_the_factor():
    scale = _scale(ScaleSource.DEPTH)
    states = []
    for i in range(6):
        result = _result(i, np.eye(4))
        sensor = np.repeat(np.repeat(result.depth, 2, 0), 2, 1) * np.float32(1.7)  # 2x pixels
        scale.place(result, Inputs(depth=sensor))
        states.append(scale.report.state)
    assert states[0] == 'waiting for depth' and states[-1] == 'fitted'
    assert scale.report.scale == pytest.approx(1.7, rel=1e-5)
    wrong = np.ones((10, 40), np.float32)  # another aspect ratio: refused, counted, said
    scale.place(_result(6, np.eye(4)), Inputs(depth=wrong))
    assert scale.report.inputs_rejected == 1 and 'register the depth' in scale.report.note
    scale.place(_result(7, np.eye(4)), Inputs())
    assert scale.report.inputs_missing == 1


@settings(max_examples=30, deadline=None)
@given(seeds, st.floats(0.01, 100.0), st.sampled_from(list(MapConvention)))
def test_a_placement_moves_rows_points_and_poses_alike(seed, scale, convention):
    rng = np.random.default_rng(seed)
    axes = OPTICAL_TO_REP103[:3, :3] if convention is MapConvention.REP103 else np.eye(3)
    place = Placement(frame=random_rigid(rng), scale=scale, offset=rng.normal(size=3),
                      metric=True, rows_axes=axes)
    session = rng.normal(size=(50, 3))
    rows = packed_rows(session @ axes.T, rng.integers(0, 255, (50, 3)))
    np.testing.assert_allclose(place.rows(rows)[:, :3], place.points(session),
                               rtol=1e-5, atol=1e-3 * scale)
    pose = random_rigid(rng)
    np.testing.assert_allclose(place.pose(pose)[:3, 3], place.points(pose[:3, 3]), atol=1e-9)
    np.testing.assert_allclose(place.pose(pose)[:3, :3], place.frame[:3, :3] @ pose[:3, :3],
                               atol=1e-12)
    cov = np.diag(rng.uniform(0.1, 1.0, 6))
    turned = place.covariance(cov)
    assert np.trace(turned[:3, :3]) == pytest.approx(np.trace(cov[:3, :3]))
    assert np.allclose(turned, turned.T) and not np.any(turned[:3, 3:])
    model = Placement.model_units(np.eye(4))
    assert model.rows(rows) is rows and model.depth(np.ones(2)) is not None


def test_a_new_lever_arm_starts_the_odometry_scale_and_the_anchor_over():
    run = robot_run(6, 0.8, n=120)
    scale = _scale(ScaleSource.ODOMETRY, drives=True)
    moved = run.base_to_camera.copy()
    moved[0, 3] += 0.05  # the camera was moved on the robot
    kinds = []
    for i in range(120):
        lever = run.base_to_camera if i < 60 else moved
        # the base in odom as the moved camera's track now implies it
        odom = run.odometry[i] if i < 60 else \
            invert_rigid(run.map_from_odom) @ run.camera_metric[i] @ invert_rigid(moved)
        placed = scale.place(_result(i, run.camera_model[i], stamp_s=run.stamps[i]),
                             Inputs(lever, odom), base_status_of=lambda: 'known')
        kinds.append(placed.withheld)
        if not placed.withheld:
            np.testing.assert_allclose(placed.odom_in_map @ odom, placed.base_pose, atol=1e-9)
            np.testing.assert_allclose(placed.base_pose @ lever, placed.pose, atol=1e-9)
    assert not kinds[59] and kinds[60] and not kinds[-1]  # withheld again, then re-anchored
    assert scale.report.scale == pytest.approx(0.8, rel=1e-6)
