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

"""Scale bookkeeping (own, borrowed, stale values), the fixed source and the metric frame."""

import math

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.scale.estimate import (FixedScale, ScaleSource, ScaleState,
                                                  WindowFit, WindowScales)
from lingbot_ros.streaming.scale.metric import (MetricFrame, POSITION_VARIANCE_FLOOR_M2,
                                                ROTATION_VARIANCE_FLOOR_RAD2)
import numpy as np
import pytest


def fit(scale: float, sigma: float = 0.0, stamp: float = 0.0) -> WindowFit:
    return WindowFit(scale=scale, sigma=sigma, samples=10, stamp_s=stamp, residual_rms_m=0.01)


def book(**scales) -> WindowScales:
    out = WindowScales(ScaleSource.ODOMETRY, ScaleState.WAITING_FOR_MOTION, stale_after_s=5.0)
    for name, value in scales.items():
        out.accept(int(name[1:]), fit(*value) if isinstance(value, tuple) else fit(value))
    return out


def test_windows_use_their_own_value_else_the_nearest_fitted_one():
    empty = book()
    got = empty.estimate(3)
    assert got.state is ScaleState.WAITING_FOR_MOTION and got.scale is None
    assert got.fitted_window is None and math.isnan(got.residual_rms_m) and got.age_s(9.0) is None
    scales = book(w2=2.0, w5=3.0)
    expected = {0: (2, ScaleState.STALE), 1: (2, ScaleState.STALE), 2: (2, ScaleState.FITTED),
                3: (2, ScaleState.STALE), 5: (5, ScaleState.FITTED), 9: (5, ScaleState.STALE)}
    for w, (donor, state) in expected.items():
        got = scales.estimate(w)
        assert (got.fitted_window, got.state, got.window_index) == (donor, state, w)
        assert got.scale == {2: 2.0, 5: 3.0}[donor]
    assert scales.estimate().window_index == 5 and scales.latest_window == 5


def test_an_own_fit_goes_stale_with_age_and_a_refit_freshens_it():
    scales = book(w0=(2.0, 0.01, 100.0))
    assert scales.estimate(0, now_s=104.0).state is ScaleState.FITTED
    old = scales.estimate(0, now_s=106.0)
    assert old.state is ScaleState.STALE and old.scale == 2.0 and old.age_s(106.0) == 6.0
    version = scales.version
    scales.accept(0, fit(2.1, 0.01, 105.0))
    assert scales.version == version + 1
    assert scales.estimate(0, now_s=106.0).state is ScaleState.FITTED
    scales.reset()
    assert scales.estimate(0).state is ScaleState.WAITING_FOR_MOTION


@pytest.mark.parametrize('value', [0.0, -1.0, math.nan, math.inf])
def test_unusable_values_are_refused(value):
    with pytest.raises(ValueError):
        book().accept(0, fit(value))
    with pytest.raises(ValueError):
        FixedScale(value)


def test_fixed_scale_is_always_fitted_without_uncertainty():
    fixed = FixedScale(0.25)
    for w in (None, 0, 7):
        got = fixed.estimate(w, now_s=1e9)
        assert got.state is ScaleState.FITTED and got.source is ScaleSource.FIXED
        assert (got.scale, got.sigma, got.age_s(1e9)) == (0.25, 0.0, None)


def positions_pose(position) -> np.ndarray:
    return rigid(np.eye(3), position)


def test_metric_frame_anchors_each_window_at_the_frame_before_it():
    scales = book(w0=2.0, w1=3.0)
    metric = MetricFrame(scales)
    track = [(0, [1.0, 0, 0]), (0, [2.0, 0, 0]), (1, [3.0, 0, 0]), (1, [4.0, 0, 0])]
    for w, p in track:
        metric.observe(w, positions_pose(p))
    got = [metric.pose(positions_pose(p), w)[:3, 3] for w, p in track]
    # window 0: 2 m per unit from the map origin; window 1 from frame 1 (2 units = 4 m)
    np.testing.assert_allclose(got, [[2, 0, 0], [4, 0, 0], [7, 0, 0], [10, 0, 0]])
    np.testing.assert_allclose(metric.points(np.array([[2.0, 1, 0], [2.0, 0, 1]]), 1),
                               [[4, 3, 0], [4, 0, 3]])
    depth = np.array([[1.0, np.nan]], dtype=np.float32)
    out = metric.depth(depth, 1)
    assert out.dtype == np.float32 and out[0, 0] == 3.0 and np.isnan(out[0, 1])
    assert metric.is_metric(1) and metric.scale(1) == 3.0
    # a refit of window 0 moves window 1 along with it: still continuous at the joint
    scales.accept(0, fit(1.0))
    np.testing.assert_allclose(metric.pose(positions_pose([3.0, 0, 0]), 1)[:3, 3], [5, 0, 0])
    with pytest.raises(ValueError, match='observe'):
        metric.points(np.zeros(3), 4)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=5), st.integers(0, 2 ** 31 - 1))
def test_metric_frame_is_continuous_and_uses_each_windows_scale(scales_list, seed):
    rng = np.random.default_rng(seed)
    scales = WindowScales(ScaleSource.FIXED, ScaleState.WAITING_FOR_MOTION, 1.0)
    for w, s in enumerate(scales_list):
        scales.accept(w, fit(s))
    metric = MetricFrame(scales)
    per = 10
    windows = np.repeat(np.arange(len(scales_list)), per)
    model = np.cumsum(rng.normal(size=(len(windows), 3)), axis=0)
    for w, p in zip(windows, model):
        metric.observe(int(w), positions_pose(p))
    out = np.stack([metric.points(p, int(w)) for w, p in zip(windows, model)])
    steps = np.diff(out, axis=0)
    model_steps = np.diff(model, axis=0)
    # every step, across joints too, is the model step times its later frame's window scale
    expected = model_steps * np.array(scales_list)[windows[1:], None]
    np.testing.assert_allclose(steps, expected, rtol=1e-9, atol=1e-9)


def test_without_a_scale_everything_stays_in_model_units():
    metric = MetricFrame(book())
    pose = rigid(np.eye(3), [1.0, 2.0, 3.0])
    metric.observe(0, pose)
    assert not metric.is_metric(0) and metric.scale(0) is None
    np.testing.assert_array_equal(metric.pose(pose, 0), pose)
    assert metric.pose_covariance(pose, 0) is None
    metric.reset()
    with pytest.raises(ValueError):
        metric.is_metric(0)


def test_covariance_adds_the_scale_uncertainty_along_the_way_from_the_anchor():
    scales = book(w0=(2.0, 0.1), w1=(2.0, 0.2))
    metric = MetricFrame(scales)
    for w, x in [(0, 0.0), (0, 5.0), (1, 6.0)]:
        metric.observe(w, positions_pose([x, 0, 0]))
    at_origin = metric.pose_covariance(positions_pose([0.0, 0, 0]), 0)
    np.testing.assert_allclose(np.diag(at_origin), [POSITION_VARIANCE_FLOOR_M2] * 3
                               + [ROTATION_VARIANCE_FLOOR_RAD2] * 3)
    far = metric.pose_covariance(positions_pose([4.0, 0, 0]), 0)
    assert far[0, 0] == pytest.approx(0.1 ** 2 * 16 + POSITION_VARIANCE_FLOOR_M2)
    assert far[1, 1] == pytest.approx(POSITION_VARIANCE_FLOOR_M2)
    # window 1 starts at frame x = 5 (0.1^2 * 25 from window 0) and adds its own
    later = metric.pose_covariance(positions_pose([7.0, 0, 0]), 1)
    assert later[0, 0] == pytest.approx(0.25 + 0.2 ** 2 * 4 + POSITION_VARIANCE_FLOOR_M2)
    assert fixed_covariance_is_positive()


def fixed_covariance_is_positive() -> bool:
    metric = MetricFrame(FixedScale(1.0))
    metric.observe(0, np.eye(4))
    return bool(np.all(np.linalg.eigvalsh(metric.pose_covariance(np.eye(4), 0)) > 0))
