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
Robust statistics shared by the scale fits: a noise scale from the median, Cauchy weights.

Gross outliers (a model pose that jumped, odometry that slipped, a depth pixel on a
window pane) must not move the fit, and the noise level is unknown, so each refit
measures it from the median residual and weights residuals with the redescending
Cauchy function (outliers far out get weights near zero).
"""

from __future__ import annotations

import numpy as np

# Median of the length of a 3-D standard normal vector (chi with 3 degrees of freedom):
# turns the median length of 3-D residuals into a per-axis standard deviation.
MEDIAN_NORM_3D = 1.5381722
# Median of |x| for a standard normal x (the MAD's consistency factor is its inverse).
MEDIAN_ABS_1D = 0.6744898
# Residuals this many (robust) standard deviations out get half weight.
CAUCHY_C = 3.0
# Beyond these many (per-axis) standard deviations a residual is an outlier, not a
# sample used: a scalar inlier lies beyond 3 with probability 0.3 %, the length of a
# 3-D one beyond 4 with probability 0.1 %.
OUTLIER_ABS_1D = 3.0
OUTLIER_NORM_3D = 4.0


def robust_sigma(abs_residuals: np.ndarray, median_of_unit: float, floor: float) -> float:
    """
    Estimate the inliers' standard deviation from the median of absolute residuals.

    ``median_of_unit`` is the median the same statistic has for unit-variance noise
    (:data:`MEDIAN_NORM_3D` for 3-D residual lengths, :data:`MEDIAN_ABS_1D` for scalars).
    ``floor`` keeps perfect data from giving zero, which would make every residual an
    outlier.
    """
    values = np.asarray(abs_residuals, dtype=np.float64)
    if values.size == 0:
        return float(floor)
    return max(float(np.median(values)) / median_of_unit, float(floor))


def cauchy_weights(normalised: np.ndarray, c: float = CAUCHY_C) -> np.ndarray:
    """IRLS weights ``1 / (1 + (u / c)^2)`` of residuals ``u`` in units of sigma."""
    u = np.asarray(normalised, dtype=np.float64) / c
    return 1.0 / (1.0 + u * u)
