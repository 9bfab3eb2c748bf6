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
What a scale estimate is, the per-window bookkeeping every source shares, and the fixed source.

A scale is metres per model unit for one model window (the window's model units drift
a little from the last window's). A window holds the value of its own last accepted
fit; a window without one borrows the value of the nearest window that has one (the
closest earlier, else the closest later) and says so (``STALE``); with no fit anywhere
there is no scale (``WAITING_FOR_MOTION`` / ``WAITING_FOR_DEPTH``) and outputs stay in
model units. Nothing here invents a value.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from enum import Enum
import math
from typing import Dict, Optional, Protocol, Tuple

import numpy as np


class ScaleSource(str, Enum):
    """Where the metric scale comes from (the ``scale_source`` parameter's values)."""

    NONE = 'none'          # model units, no metric outputs
    ODOMETRY = 'odometry'  # the robot's odometry and the URDF's base -> camera transform
    DEPTH = 'depth'        # a registered depth image against the model's depth
    FIXED = 'fixed'        # a number given by the user


class ScaleState(Enum):
    """How trustworthy the scale a window uses is (what ``/diagnostics`` shows)."""

    WAITING_FOR_MOTION = 'waiting for motion'  # odometry: no window has an observable fit yet
    WAITING_FOR_DEPTH = 'waiting for depth'    # depth: no window has enough valid depth yet
    FITTED = 'fitted'                          # the window's own fit, recent enough
    STALE = 'stale'                            # kept: another window's value, or an old fit

    @property
    def has_scale(self) -> bool:
        return self in (ScaleState.FITTED, ScaleState.STALE)


def _zero3() -> np.ndarray:
    return np.zeros((3, 3))


@dataclass(frozen=True)
class WindowFit:
    """
    One window's accepted fit: the value and what it rests on.

    ``position_cov_m2`` is the covariance of a camera position's fit residual (m^2) and
    ``rotation_cov_rad2`` of its orientation residual (rad^2, about the map frame's
    axes), both in the map frame; zero where a source has no such residuals.
    """

    scale: float                   # metres per model unit
    sigma: float                   # standard uncertainty of ``scale``, metres per model unit
    samples: int                   # samples (frames) the fit used; outliers not counted
    stamp_s: Optional[float]       # sensor time (s) of the newest sample used; None: timeless
    residual_rms_m: float          # RMS of the inliers' residuals, metres (NaN: none)
    position_cov_m2: np.ndarray = field(default_factory=_zero3)
    rotation_cov_rad2: np.ndarray = field(default_factory=_zero3)

    @property
    def relative_sigma(self) -> float:
        return self.sigma / self.scale


@dataclass(frozen=True)
class ScaleEstimate:
    """
    The scale one window uses now, and why.

    ``fitted_window`` is the window whose fit gave the value (``window_index`` itself
    when its own; another when borrowed; None when there is none).
    """

    source: ScaleSource
    state: ScaleState
    window_index: int
    fitted_window: Optional[int] = None
    fit: Optional[WindowFit] = None

    @property
    def has_scale(self) -> bool:
        return self.fit is not None

    @property
    def scale(self) -> Optional[float]:
        """Metres per model unit, or None (keep model units)."""
        return None if self.fit is None else self.fit.scale

    @property
    def sigma(self) -> Optional[float]:
        """Return the standard uncertainty of :attr:`scale`, metres per model unit."""
        return None if self.fit is None else self.fit.sigma

    @property
    def samples(self) -> int:
        return 0 if self.fit is None else self.fit.samples

    @property
    def fit_stamp_s(self) -> Optional[float]:
        return None if self.fit is None else self.fit.stamp_s

    @property
    def residual_rms_m(self) -> float:
        return math.nan if self.fit is None else self.fit.residual_rms_m

    def age_s(self, now_s: float) -> Optional[float]:
        """Seconds since the fit's newest sample (None: no fit, or a timeless one)."""
        stamp = self.fit_stamp_s
        return None if stamp is None else float(now_s) - stamp


class ScaleEstimator(Protocol):
    """What :class:`~.metric.MetricFrame` and the callers need of any scale source."""

    @property
    def version(self) -> int:
        """Count of accepted fits so far: a cache of scales is stale when it changes."""

    def estimate(self, window_index: Optional[int] = None,
                 now_s: Optional[float] = None) -> ScaleEstimate:
        """Return the scale window ``window_index`` (default: the latest) uses, at ``now_s``."""


@dataclass(frozen=True)
class SavedBook:
    """
    A :class:`WindowScales` at one instant: every window's own fit, the newest window, the version.

    ``fits`` ascend by window; ``latest`` is None before any sample.
    """

    fits: Tuple[Tuple[int, WindowFit], ...]
    latest: Optional[int]
    version: int


def usable_fit(fit: WindowFit) -> bool:
    """Whether a fit's value can be a window's scale (finite, positive, finite uncertainty)."""
    return math.isfinite(fit.scale) and fit.scale > 0 and math.isfinite(fit.sigma)


class WindowScales:
    """
    Accepted fits per window and the rule that picks the value a window uses.

    One small :class:`WindowFit` per window that ever had an accepted fit; the samples
    behind it live in the source's own bounded buffer. ``stale_after_s``: a window's
    own fit whose newest sample is older than this (at the ``now_s`` a caller asks
    with) is reported ``STALE``; its value is still used (the model's scale within a
    window does not change while the robot stands still).
    """

    def __init__(self, source: ScaleSource, waiting: ScaleState, stale_after_s: float) -> None:
        if waiting.has_scale:
            raise ValueError(f'{waiting} is not a waiting state')
        if not stale_after_s > 0:
            raise ValueError(f'stale_after_s must be positive, got {stale_after_s}')
        self._source, self._waiting, self._stale_after_s = source, waiting, float(stale_after_s)
        self._fits: Dict[int, WindowFit] = {}
        self._fitted: list = []   # sorted window indices with a fit
        self._latest: Optional[int] = None
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    @property
    def latest_window(self) -> Optional[int]:
        """Return the newest window a sample was seen for."""
        return self._latest

    def see(self, window_index: int) -> None:
        """Note a sample of ``window_index`` (so the default window is the newest)."""
        if self._latest is None or window_index > self._latest:
            self._latest = int(window_index)

    def accept(self, window_index: int, fit: WindowFit) -> None:
        """Make ``fit`` window ``window_index``'s own value (replacing an older one)."""
        if not usable_fit(fit):
            raise ValueError(f'not a usable scale fit: {fit.scale} +- {fit.sigma}')
        window_index = int(window_index)
        if window_index not in self._fits:
            bisect.insort(self._fitted, window_index)
        self._fits[window_index] = fit
        self.see(window_index)
        self._version += 1

    def own_fit(self, window_index: int) -> Optional[WindowFit]:
        return self._fits.get(int(window_index))

    def estimate(self, window_index: Optional[int] = None,
                 now_s: Optional[float] = None) -> ScaleEstimate:
        """Return the value window ``window_index`` (default: the newest seen) uses."""
        if window_index is None:
            window_index = 0 if self._latest is None else self._latest
        window_index = int(window_index)
        own = self._fits.get(window_index)
        if own is not None:
            old = (now_s is not None and own.stamp_s is not None
                   and float(now_s) - own.stamp_s > self._stale_after_s)
            return ScaleEstimate(self._source, ScaleState.STALE if old else ScaleState.FITTED,
                                 window_index, window_index, own)
        if not self._fitted:
            return ScaleEstimate(self._source, self._waiting, window_index)
        at = bisect.bisect_left(self._fitted, window_index)
        donor = self._fitted[at - 1] if at > 0 else self._fitted[at]
        return ScaleEstimate(self._source, ScaleState.STALE, window_index, donor,
                             self._fits[donor])

    def reset(self) -> None:
        """Forget every window (a new map frame: the old scales mean nothing in it)."""
        self._fits.clear()
        self._fitted.clear()
        self._latest = None
        self._version += 1

    def export(self) -> SavedBook:
        """Return the book as it is now (the fits are frozen: shared, not copied)."""
        return SavedBook(fits=tuple((w, self._fits[w]) for w in self._fitted),
                         latest=self._latest, version=self._version)

    def restore(self, saved: SavedBook) -> None:
        """Take a saved book whole; ValueError (nothing changed) if it cannot be one."""
        windows = [int(w) for w, _ in saved.fits]
        if any(w < 0 for w in windows) or windows != sorted(set(windows)):
            raise ValueError(f'fitted windows {windows} are not distinct, ascending and >= 0')
        for w, fit in saved.fits:
            if not usable_fit(fit):
                raise ValueError(f'window {w} holds no usable scale: {fit.scale} +- {fit.sigma}')
        if windows and (saved.latest is None or saved.latest < windows[-1]):
            raise ValueError(f'newest window {saved.latest} is before fitted window {windows[-1]}')
        if saved.version < len(windows):
            raise ValueError(f'version {saved.version} counts fewer fits than the '
                             f'{len(windows)} windows hold')
        self._fits = {int(w): fit for w, fit in saved.fits}
        self._fitted = windows
        self._latest = None if saved.latest is None else int(saved.latest)
        self._version = int(saved.version)


class FixedScale:
    """The user's number: always ``FITTED``, zero uncertainty, the same for every window."""

    def __init__(self, scale: float) -> None:
        scale = float(scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f'a fixed scale must be a finite positive number '
                             f'(metres per model unit), got {scale}')
        self._fit = WindowFit(scale=scale, sigma=0.0, samples=0, stamp_s=None,
                              residual_rms_m=math.nan)

    @property
    def version(self) -> int:
        return 0

    def estimate(self, window_index: Optional[int] = None,
                 now_s: Optional[float] = None) -> ScaleEstimate:
        """Return the fixed number, for any window."""
        index = 0 if window_index is None else int(window_index)
        return ScaleEstimate(ScaleSource.FIXED, ScaleState.FITTED, index, index, self._fit)
