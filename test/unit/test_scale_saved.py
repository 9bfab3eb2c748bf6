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
A saved scale, restored, goes on exactly as the estimator that was never stopped.

The reference is the estimator itself, run without a stop: a copy exported at frame k,
encoded, decoded and restored into fresh objects, then fed the same later samples, must
give bit-identical estimates and metric conversions at every later frame.
"""

from dataclasses import replace
import json

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.scale.depth import DepthScale, DepthScaleConfig
from lingbot_ros.streaming.scale.estimate import (FixedScale, SavedBook, ScaleSource, WindowFit,
                                                  WindowScales)
from lingbot_ros.streaming.scale.metric import FrameKind, MetricFrame
from lingbot_ros.streaming.scale.odometry import OdometryScale, OdometryScaleConfig
from lingbot_ros.streaming.scale.saved import decode, encode, SavedScale
import numpy as np
import pytest
from synthetic_robot import robot_run
from test_scale_depth import model_depth, sensor_depth

seeds = st.integers(0, 2 ** 31 - 1)


def through_a_file(saved: SavedScale) -> SavedScale:
    """Encode, take the header through JSON text (as the file does), decode."""
    arrays, header = encode(saved)
    return decode({k: np.array(v) for k, v in arrays.items()}, json.loads(json.dumps(header)))


def saved_of(est, metric: MetricFrame, source: ScaleSource) -> SavedScale:
    return SavedScale(source=source, drives=False, fixed_scale=None, estimator=est.export(),
                      metric=metric.export(), anchor=None, epoch=0, frame=FrameKind.METRIC)


def assert_same(ref, got, windows: int, now_s: float) -> None:
    """Every window's estimate, now and timeless, is the same to the bit."""
    assert ref.version == got.version
    for w in range(windows):
        for now in (None, now_s):
            a, b = ref.estimate(w, now), got.estimate(w, now)
            assert (a.state, a.fitted_window, a.window_index) == \
                (b.state, b.fitted_window, b.window_index)
            assert (a.fit is None) == (b.fit is None)
            if a.fit is not None:
                for name in ('scale', 'sigma', 'samples', 'stamp_s', 'residual_rms_m'):
                    assert getattr(a.fit, name) == getattr(b.fit, name), name
                np.testing.assert_array_equal(a.fit.position_cov_m2, b.fit.position_cov_m2)
                np.testing.assert_array_equal(a.fit.rotation_cov_rad2, b.fit.rotation_cov_rad2)
    assert ref.estimate().window_index == got.estimate().window_index


def assert_same_metric(ref: MetricFrame, got: MetricFrame, pose: np.ndarray, w: int) -> None:
    assert ref.is_metric(w) == got.is_metric(w) and ref.scale(w) == got.scale(w)
    np.testing.assert_array_equal(ref.pose(pose, w), got.pose(pose, w))
    np.testing.assert_array_equal(ref.points(np.ones((2, 3)), w), got.points(np.ones((2, 3)), w))
    a, b = ref.pose_covariance(pose, w), got.pose_covariance(pose, w)
    assert (a is None) == (b is None)
    if a is not None:
        np.testing.assert_array_equal(a, b)


@settings(max_examples=20, deadline=None)
@given(seeds, st.floats(0.1, 10.0), st.floats(0.0, 0.02), st.floats(0.0, 1.0),
       st.sampled_from([14, 300]), st.integers(0, 3))
def test_a_restored_odometry_scale_goes_on_as_if_never_stopped(
        seed, scale, noise, cut, max_samples, new_windows):
    n = 100
    rng = np.random.default_rng(seed)
    starts = np.sort(rng.choice(np.arange(1, n), size=new_windows, replace=False))
    windows = np.searchsorted(starts, np.arange(n), side='right')
    drift = 1.0 + 0.1 * rng.uniform(-1.0, 1.0, new_windows + 1)
    run = robot_run(seed, scale, n=n, noise_m=noise, noise_rad=0.005, windows=windows,
                    window_scales=scale * drift, outlier_fraction=0.05)
    cfg = OdometryScaleConfig(max_samples=max_samples, min_samples=12)
    ref = OdometryScale(run.base_to_camera, cfg)
    ref_metric = MetricFrame(ref)
    k = int(cut * n)

    def step(est, metric, i):
        metric.observe(int(run.windows[i]), run.camera_model[i])
        est.add(int(run.windows[i]), float(run.stamps[i]), run.camera_model[i],
                run.odometry[i])
    for i in range(k):
        step(ref, ref_metric, i)
    saved = through_a_file(saved_of(ref, ref_metric, ScaleSource.ODOMETRY))
    got = OdometryScale.restored(saved.estimator, cfg)
    got_metric = MetricFrame(got)
    got_metric.restore(saved.metric)
    assert got.buffered == ref.buffered and got.verdict is ref.verdict
    for i in range(k, n):
        step(ref, ref_metric, i)
        step(got, got_metric, i)
        w = int(run.windows[i])
        assert_same(ref, got, w + 1, float(run.stamps[i]) + 40.0)
        assert (got.verdict, got.buffered, got.rejected) == \
            (ref.verdict, ref.buffered, ref.rejected)
        assert_same_metric(ref_metric, got_metric, run.camera_model[i], w)
    assert (ref.last_fit is None) == (got.last_fit is None)
    if ref.last_fit is not None:
        np.testing.assert_array_equal(ref.last_fit.rotation, got.last_fit.rotation)
        assert ref.last_fit.scale == got.last_fit.scale


@settings(max_examples=15, deadline=None)
@given(seeds, st.floats(0.1, 10.0), st.floats(0.001, 0.03), st.integers(0, 24),
       st.sampled_from([4, 300]))
def test_a_restored_depth_scale_goes_on_as_if_never_stopped(
        seed, factor, noise, k, max_frames):
    rng = np.random.default_rng(seed)
    n = 24
    windows = np.repeat(np.arange(3), n // 3)
    factors = factor * (1.0 + 0.1 * rng.uniform(-1.0, 1.0, 3))
    frames = []
    for i in range(n):
        f = factors[windows[i]]
        model = model_depth(rng, f)
        sensor = sensor_depth(rng, model, f, noise, 0.2, 0.05)[0] if i % 7 else \
            np.zeros_like(model)  # now and then a frame without depth: rejected, counted
        frames.append((int(windows[i]), 0.1 * i, sensor, model))
    cfg = DepthScaleConfig(max_frames=max_frames, min_frames=3)
    ref = DepthScale(cfg)
    for w, t, sensor, model in frames[:k]:
        ref.add(w, t, sensor, model)
    metric = MetricFrame(ref)  # the anchors: a metric frame of the same windows
    poses = [np.eye(4) for _ in range(n)]
    for i in range(k):
        poses[i][:3, 3] = rng.normal(size=3)
        metric.observe(frames[i][0], poses[i])
    saved = through_a_file(saved_of(ref, metric, ScaleSource.DEPTH))
    got = DepthScale.restored(saved.estimator, cfg)
    got_metric = MetricFrame(got)
    got_metric.restore(saved.metric)
    for i, (w, t, sensor, model) in enumerate(frames[k:], start=k):
        poses[i][:3, 3] = rng.normal(size=3)
        for est, m in ((ref, metric), (got, got_metric)):
            m.observe(w, poses[i])
            est.add(w, t, sensor, model)
        assert_same(ref, got, w + 1, t + 40.0)
        assert got.rejected == ref.rejected
        assert_same_metric(metric, got_metric, poses[i], w)


def test_a_fixed_scale_keeps_its_metric_frame():
    ref = MetricFrame(FixedScale(2.5))
    rng = np.random.default_rng(0)
    poses = [np.eye(4) for _ in range(6)]
    for i, p in enumerate(poses):
        p[:3, 3] = rng.normal(size=3)
        if i < 3:
            ref.observe(i // 2, p)
    saved = SavedScale(source=ScaleSource.FIXED, drives=False, fixed_scale=2.5, estimator=None,
                       metric=ref.export(), anchor=None, epoch=3, frame=FrameKind.METRIC)
    back = through_a_file(saved)
    assert (back.fixed_scale, back.epoch, back.frame) == (2.5, 3, FrameKind.METRIC)
    got = MetricFrame(FixedScale(2.5))
    got.restore(back.metric)
    for i, p in enumerate(poses[3:], start=3):
        for m in (ref, got):
            m.observe(i // 2, p)
        assert_same_metric(ref, got, p, i // 2)


# --- what a decode or a restore refuses ---------------------------------------------------

def _odometry_saved() -> SavedScale:
    run = robot_run(4, 1.3, n=60)
    est = OdometryScale(run.base_to_camera)
    metric = MetricFrame(est)
    for i in range(60):
        metric.observe(0, run.camera_model[i])
        est.add(0, float(run.stamps[i]), run.camera_model[i], run.odometry[i])
    assert est.estimate().has_scale
    anchor = np.eye(4)
    return replace(saved_of(est, metric, ScaleSource.ODOMETRY), drives=True, anchor=anchor,
                   frame=FrameKind.ANCHORED, base_previous=(7, np.eye(4)))


def test_every_part_comes_back_whole():
    saved = _odometry_saved()
    back = through_a_file(saved)
    assert back.base_previous[0] == 7 and back.drives and back.frame is FrameKind.ANCHORED
    np.testing.assert_array_equal(back.anchor, saved.anchor)
    a, b = saved.estimator, back.estimator
    for name in ('stamps_s', 'camera_in_map', 'camera_in_odom', 'base_in_odom',
                 'base_to_camera'):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.book.version == b.book.version and a.verdict is b.verdict
    np.testing.assert_array_equal(a.last_fit.weights, b.last_fit.weights)


def _broken(change):
    arrays, header = encode(_odometry_saved())
    header = json.loads(json.dumps(header))
    change(arrays, header)
    return arrays, header


def _nan(arrays, name):
    arrays[name] = arrays[name].copy()
    arrays[name].flat[0] = np.nan


@pytest.mark.parametrize('change, words', [
    (lambda a, h: a.pop('odometry.camera_in_odom'), 'array odometry.camera_in_odom is missing'),
    (lambda a, h: a.update({'anchor': np.eye(3)}), 'array anchor has shape (3, 3)'),
    (lambda a, h: _nan(a, 'odometry.base_in_odom'), 'odometry.base_in_odom holds a value that'),
    (lambda a, h: a.update({'book.windows': a['book.windows'].astype(np.float64)}),
     'array book.windows is float64, expected int64'),
    (lambda a, h: h['estimator'].update(verdict='BOGUS'), 'scale.estimator.verdict='),
    (lambda a, h: h.update(frame='METRIC'), "outputs 'metres' for a camera driving map -> odom"),
    (lambda a, h: h.update(source='fixed'), 'a fixed scale with a SavedOdometry estimator'),
    (lambda a, h: h.update(epoch=-1), 'header field scale.epoch=-1 is not allowed'),
    (lambda a, h: h.pop('drives'), 'header field scale.drives is missing'),
])
def test_a_broken_part_is_refused_in_one_line(change, words):
    arrays, header = _broken(change)
    with pytest.raises(ValueError) as err:
        decode(arrays, header)
    assert words in str(err.value) and '\n' not in str(err.value)


def test_a_restore_refuses_what_an_estimator_could_not_hold():
    saved = _odometry_saved().estimator
    with pytest.raises(ValueError, match='more than max_samples'):
        OdometryScale.restored(saved, OdometryScaleConfig(max_samples=20))
    with pytest.raises(ValueError, match='newest window'):
        OdometryScale.restored(replace(saved, window=5))
    book = WindowScales(ScaleSource.DEPTH, DepthScale().estimate().state, 30.0)
    fit = WindowFit(scale=1.0, sigma=0.01, samples=3, stamp_s=None, residual_rms_m=0.0)
    with pytest.raises(ValueError, match='ascending'):
        book.restore(SavedBook(fits=((2, fit), (1, fit)), latest=2, version=2))
    with pytest.raises(ValueError, match='no usable scale'):
        book.restore(SavedBook(fits=((0, replace(fit, scale=-1.0)),), latest=0, version=1))
    assert book.version == 0 and book.latest_window is None  # nothing changed
    metric = MetricFrame(FixedScale(1.0))
    with pytest.raises(ValueError, match='one position per distinct window'):
        metric.restore(replace(MetricFrame(FixedScale(1.0)).export(), windows=(0,)))
