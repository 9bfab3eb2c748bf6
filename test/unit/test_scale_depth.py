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

"""The depth scale source against depth images that are the model's own times a known factor."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.scale.depth import DepthScale, DepthScaleConfig, frame_depth_ratio
from lingbot_ros.streaming.scale.estimate import ScaleSource, ScaleState
import numpy as np
import pytest

seeds = st.integers(0, 2 ** 31 - 1)
factors = st.floats(0.05, 20.0)         # metres per model unit


def model_depth(rng: np.random.Generator, factor: float, shape=(48, 64)) -> np.ndarray:
    """Return a smooth positive depth field (model units) whose metric range is 0.5-6 m."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    metric = 2.5 + 1.5 * np.sin(3 * xx + rng.uniform(0, 6)) * np.cos(2 * yy + rng.uniform(0, 6))
    metric += rng.uniform(-0.5, 0.5)
    return (metric / factor).astype(np.float32)


def sensor_depth(rng: np.random.Generator, model: np.ndarray, factor: float,
                 noise: float, invalid: float, outliers: float) -> tuple:
    """Return the model's depth times the factor with noise, holes and outliers; the holes."""
    out = model.astype(np.float64) * factor * (1 + rng.normal(scale=noise, size=model.shape))
    pick = rng.random(model.shape)
    holes = pick < invalid
    kinds = [0.0, np.nan, np.inf, -1.0, 50.0, 0.01]   # none, NaN, inf, negative, out of range
    out[holes] = rng.choice(kinds, size=int(holes.sum()))
    wild = (pick >= invalid) & (pick < invalid + outliers)
    out[wild] = rng.uniform(0.3, 7.5, size=int(wild.sum()))   # in range, unrelated
    return out.astype(np.float32), holes


@settings(max_examples=60, deadline=None)
@given(seeds, factors, st.floats(0.0, 0.03), st.floats(0.0, 0.4), st.floats(0.0, 0.2))
def test_one_frame_recovers_the_factor(seed, factor, noise, invalid, outliers):
    rng = np.random.default_rng(seed)
    model = model_depth(rng, factor)
    sensor, holes = sensor_depth(rng, model, factor, noise, invalid, outliers)
    got = frame_depth_ratio(sensor, model)
    assert got is not None
    assert got.scale == pytest.approx(factor, rel=0.003 + 0.1 * noise)
    assert got.valid == model.size - np.count_nonzero(holes)   # 0, NaN, inf, out of range
    assert got.inliers <= got.valid
    # the residual is about the noise, in metres (depths near 2.5 m)
    assert got.residual_rms_m <= 3.0 * 6 * noise + 1e-3


@settings(max_examples=20, deadline=None)
@given(seeds, factors, st.floats(0.001, 0.03), st.lists(st.floats(0.9, 1.1), min_size=1,
                                                        max_size=3))
def test_windows_recover_their_own_factor(seed, factor, noise, drifts):
    rng = np.random.default_rng(seed)
    est = DepthScale(DepthScaleConfig(min_frames=3))
    truth = factor * np.cumprod(drifts)
    stamp = 0.0
    for w, f in enumerate(truth):
        for k in range(6):
            model = model_depth(rng, f)
            stamp += 0.1
            assert est.add(w, stamp, sensor_depth(rng, model, f, noise, 0.2, 0.1)[0], model)
            got = est.estimate(w)
            if k < 2:   # under min_frames: the window borrows or waits
                assert got.state is (ScaleState.WAITING_FOR_DEPTH if w == 0 else ScaleState.STALE)
    for w, f in enumerate(truth):
        got = est.estimate(w, now_s=stamp)
        assert got.state is ScaleState.FITTED and got.source is ScaleSource.DEPTH
        assert got.scale == pytest.approx(f, rel=0.01)
        assert got.sigma > 0 and abs(got.scale - f) <= 6 * got.sigma + 1e-3 * f
        assert 3 <= got.samples <= 6   # frames used (one far from the rest may be dropped)


def test_a_frame_without_enough_valid_depth_is_rejected_not_fitted():
    rng = np.random.default_rng(1)
    model = model_depth(rng, 2.0)
    est = DepthScale()
    empty = np.zeros_like(model)
    assert frame_depth_ratio(empty, model) is None
    for k in range(5):
        assert not est.add(0, float(k), empty, model)
    assert est.rejected == 5
    nan_model = np.full_like(model, np.nan)
    assert not est.add(0, 6.0, model * 2.0, nan_model)
    got = est.estimate()
    assert got.state is ScaleState.WAITING_FOR_DEPTH and got.scale is None
    with pytest.raises(ValueError, match='same pixels'):
        est.add(0, 7.0, model[:10], model)


def test_inconsistent_frames_do_not_pass_as_a_fit():
    # frames that disagree by tens of percent: the spread between them is the uncertainty
    rng = np.random.default_rng(2)
    est = DepthScale(DepthScaleConfig(min_frames=3, max_relative_sigma=0.03))
    for k, f in enumerate([1.0, 1.5, 0.7, 1.3]):
        model = model_depth(rng, f)
        est.add(0, float(k), model * f, model * 1.0)
        model2 = model_depth(rng, 1.0)
        est.add(0, float(k) + 0.5, model2 * f, model2)
    assert est.estimate().state is ScaleState.WAITING_FOR_DEPTH


@pytest.mark.parametrize('bad', [{'min_depth_m': 0.0}, {'min_depth_m': 5.0, 'max_depth_m': 4.0},
                                 {'max_depth_m': np.inf}, {'min_frames': 0},
                                 {'min_pixels': 0}, {'max_relative_sigma': 0.0}])
def test_config_refuses_impossible_limits(bad):
    with pytest.raises(ValueError):
        DepthScaleConfig(**bad)
