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
Scale from a registered depth image: the robust ratio of sensor depth to the model's.

An RGB-D camera's depth registered to the colour image (metres; 0, NaN or inf where it
has none) and the model's depth of the same frame on the same pixels (model units, in
the map frame's units after the window's Sim(3)) differ by the scale wherever both are
right. Per frame the log of the ratio is taken over valid pixels in the sensor's range;
its median and MAD drop outliers (edges, glass, flying pixels), and the inliers' mean
is the frame's value. Per window the frames' values are pooled the same way; the
uncertainty is the spread between frames (pixels of one frame share their errors, so
their count says little about the frame's error).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
import math
from typing import Deque, NamedTuple, Optional, Tuple

from lingbot_ros.streaming.scale.estimate import (SavedBook, ScaleEstimate, ScaleSource,
                                                  ScaleState, WindowFit, WindowScales)
from lingbot_ros.streaming.scale.robust import MEDIAN_ABS_1D, OUTLIER_ABS_1D, robust_sigma
import numpy as np

# Relative spreads below this are treated as this (perfect data must not make every
# other value an outlier).
LOG_SPREAD_FLOOR = 1e-6


@dataclass(frozen=True)
class DepthScaleConfig:
    """
    Limits of the depth fit (metres, seconds).

    Sensor depths outside ``[min_depth_m, max_depth_m]`` are ignored (an RGB-D camera's
    readings are unreliable near and far); a frame needs ``min_pixels`` inliers, a
    window ``min_frames`` frames (at most ``max_frames`` kept, the oldest dropped) and a
    relative uncertainty under ``max_relative_sigma``.
    """

    min_depth_m: float = 0.2
    max_depth_m: float = 8.0
    min_pixels: int = 500
    max_frames: int = 300
    min_frames: int = 3
    max_relative_sigma: float = 0.03
    stale_after_s: float = 30.0

    def __post_init__(self) -> None:
        """Refuse limits that make no fit possible."""
        if not (0 < self.min_depth_m < self.max_depth_m and math.isfinite(self.max_depth_m)):
            raise ValueError(f'need 0 < min_depth_m < max_depth_m (finite), got '
                             f'{self.min_depth_m}, {self.max_depth_m}')
        if not (isinstance(self.min_frames, int) and isinstance(self.max_frames, int)
                and 1 <= self.min_frames <= self.max_frames):
            raise ValueError(f'need 1 <= min_frames <= max_frames (integers), got '
                             f'{self.min_frames}, {self.max_frames}')
        if not (isinstance(self.min_pixels, int) and self.min_pixels >= 1):
            raise ValueError(f'min_pixels must be a positive integer, got {self.min_pixels}')
        for name in ('max_relative_sigma', 'stale_after_s'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')


@dataclass(frozen=True)
class DepthRatio:
    """
    One frame's robust depth ratio.

    ``log_scale`` is the inliers' mean of ``log(sensor / model)``, ``sigma_log`` their
    standard deviation over the square root of their count, ``residual_rms_m`` the RMS
    of ``sensor - scale * model`` over them (metres).
    """

    log_scale: float
    sigma_log: float
    inliers: int
    valid: int
    residual_rms_m: float

    @property
    def scale(self) -> float:
        """Metres per model unit."""
        return math.exp(self.log_scale)


def frame_depth_ratio(sensor_depth_m: np.ndarray, model_depth: np.ndarray,
                      config: DepthScaleConfig = DepthScaleConfig()) -> Optional[DepthRatio]:
    """
    Robust ratio of a sensor depth image (metres) to the model's depth (model units).

    Both ``[H, W]`` on the same pixels (else a ValueError). Valid pixels: a finite
    sensor depth within the configured range and a finite positive model depth.
    None when fewer than ``config.min_pixels`` inliers remain.
    """
    sensor = np.asarray(sensor_depth_m, dtype=np.float64)
    model = np.asarray(model_depth, dtype=np.float64)
    if sensor.shape != model.shape:
        raise ValueError(f'sensor depth {sensor.shape} and model depth {model.shape} must be '
                         f'on the same pixels (register and resize the sensor image first)')
    with np.errstate(invalid='ignore'):
        ok = (np.isfinite(sensor) & np.isfinite(model) & (model > 0)
              & (sensor >= config.min_depth_m) & (sensor <= config.max_depth_m))
    valid = int(np.count_nonzero(ok))
    if valid < config.min_pixels:
        return None
    s, m = sensor[ok], model[ok]
    logs = np.log(s) - np.log(m)
    centre = float(np.median(logs))
    spread = robust_sigma(np.abs(logs - centre), MEDIAN_ABS_1D, LOG_SPREAD_FLOOR)
    inl = np.abs(logs - centre) <= OUTLIER_ABS_1D * spread
    n = int(np.count_nonzero(inl))
    if n < config.min_pixels:
        return None
    log_scale = float(np.mean(logs[inl]))
    resid = s[inl] - math.exp(log_scale) * m[inl]
    return DepthRatio(log_scale=log_scale, sigma_log=float(np.std(logs[inl])) / math.sqrt(n),
                      inliers=n, valid=valid, residual_rms_m=float(np.sqrt(np.mean(resid ** 2))))


def depth_on_grid(depth_m: np.ndarray, grid_hw: Tuple[int, int], patch_size: int) -> np.ndarray:
    """
    Resample a registered depth image (metres, ``[h, w]``) onto the model grid ``grid_hw``.

    The colour frames' own resize and crop (:func:`~lingbot_ros.streaming.preprocess.
    plan_transform`), with nearest-neighbour sampling so that a pixel without depth never
    blends into its neighbours. A depth image whose aspect ratio gives another grid than
    the colour image's is a ValueError that says so (register it to the colour image).
    """
    from lingbot_ros.streaming.preprocess import plan_transform  # torch: only when used
    import cv2
    metres = np.asarray(depth_m, dtype=np.float32)
    if metres.ndim != 2:
        raise ValueError(f'depth of shape {metres.shape}: expected one channel')
    grid = (int(grid_hw[0]), int(grid_hw[1]))
    plan = plan_transform(metres.shape, grid[1], patch_size)
    if plan.model_hw != grid:
        raise ValueError(f'a {metres.shape[1]}x{metres.shape[0]} depth image maps to a '
                         f'{plan.model_hw[1]}x{plan.model_hw[0]} grid, the colour images to '
                         f'{grid[1]}x{grid[0]}: register the depth to the colour images '
                         '(same aspect ratio)')
    h, w = plan.resized_hw
    resized = cv2.resize(metres, (w, h), interpolation=cv2.INTER_NEAREST)
    top = plan.offset_xy[1]
    return resized[top:top + grid[0]]


class _Frame(NamedTuple):
    stamp_s: float
    ratio: DepthRatio


@dataclass(frozen=True)
class SavedDepth:
    """
    A :class:`DepthScale` at one instant, whole: the book and the newest window's frames.

    ``stamps_s [n]`` and ``ratios`` (oldest first, at most ``max_frames``) are the frames
    the window's next refit pools with the next one.
    """

    book: SavedBook
    window: Optional[int]
    stamps_s: np.ndarray
    ratios: Tuple[DepthRatio, ...]
    rejected: int


class DepthScale:
    """
    Online depth scale per model window.

    Feed frames with :meth:`add` (a frame without enough valid depth is counted in
    :attr:`rejected`, not an error); ask :meth:`estimate`. Only the newest window keeps
    frames (at most ``config.max_frames`` ratios, three numbers each).
    """

    def __init__(self, config: DepthScaleConfig = DepthScaleConfig()) -> None:
        self._cfg = config
        self._book = WindowScales(ScaleSource.DEPTH, ScaleState.WAITING_FOR_DEPTH,
                                  config.stale_after_s)
        self._window: Optional[int] = None
        self._frames: Deque[_Frame] = deque(maxlen=config.max_frames)
        self.rejected = 0

    @property
    def config(self) -> DepthScaleConfig:
        return self._cfg

    @property
    def version(self) -> int:
        return self._book.version

    def add(self, window_index: int, stamp_s: float, sensor_depth_m: np.ndarray,
            model_depth: np.ndarray) -> bool:
        """
        Offer one frame's depth pair; refit the window. Return whether the frame was used.

        ``sensor_depth_m``: the registered sensor depth (metres); ``model_depth``: the
        model's depth of the frame of window ``window_index`` on the same pixels
        (model units); ``stamp_s``: the frame's stamp (s). A frame of an older window
        than the newest is rejected.
        """
        window_index = int(window_index)
        if not math.isfinite(stamp_s) or (self._window is not None
                                          and window_index < self._window):
            self.rejected += 1
            return False
        ratio = frame_depth_ratio(sensor_depth_m, model_depth, self._cfg)
        if window_index != self._window:
            self._window = window_index
            self._frames.clear()
        self._book.see(window_index)
        if ratio is None:
            self.rejected += 1
            return False
        self._frames.append(_Frame(float(stamp_s), ratio))
        self._refit()
        return True

    def _refit(self) -> None:
        cfg = self._cfg
        if len(self._frames) < cfg.min_frames:
            return
        logs = np.array([f.ratio.log_scale for f in self._frames])
        centre = float(np.median(logs))
        spread = robust_sigma(np.abs(logs - centre), MEDIAN_ABS_1D, LOG_SPREAD_FLOOR)
        inl = np.abs(logs - centre) <= OUTLIER_ABS_1D * spread
        n = int(np.count_nonzero(inl))
        if n < cfg.min_frames:
            return
        used = [f for f, keep in zip(self._frames, inl) if keep]
        log_scale = float(np.mean(logs[inl]))
        between = float(np.var(logs[inl], ddof=1)) if n > 1 else 0.0
        within = float(np.mean([f.ratio.sigma_log ** 2 for f in used]))
        sigma_log = math.sqrt((between + within) / n)
        scale = math.exp(log_scale)
        if sigma_log > cfg.max_relative_sigma:  # sigma / scale of exp(log) is sigma_log
            return
        rms = math.sqrt(float(np.mean([f.ratio.residual_rms_m ** 2 for f in used])))
        self._book.accept(self._window, WindowFit(
            scale=scale, sigma=scale * sigma_log, samples=n,
            stamp_s=max(f.stamp_s for f in used), residual_rms_m=rms))

    def estimate(self, window_index: Optional[int] = None,
                 now_s: Optional[float] = None) -> ScaleEstimate:
        """Return the scale window ``window_index`` (default: the newest) uses, at ``now_s``."""
        return self._book.estimate(window_index, now_s)

    def reset(self) -> None:
        """Forget everything: the stream restarted in a new map frame."""
        self._book.reset()
        self._window = None
        self._frames.clear()

    def export(self) -> SavedDepth:
        """Return a copy of the whole state (the estimator goes on)."""
        return SavedDepth(book=self._book.export(), window=self._window,
                          stamps_s=np.array([f.stamp_s for f in self._frames], dtype=np.float64),
                          ratios=tuple(f.ratio for f in self._frames), rejected=self.rejected)

    @classmethod
    def restored(cls, saved: SavedDepth,
                 config: DepthScaleConfig = DepthScaleConfig()) -> 'DepthScale':
        """
        Return an estimator that goes on exactly where ``saved`` stopped.

        More frames than ``config.max_frames``, or frames without a window, are a ValueError.
        """
        est = cls(config)
        n = len(saved.ratios)
        if saved.stamps_s.shape != (n,):
            raise ValueError(f'{saved.stamps_s.shape} depth frame stamps for {n} ratios')
        if n > config.max_frames:
            raise ValueError(f'{n} depth frames, more than max_frames ({config.max_frames})')
        if saved.window != saved.book.latest or (n and saved.window is None):
            raise ValueError(f'depth frames of window {saved.window}, the newest window is '
                             f'{saved.book.latest}')
        est._book.restore(saved.book)
        est._window = None if saved.window is None else int(saved.window)
        est._frames.extend(_Frame(float(t), r) for t, r in zip(saved.stamps_s, saved.ratios))
        est.rejected = int(saved.rejected)
        return est
