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
The scale fit over a recorded run (what the replay tool's ``--odometry`` runs).

The frames are fed in stream order to the same online estimator the node uses; when
the run is over each frame takes its window's final value, so the outputs are in
metres with one scale per window and one metric frame (:class:`~.metric.MetricFrame`).
Where no window's fit is observable, every scale is NaN, the poses stay in model units
and :attr:`OfflineScale.message` says so: nothing is invented. A fit may start from a
saved scale (``start``: the replay tool's ``--resume``): the estimator and metric frame
then go on where the saved run left them, as if it had never stopped, and
:meth:`OfflineScale.saved` gives the state to save at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

from lingbot_ros.streaming.robot_frame import PairedOdometry
from lingbot_ros.streaming.scale.depth import DepthScale, DepthScaleConfig, SavedDepth
from lingbot_ros.streaming.scale.estimate import ScaleEstimate, ScaleSource, ScaleState
from lingbot_ros.streaming.scale.metric import FrameKind, MetricFrame
from lingbot_ros.streaming.scale.odometry import (OdometryScale, OdometryScaleConfig,
                                                  SavedOdometry)
from lingbot_ros.streaming.scale.saved import SavedScale
import numpy as np

Estimator = Union[OdometryScale, DepthScale]


@dataclass(frozen=True)
class OfflineScale:
    """
    A run's scales: per frame its window's, and the metric frame to convert its outputs.

    ``scales [N]`` (metres per model unit, NaN: none) and ``states`` follow the frames;
    ``windows`` holds one estimate per window of the run, ascending. ``metric_poses
    [N, 4, 4]`` are the camera-to-map poses in metres (model units where no scale);
    ``metric`` converts the run's points and depths (``metric.points(x, window)``).
    ``samples`` counts the frames offered to the fit (with odometry or depth);
    ``estimator`` is the fit's, as the last frame left it.
    """

    source: ScaleSource
    scales: np.ndarray
    states: Tuple[ScaleState, ...]
    windows: Tuple[ScaleEstimate, ...]
    metric: MetricFrame
    metric_poses: np.ndarray
    samples: int
    estimator: Estimator
    reason: str = ''

    def saved(self, epoch: int, metric: bool) -> SavedScale:
        """Return the fit's state to save with the stream (map ``epoch``; outputs in metres?)."""
        return SavedScale(source=self.source, drives=False, fixed_scale=None,
                          estimator=self.estimator.export(), metric=self.metric.export(),
                          anchor=None, epoch=int(epoch),
                          frame=FrameKind.METRIC if metric else FrameKind.MODEL)

    @property
    def observable(self) -> bool:
        """Whether any window got a scale (then every window has one)."""
        return bool(np.any(np.isfinite(self.scales)))

    @property
    def message(self) -> str:
        """One line for the user: the scales, or why the outputs keep model units."""
        if not self.observable:
            return f'no metric scale from {self.source.value}: {self.reason}; keeping model units'
        parts = [f'window {e.window_index}: {e.scale:.6g} +- {e.sigma:.2g} m/unit'
                 + ('' if e.state is ScaleState.FITTED else f' ({e.state.value}, from window '
                    f'{e.fitted_window})') for e in self.windows]
        return f'metric scale from {self.source.value}: ' + '; '.join(parts)


def _checked(stamps_s: Sequence[float], poses_c2w: np.ndarray,
             window_indices: Sequence[int], *others: Sequence) -> tuple:
    stamps = np.asarray(stamps_s, dtype=np.float64).reshape(-1)
    poses = np.asarray(poses_c2w, dtype=np.float64)
    windows = np.asarray(window_indices).reshape(-1).astype(np.int64)
    n = len(stamps)
    if poses.shape != (n, 4, 4) or len(windows) != n or any(len(o) != n for o in others):
        raise ValueError(f'need one stamp, one [4, 4] pose and one window index per frame (and '
                         f'one of each optional input): {n} stamps, poses {poses.shape}, '
                         f'{len(windows)} window indices, {[len(o) for o in others]} others')
    return stamps, poses, windows


def _result(source: ScaleSource, estimator: Estimator, metric: MetricFrame,
            poses: np.ndarray, windows: np.ndarray, samples: int, reason: str) -> OfflineScale:
    per_window = {int(w): estimator.estimate(int(w)) for w in np.unique(windows)}
    frame_est = [per_window[int(w)] for w in windows]
    scales = np.array([np.nan if e.scale is None else e.scale for e in frame_est])
    metric_poses = np.stack([metric.pose(p, int(w)) for p, w in zip(poses, windows)]) \
        if len(poses) else np.zeros((0, 4, 4))
    return OfflineScale(source=source, scales=scales, states=tuple(e.state for e in frame_est),
                        windows=tuple(per_window[w] for w in sorted(per_window)), metric=metric,
                        metric_poses=metric_poses, samples=samples, estimator=estimator,
                        reason=reason)


def _metric(estimator: Estimator, start: SavedScale) -> MetricFrame:
    """Return the metric frame of a restored estimator, with the saved anchors."""
    metric = MetricFrame(estimator)
    if start.metric is not None:
        metric.restore(start.metric)
    return metric


def fit_odometry_offline(stamps_s: Sequence[float], poses_c2w: np.ndarray,
                         window_indices: Sequence[int], odometry: PairedOdometry,
                         base_to_camera: np.ndarray,
                         config: OdometryScaleConfig = OdometryScaleConfig(),
                         start: Optional[SavedScale] = None) -> OfflineScale:
    """
    Fit each window's scale to the base's odometry paired with the frames.

    ``stamps_s [N]`` (s), ``poses_c2w [N, 4, 4]`` (the model's camera-to-map, model
    units) and ``window_indices [N]`` of one map frame, in stream order; ``odometry``
    from :func:`~lingbot_ros.streaming.robot_frame.read_base_trajectory` for the same
    stamps; ``base_to_camera [4, 4]`` the camera's pose in ``base_frame`` (metres).
    ``start``: a saved odometry scale of the same map to go on from (its own lever arm;
    a ValueError if it cannot be restored).
    """
    stamps, poses, windows = _checked(stamps_s, poses_c2w, window_indices, odometry.paired)
    if start is not None and isinstance(start.estimator, SavedOdometry):
        estimator = OdometryScale.restored(start.estimator, config)
        metric = _metric(estimator, start)
    else:
        estimator = OdometryScale(base_to_camera, config)
        metric = MetricFrame(estimator)
    for i in range(len(stamps)):
        metric.observe(int(windows[i]), poses[i])
        if odometry.paired[i]:
            estimator.add(int(windows[i]), float(stamps[i]), poses[i], odometry.base_in_odom[i])
    samples = odometry.count
    reason = ("no frame lies within the odometry's time span" if samples == 0 else
              f'the odometry does not make it observable ({estimator.verdict.value})')
    return _result(ScaleSource.ODOMETRY, estimator, metric, poses, windows, samples, reason)


def fit_depth_offline(stamps_s: Sequence[float], poses_c2w: np.ndarray,
                      window_indices: Sequence[int],
                      model_depths: Sequence[Optional[np.ndarray]],
                      sensor_depths_m: Sequence[Optional[np.ndarray]],
                      config: DepthScaleConfig = DepthScaleConfig(),
                      start: Optional[SavedScale] = None) -> OfflineScale:
    """
    Fit each window's scale to a depth sensor's images of the frames.

    As :func:`fit_odometry_offline`, with per frame the model's depth (model units) and
    the registered sensor depth (metres) on the same pixels; None where a frame has none.
    """
    stamps, poses, windows = _checked(stamps_s, poses_c2w, window_indices, model_depths,
                                      sensor_depths_m)
    if start is not None and isinstance(start.estimator, SavedDepth):
        estimator = DepthScale.restored(start.estimator, config)
        metric = _metric(estimator, start)
    else:
        estimator = DepthScale(config)
        metric = MetricFrame(estimator)
    samples = 0
    for i in range(len(stamps)):
        metric.observe(int(windows[i]), poses[i])
        if model_depths[i] is not None and sensor_depths_m[i] is not None:
            samples += 1
            estimator.add(int(windows[i]), float(stamps[i]), sensor_depths_m[i], model_depths[i])
    reason = (f'too little valid depth ({samples - estimator.rejected} of {samples} frames '
              f'usable, {config.min_frames} needed per window)')
    return _result(ScaleSource.DEPTH, estimator, metric, poses, windows, samples, reason)
