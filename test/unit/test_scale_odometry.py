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

"""The odometry scale estimator against synthetic robot runs with a known scale."""

from dataclasses import replace

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.scale.estimate import ScaleSource, ScaleState
from lingbot_ros.streaming.scale.metric import MetricFrame
from lingbot_ros.streaming.scale.odometry import (FitVerdict, OdometryScale,
                                                  OdometryScaleConfig)
import numpy as np
import pytest
from synthetic_robot import rigid, robot_run, rot_z

seeds = st.integers(0, 2 ** 31 - 1)
scales = st.floats(0.05, 20.0)            # metres per model unit
noises = st.floats(0.001, 0.03)           # odometry noise per axis, metres
fractions = st.floats(0.0, 0.2)           # share of frames with a gross model error
ORIENTATION_NOISE_RAD = 0.01              # on the model's camera orientations


def feed(est: OdometryScale, run, frames=None, t_offset: float = 0.0) -> list:
    """Offer the run's frames; return the stamps of the samples the estimator kept."""
    kept = []
    for i in range(len(run.stamps)) if frames is None else frames:
        t = float(run.stamps[i] + t_offset)
        if est.add(int(run.windows[i]), t, run.camera_model[i], run.odometry[i]):
            kept.append(t)
    return kept


def expected_relative_error(run, noise_m: float) -> float:
    """Return the least-squares scale's relative error: noise over the camera's excursion."""
    p = (run.base_in_odom @ run.base_to_camera)[:, :3, 3]
    return noise_m / np.sqrt(np.sum((p - p.mean(0)) ** 2))


@settings(max_examples=40, deadline=None)
@given(seeds, scales, noises, fractions)
def test_recovers_the_scale_within_what_the_noise_allows(seed, scale, noise, fraction):
    run = robot_run(seed, scale, noise_m=noise, noise_rad=ORIENTATION_NOISE_RAD,
                    outlier_fraction=fraction)
    est = OdometryScale(run.base_to_camera)
    kept_stamps = feed(est, run)
    got = est.estimate()
    assert got.state is ScaleState.FITTED and got.source is ScaleSource.ODOMETRY, est.verdict
    rel = abs(got.scale / scale - 1)
    assert rel <= 8 * expected_relative_error(run, noise) + 1e-4
    assert rel <= 5 * got.sigma / got.scale + 1e-6   # the stated uncertainty is honest
    # outliers are not counted as samples used; the residual RMS is the odometry's noise
    # (3 axes) and the model's orientation noise carried over the camera's lever arm (the two
    # axes across it)
    kept = est.buffered
    assert got.samples <= kept - 0.5 * np.count_nonzero(run.outliers)
    lever_m = np.linalg.norm(run.base_to_camera[:3, 3])
    expected_rms = np.sqrt(3 * noise ** 2 + 2 * (ORIENTATION_NOISE_RAD * lever_m) ** 2)
    assert 0.5 * noise * np.sqrt(3) < got.residual_rms_m < 2 * expected_rms
    # the fit is of the newest sample kept (a robot that stops adds none)
    if est.verdict is FitVerdict.ACCEPTED:
        assert got.fit_stamp_s == kept_stamps[-1]
    assert got.fit_stamp_s >= kept_stamps[len(kept_stamps) // 2]
    fit = est.last_fit
    # odom <- map, metric: the inverse of the run's map <- odom
    np.testing.assert_allclose(fit.rotation, run.map_from_odom[:3, :3].T, atol=0.02)


def test_noise_free_data_gives_the_exact_scale():
    run = robot_run(3, 0.37)
    est = OdometryScale(run.base_to_camera)
    feed(est, run)
    got = est.estimate()
    assert got.scale == pytest.approx(0.37, rel=1e-9)
    assert got.sigma < 1e-9 and got.samples == est.buffered


def spin_on_the_spot(t):
    out = np.tile(np.eye(4), (len(t), 1, 1))
    out[:, :3, :3] = np.stack([rot_z(a) for a in 2 * np.pi * np.asarray(t) / 30.0])
    out[:, :3, 3] = [1.0, -2.0, 0.0]
    return out


@settings(max_examples=25, deadline=None)
@given(seeds, scales, st.floats(0.0, 0.02), fractions)
def test_turning_on_the_spot_gives_no_scale(seed, scale, noise, fraction):
    run = robot_run(seed, scale, noise_m=noise, outlier_fraction=fraction,
                    path=spin_on_the_spot, duration_s=60.0)
    # the camera does swing on the lever arm's circle: the model sees it move
    c = run.camera_metric[:, :3, 3]
    assert np.ptp(c, axis=0).max() > 0.05
    est = OdometryScale(run.base_to_camera)
    feed(est, run)
    got = est.estimate()
    assert got.state is ScaleState.WAITING_FOR_MOTION and got.scale is None
    assert est.verdict in (FitVerdict.NOT_ENOUGH_TRAVEL, FitVerdict.TOO_NOISY)


@settings(max_examples=20, deadline=None)
@given(seeds, scales, st.floats(0.0, 0.01))
def test_standing_still_gives_no_scale(seed, scale, model_jitter):
    def still(t):
        return np.tile(rigid(rot_z(0.3), [2.0, 1.0, 0.0]), (len(t), 1, 1))
    run = robot_run(seed, scale, path=still)
    rng = np.random.default_rng(seed)
    run.camera_model[:, :3, 3] += rng.normal(scale=model_jitter / scale, size=(len(run.stamps), 3))
    est = OdometryScale(run.base_to_camera)
    feed(est, run)
    got = est.estimate()
    assert got.state is ScaleState.WAITING_FOR_MOTION and got.scale is None
    assert est.buffered == 1   # a base that does not move adds no samples
    assert est.verdict is FitVerdict.STANDING_STILL


@settings(max_examples=15, deadline=None)
@given(seeds, scales, noises)
def test_a_stop_keeps_the_last_value_and_goes_stale(seed, scale, noise):
    cfg = OdometryScaleConfig(stale_after_s=10.0)
    run = robot_run(seed, scale, noise_m=noise, duration_s=60.0)
    est = OdometryScale(run.base_to_camera, cfg)
    feed(est, run)
    before = est.estimate(now_s=run.stamps[-1])
    assert before.state is ScaleState.FITTED
    # the robot stops: odometry holds still, the model's pose jitters, time goes on
    rng = np.random.default_rng(seed)
    last, cam = run.odometry[-1], run.camera_model[-1]
    for k in range(1, 200):
        jitter = cam.copy()
        jitter[:3, 3] += rng.normal(scale=0.01 / scale, size=3)
        assert not est.add(0, run.stamps[-1] + 0.1 * k, jitter, last)
    now = run.stamps[-1] + 20.0
    after = est.estimate(now_s=now)
    assert after.state is ScaleState.STALE and after.scale == before.scale
    assert after.age_s(now) == pytest.approx(20.0, abs=1.0)
    # turning on the spot afterwards adds samples but cannot replace the value either way
    for k in range(40):
        turned = last @ rigid(rot_z(0.05 * (k + 1)), np.zeros(3))
        est.add(0, now + 0.1 * k, cam, turned)
    assert est.estimate().scale == pytest.approx(before.scale, rel=0.05)


@settings(max_examples=15, deadline=None)
@given(seeds, st.floats(0.2, 5.0), st.lists(st.floats(0.85, 1.15), min_size=2, max_size=4),
       st.floats(0.001, 0.01))
def test_windows_with_their_own_scales_make_one_continuous_metric_trajectory(
        seed, scale, drifts, noise):
    per_window = 90
    n = per_window * len(drifts)
    windows = np.repeat(np.arange(len(drifts)), per_window)
    run = robot_run(seed, scale, n=n, amplitude=2.0, noise_m=noise, windows=windows,
                    window_scales=scale * np.cumprod(drifts), duration_s=40.0 * len(drifts))
    est = OdometryScale(run.base_to_camera)
    metric = MetricFrame(est)
    for i in range(n):
        metric.observe(int(run.windows[i]), run.camera_model[i])
        est.add(int(run.windows[i]), float(run.stamps[i]), run.camera_model[i], run.odometry[i])
    for w, true in enumerate(run.window_scales):
        got = est.estimate(w)
        assert got.state is ScaleState.FITTED and got.fitted_window == w
        assert got.scale == pytest.approx(true, rel=0.03)
    out = np.stack([metric.pose(run.camera_model[i], int(run.windows[i])) for i in range(n)])
    truth = run.camera_metric
    np.testing.assert_allclose(out[:, :3, :3], truth[:, :3, :3], atol=1e-9)
    # metres everywhere, and no jump where windows meet: each step is the true step
    steps = np.linalg.norm(np.diff(out[:, :3, 3], axis=0), axis=-1)
    true_steps = np.linalg.norm(np.diff(truth[:, :3, 3], axis=0), axis=-1)
    np.testing.assert_allclose(steps, true_steps, rtol=0.03, atol=1e-6)
    # the whole trajectory lies on the truth up to the windows' fitted scale errors
    travelled = np.concatenate([[0.0], np.cumsum(true_steps)])
    err = np.linalg.norm(out[:, :3, 3] - truth[:, :3, 3], axis=-1)
    assert np.all(err <= 0.03 * (travelled + np.linalg.norm(truth[0, :3, 3])) + 1e-6)


def test_a_new_window_borrows_the_last_value_until_its_own_fit():
    run = robot_run(11, 1.7, n=200, windows=np.repeat([0, 1], 100), duration_s=100.0)
    est = OdometryScale(run.base_to_camera)
    feed(est, run, frames=range(100))
    feed(est, run, frames=range(100, 104))   # window 1 has barely begun
    got = est.estimate()
    assert got.window_index == 1 and got.state is ScaleState.STALE and got.fitted_window == 0
    assert got.scale == pytest.approx(1.7, rel=1e-6)
    feed(est, run, frames=range(104, 200))
    assert est.estimate().state is ScaleState.FITTED and est.estimate().fitted_window == 1
    # a sample of a window already left behind is refused and counted
    assert not est.add(0, 500.0, run.camera_model[0], run.odometry[0])
    assert est.rejected == 1
    assert not est.add(1, 501.0, np.full((4, 4), np.nan), run.odometry[0])
    assert est.rejected == 2


def test_buffer_is_bounded_and_reset_forgets():
    cfg = OdometryScaleConfig(max_samples=40)
    run = robot_run(5, 2.0, n=150)
    est = OdometryScale(run.base_to_camera, cfg)
    feed(est, run)
    assert est.buffered == 40 and est.estimate().state is ScaleState.FITTED
    est.reset()
    assert est.estimate().state is ScaleState.WAITING_FOR_MOTION and est.buffered == 0


@pytest.mark.parametrize('bad', [{'min_samples': 2}, {'max_samples': 5, 'min_samples': 6},
                                 {'max_relative_sigma': 0.0}, {'min_spread_m': -1.0},
                                 {'iterations': 0}])
def test_config_refuses_impossible_limits(bad):
    with pytest.raises(ValueError):
        replace(OdometryScaleConfig(), **bad)
    with pytest.raises(ValueError):
        OdometryScale(np.eye(3))


def covariance_at(run, frame: int) -> np.ndarray:
    est = OdometryScale(run.base_to_camera)
    metric = MetricFrame(est)
    feed(est, run)
    for i in range(len(run.stamps)):
        metric.observe(0, run.camera_model[i])
    return metric.pose_covariance(run.camera_model[frame], 0)


def test_pose_covariance_grows_with_the_residuals_and_is_never_zero():
    quiet = covariance_at(robot_run(21, 0.8, noise_m=0.003), 60)
    loud = covariance_at(robot_run(21, 0.8, noise_m=0.03), 60)
    exact = covariance_at(robot_run(21, 0.8), 60)
    for cov in (quiet, loud, exact):
        assert cov.shape == (6, 6)
        np.testing.assert_allclose(cov, cov.T, atol=1e-15)
        assert np.all(np.linalg.eigvalsh(cov) > 0)
    assert np.trace(loud[:3, :3]) > 20 * np.trace(quiet[:3, :3])
    assert np.trace(quiet[:3, :3]) > 2 * np.trace(exact[:3, :3])
    # the rotation block follows the orientation residuals
    turned = robot_run(21, 0.8, noise_rad=0.05)
    assert np.trace(covariance_at(turned, 60)[3:, 3:]) > 10 * np.trace(exact[3:, 3:])
    # and the position block grows with the distance from the window's anchor
    run = robot_run(21, 0.8, noise_m=0.01)
    near, far = covariance_at(run, 0), covariance_at(run, 119)
    d_far = np.linalg.norm(run.camera_metric[119, :3, 3] - run.camera_metric[0, :3, 3])
    if d_far > 0.5:
        assert np.trace(far[:3, :3]) > np.trace(near[:3, :3])
