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
One metric frame across model windows: poses, points and depth in metres, and a pose covariance.

Each window ``w`` has its own scale ``s_w`` (metres per model unit) and an anchor:
``a_w``, the model position of the last frame observed before the window's first
frame (the frame the session's Sim(3) ties the new window to; for the first window,
its own first frame). A model point ``x`` of window ``w`` goes to::

    m(x) = s_w (x - a_w) + A_w,    A_0 = s_0 a_0,    A_w = s_v (a_w - a_v) + A_v

where ``v`` is the window observed before ``w``. ``A_w`` is the anchor's metric
position as the previous window places it, so where windows meet the metric
trajectory is continuous whatever the two scales are, and a frame is made metric with
its own window's scale. Rotations are untouched: the metric map frame has the model
map frame's axes and origin. The offsets are a pure function of the current scales,
so a refit moves later windows with it instead of tearing the trajectory apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Dict, List, Optional, Tuple

from lingbot_ros.streaming.scale.estimate import ScaleEstimate, ScaleEstimator
import numpy as np

# Floors of a published covariance's diagonal (m^2, rad^2): a fit can have (near) zero
# residuals, and a zero variance tells a filter to trust a pose absolutely.
POSITION_VARIANCE_FLOOR_M2 = 1e-6
ROTATION_VARIANCE_FLOOR_RAD2 = 1e-6


class FrameKind(Enum):
    """Where a camera's outputs are published (its track and map hold one kind only)."""

    WITHHELD = 'withheld until map -> odom is set'  # the map -> odom camera, before
    MODEL = 'model units'
    METRIC = 'metres'
    ANCHORED = 'metres, map anchored to odom'


@dataclass(frozen=True)
class SavedMetricFrame:
    """
    A :class:`MetricFrame`'s anchors at one instant (what its conversions rest on).

    ``windows`` in observation order with ``anchors [k, 3]`` (model units); ``last [3]``
    the newest observed camera position (None before any).
    """

    windows: Tuple[int, ...]
    anchors: np.ndarray
    last: Optional[np.ndarray]


class MetricFrame:
    """
    Turns model-unit poses, points and depth of window ``w`` into metres.

    Call :meth:`observe` with every frame's model pose, in stream order, before
    converting anything of its window: it records the windows' anchors. Without a
    scale (the estimator has none for any window) conversions return their input
    unchanged, in model units, and :meth:`is_metric` is False.
    """

    def __init__(self, estimator: ScaleEstimator) -> None:
        self._estimator = estimator
        self._clear()

    def _clear(self) -> None:
        self._anchors: Dict[int, np.ndarray] = {}   # window -> a_w (model units)
        self._order: List[int] = []                 # windows in observation order
        self._last: Optional[np.ndarray] = None     # newest observed camera position
        self._cache_key: Optional[tuple] = None
        self._offsets: Dict[int, np.ndarray] = {}   # window -> A_w - s_w a_w (metres)
        self._anchor_cov: Dict[int, np.ndarray] = {}  # window -> covariance of A_w (m^2)
        self._estimates: Dict[int, ScaleEstimate] = {}

    def observe(self, window_index: int, camera_in_map: np.ndarray) -> None:
        """Note a frame's model pose ``[4, 4]`` (camera-to-map, model units) of a window."""
        window_index = int(window_index)
        position = np.asarray(camera_in_map, dtype=np.float64)[:3, 3].copy()
        if not np.all(np.isfinite(position)):
            return
        if window_index not in self._anchors:
            self._anchors[window_index] = position if self._last is None else self._last
            self._order.append(window_index)
            self._cache_key = None
        self._last = position

    def reset(self) -> None:
        """Forget all anchors (a new map frame)."""
        self._clear()

    def export(self) -> SavedMetricFrame:
        """Return a copy of the anchors (the scales are the estimator's own to save)."""
        return SavedMetricFrame(
            windows=tuple(self._order),
            anchors=np.array([self._anchors[w] for w in self._order]).reshape(-1, 3),
            last=None if self._last is None else self._last.copy())

    def restore(self, saved: SavedMetricFrame) -> None:
        """Take saved anchors whole (with this frame's estimator); ValueError if they cannot be."""
        windows = [int(w) for w in saved.windows]
        anchors = np.asarray(saved.anchors, dtype=np.float64)
        if len(set(windows)) != len(windows) or anchors.shape != (len(windows), 3):
            raise ValueError(f'metric frame anchors {anchors.shape} for windows {windows}: '
                             'expected one position per distinct window')
        last = None if saved.last is None else np.asarray(saved.last, dtype=np.float64)
        if (last is None) != (not windows) or (last is not None and last.shape != (3,)):
            raise ValueError('a metric frame with windows needs its newest position, and only '
                             'then')
        if not (np.all(np.isfinite(anchors)) and (last is None or np.all(np.isfinite(last)))):
            raise ValueError('metric frame anchors are not finite')
        self._clear()
        self._order = windows
        self._anchors = {w: a.copy() for w, a in zip(windows, anchors)}
        self._last = None if last is None else last.copy()

    def _refresh(self) -> None:
        key = (self._estimator.version, len(self._order))
        if key == self._cache_key:
            return
        self._offsets.clear()
        self._anchor_cov.clear()
        self._estimates = {w: self._estimator.estimate(w) for w in self._order}
        if self._order and self._estimates[self._order[0]].has_scale:
            prev = None
            for w in self._order:
                est, a = self._estimates[w], self._anchors[w]
                if prev is None:
                    anchor_m, cov = est.scale * a, np.zeros((3, 3))
                else:
                    p_est, p_a = self._estimates[prev], self._anchors[prev]
                    d = a - p_a
                    anchor_m = p_est.scale * d + self._offsets[prev] + p_est.scale * p_a
                    cov = self._anchor_cov[prev] + p_est.sigma ** 2 * np.outer(d, d)
                self._offsets[w] = anchor_m - est.scale * a
                self._anchor_cov[w] = cov
                prev = w
        self._cache_key = key

    def _known(self, window_index: int) -> int:
        window_index = int(window_index)
        if window_index not in self._anchors:
            raise ValueError(f'window {window_index} has not been observed: call observe() with '
                             f'its frames first')
        return window_index

    def is_metric(self, window_index: int) -> bool:
        """Whether window ``window_index``'s outputs come out in metres."""
        self._refresh()
        return self._known(window_index) in self._offsets

    def scale(self, window_index: int) -> Optional[float]:
        """Metres per model unit for the window, or None (model units)."""
        self._refresh()
        w = self._known(window_index)
        return self._estimates[w].scale if w in self._offsets else None

    def pose(self, camera_in_map: np.ndarray, window_index: int) -> np.ndarray:
        """Return a camera-to-map pose ``[4, 4]`` of the window in metres (same rotation)."""
        out = np.array(camera_in_map, dtype=np.float64)
        out[:3, 3] = self.points(out[:3, 3], window_index)
        return out

    def points(self, points_model: np.ndarray, window_index: int) -> np.ndarray:
        """Map-frame points ``[..., 3]`` of the window (model units) in metres."""
        self._refresh()
        w = self._known(window_index)
        pts = np.asarray(points_model, dtype=np.float64)
        if w not in self._offsets:
            return pts.copy()
        return self._estimates[w].scale * pts + self._offsets[w]

    def depth(self, depth_model: np.ndarray, window_index: int) -> np.ndarray:
        """Depth (model units, any shape; NaN stays NaN) of the window in metres."""
        scale = self.scale(window_index)
        depth = np.asarray(depth_model)
        return depth.copy() if scale is None else depth * depth.dtype.type(scale)

    def pose_covariance(self, camera_in_map: np.ndarray,
                        window_index: int) -> Optional[np.ndarray]:
        """
        Covariance ``[6, 6]`` of the metric pose (x, y, z, rotations about x, y, z of the map).

        The position block adds the window fit's residual covariance (m^2), the scale's
        uncertainty along the way from the window's anchor, ``sigma_w^2 d d^T`` with
        ``d = x - a_w``, and the anchor's own, accumulated from earlier windows' scales
        the same way; the rotation block is the fit's orientation residuals (rad^2). A
        floor keeps the diagonal positive. None without a scale (model units).
        """
        self._refresh()
        w = self._known(window_index)
        if w not in self._offsets:
            return None
        est = self._estimates[w]
        d = np.asarray(camera_in_map, dtype=np.float64)[:3, 3] - self._anchors[w]
        out = np.zeros((6, 6))
        out[:3, :3] = (est.fit.position_cov_m2 + est.sigma ** 2 * np.outer(d, d)
                       + self._anchor_cov[w] + POSITION_VARIANCE_FLOOR_M2 * np.eye(3))
        out[3:, 3:] = est.fit.rotation_cov_rad2 + ROTATION_VARIANCE_FLOOR_RAD2 * np.eye(3)
        return out
