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

"""The offline fit: odometry that is the model's own trajectory times a known scale."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.robot_frame import (base_pose, map_to_odom, PairedOdometry,
                                               read_base_trajectory)
from lingbot_ros.streaming.scale.depth import DepthScaleConfig
from lingbot_ros.streaming.scale.estimate import ScaleSource, ScaleState
from lingbot_ros.streaming.scale.offline import fit_depth_offline, fit_odometry_offline
from lingbot_ros.streaming.trajectory import invert_rigid, write_tum
import numpy as np
import pytest
from synthetic_robot import random_rigid, robot_run


def model_run(seed: int, windows: np.ndarray, size: float, drift: float = 0.05):
    """Return a model trajectory (model units, about ``size``; per-window drift)."""
    rng = np.random.default_rng(seed)
    scales = np.cumprod(1 + rng.uniform(-drift, drift, windows.max() + 1))
    return robot_run(seed, 1.0, n=len(windows), windows=windows, window_scales=scales,
                     duration_s=0.5 * len(windows), amplitude=size)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.floats(0.1, 10.0), st.integers(1, 3))
def test_odometry_equal_to_the_models_track_times_a_scale_recovers_it(
        tmp_path_factory, seed, scale, n_windows):
    windows = np.repeat(np.arange(n_windows), 150)
    run = model_run(seed, windows, size=1.5 / scale)   # the robot drives about 1.5 m
    rng = np.random.default_rng(seed)
    odom_from_map = random_rigid(rng, 20.0)
    camera = run.camera_model.copy()
    camera[:, :3, 3] *= scale
    base_in_odom = odom_from_map @ camera @ invert_rigid(run.base_to_camera)
    # the odometry runs at its own rate: frames are paired by interpolation
    odom_stamps = np.concatenate([run.stamps[:1] - 0.5, run.stamps + 0.013, run.stamps[-1:] + 1])
    odom_poses = np.concatenate([base_in_odom[:1], base_in_odom, base_in_odom[-1:]])
    path = tmp_path_factory.mktemp('odom') / 'base.tum'
    write_tum(path, odom_stamps, odom_poses)
    paired = read_base_trajectory(path, run.stamps)
    assert paired.count == len(run.stamps)
    got = fit_odometry_offline(run.stamps, run.camera_model, run.windows, paired,
                               run.base_to_camera)
    assert got.observable and got.source is ScaleSource.ODOMETRY
    assert all(s is ScaleState.FITTED for s in got.states), got.message
    np.testing.assert_allclose(got.scales, scale, rtol=0.01)
    assert len(got.windows) == n_windows and 'metric scale from odometry' in got.message
    # one scale for the whole run: the metric trajectory is the model's times it
    np.testing.assert_allclose(got.metric_poses[:, :3, 3], camera[:, :3, 3],
                               rtol=0.01, atol=0.01 * scale)


def test_replay_fit_feeds_map_to_odom_that_composes():
    run = robot_run(8, 0.6, n=200, noise_m=0.002, duration_s=60.0)
    paired = PairedOdometry(paired=np.ones(200, dtype=bool), base_in_odom=run.odometry)
    got = fit_odometry_offline(run.stamps, run.camera_model, run.windows, paired,
                               run.base_to_camera)
    assert got.scales[0] == pytest.approx(0.6, rel=0.01)
    for i in (0, 77, 199):
        base_in_map = base_pose(got.metric_poses[i], run.base_to_camera)
        odom_in_map = map_to_odom(base_in_map, run.odometry[i])
        np.testing.assert_allclose(odom_in_map @ run.odometry[i], base_in_map, atol=1e-9)
        # and it is the run's true map <- odom up to the noise
        np.testing.assert_allclose(odom_in_map[:3, 3], run.map_from_odom[:3, 3], atol=0.05)


def test_still_odometry_keeps_model_units_and_says_so(tmp_path):
    run = robot_run(4, 1.0, n=100, amplitude=1.0)
    still = np.repeat(random_rigid(np.random.default_rng(0))[None], 2, axis=0)
    path = tmp_path / 'still.tum'
    write_tum(path, [run.stamps[0] - 1, run.stamps[-1] + 1], still)
    got = fit_odometry_offline(run.stamps, run.camera_model, run.windows,
                               read_base_trajectory(path, run.stamps), run.base_to_camera)
    assert not got.observable and np.all(np.isnan(got.scales))
    assert all(s is ScaleState.WAITING_FOR_MOTION for s in got.states)
    assert 'keeping model units' in got.message and 'standing still' in got.message
    np.testing.assert_array_equal(got.metric_poses, run.camera_model)


def test_frames_outside_the_odometry_span_are_not_paired(tmp_path):
    run = robot_run(6, 1.0, n=100)
    path = tmp_path / 'late.tum'
    write_tum(path, run.stamps + 1000.0, run.odometry)
    paired = read_base_trajectory(path, run.stamps)
    assert paired.count == 0
    got = fit_odometry_offline(run.stamps, run.camera_model, run.windows, paired,
                               run.base_to_camera)
    assert not got.observable and 'time span' in got.message


def test_inputs_of_different_lengths_are_refused():
    run = robot_run(6, 1.0, n=20)
    paired = PairedOdometry(np.ones(19, dtype=bool), run.odometry[:19])
    with pytest.raises(ValueError, match='one stamp'):
        fit_odometry_offline(run.stamps, run.camera_model, run.windows, paired,
                             run.base_to_camera)


def test_depth_offline_recovers_each_windows_factor():
    rng = np.random.default_rng(3)
    n, windows = 24, np.repeat([0, 1], 12)
    factors = np.array([0.8, 0.84])
    poses = np.tile(np.eye(4), (n, 1, 1))
    poses[:, 0, 3] = np.arange(n) * 0.1
    model = [rng.uniform(1.0, 5.0, (30, 40)).astype(np.float32) for _ in range(n)]
    sensor = [m * factors[w] * (1 + rng.normal(scale=0.01, size=m.shape)) for m, w in
              zip(model, windows)]
    for s in sensor[::3]:
        s[:5] = 0.0   # holes
    sensor[5] = None  # a frame without a depth image
    got = fit_depth_offline(np.arange(n) * 0.1, poses, windows, model, sensor,
                            DepthScaleConfig(min_pixels=100))
    assert got.observable and got.source is ScaleSource.DEPTH and got.samples == n - 1
    np.testing.assert_allclose(got.scales, factors[windows], rtol=0.005)
    metric_depth = got.metric.depth(model[20], 1)
    np.testing.assert_allclose(metric_depth, model[20] * got.scales[20], rtol=1e-6)
    none = fit_depth_offline(np.arange(n) * 0.1, poses, windows, model, [None] * n)
    assert not none.observable and 'keeping model units' in none.message
