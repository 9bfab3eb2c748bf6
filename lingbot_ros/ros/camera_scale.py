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
One camera's metric scale and published frame, fed on the output thread in stream order.

:class:`CameraScale` owns one camera's scale estimator (odometry, depth or fixed), its
:class:`~lingbot_ros.streaming.scale.metric.MetricFrame` and, for the camera that drives
``map -> odom``, the anchor of the published map frame. The output thread calls
:meth:`CameraScale.place` with every result, in the order the worker handed them over,
and gets back where that frame's outputs land (:class:`Placed`): that thread is the only
writer of all of it, so the GPU worker never waits for a fit. Diagnostics read the
frozen :class:`ScaleReport` each frame leaves behind.

The published frame (:class:`FrameKind`): model units as before a scale; metres in the
map convention's axes once a window has a scale; and for the camera driving
``publish_map_to_odom`` nothing in the map frame until the scale is there and the map
is anchored to ``odom`` at that moment (so ``map -> odom`` starts at the identity, as
slam_toolbox and rtabmap start it), then metres in that anchored frame. When the kind
changes the track and the map start over (:attr:`Placed.restarted`): no output mixes
units or frames.

:meth:`CameraScale.export` copies all of it (a
:class:`~lingbot_ros.streaming.scale.saved.SavedScale`, for ``~/save_state``, on the
output thread) and :meth:`CameraScale.restore` takes it back at configure, so that a
resumed camera places its next frame in the same frame and scale as if it had never
stopped; a state saved for another source or role is not taken.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import math
from typing import Callable, Optional, Protocol

from lingbot_ros.ros.conventions import map_from_optical
from lingbot_ros.ros.placement import Placement
from lingbot_ros.streaming.choices import MapConvention
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.robot_frame import base_pose, map_to_odom
from lingbot_ros.streaming.scale.depth import depth_on_grid, DepthScale, SavedDepth
from lingbot_ros.streaming.scale.estimate import (FixedScale, ScaleEstimate, ScaleSource,
                                                  ScaleState)
from lingbot_ros.streaming.scale.metric import FrameKind, MetricFrame
from lingbot_ros.streaming.scale.odometry import OdometryScale, SavedOdometry
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.trajectory import invert_rigid
import numpy as np

DEPTH_FIT_PIXELS = 20_000  # model-grid pixels a frame's depth ratio uses at most (a stride)
LEVER_TOLERANCE_M = 1e-6   # a base -> camera transform that moved less is the same one


__all__ = ['CameraScale', 'FrameInputs', 'FrameKind', 'Placed', 'ScaleReport']


class FrameInputs(Protocol):
    """What one frame's placement may ask for (each looked up once, when asked)."""

    def lever(self) -> Optional[np.ndarray]:
        """Return base_frame -> the camera (the camera's pose in the base, metres), or None."""

    def odometry(self) -> Optional[np.ndarray]:
        """Return the odometry's base pose in odom at the frame's stamp, or None."""

    def odom_base(self) -> Optional[np.ndarray]:
        """Return TF's odom_frame -> base_frame at the frame's stamp, or None."""

    def depth(self) -> Optional[np.ndarray]:
        """Return the registered sensor image (metres) paired with the frame, or None."""


@dataclass(frozen=True)
class ScaleReport:
    """What /diagnostics says about one camera's scale (replaced whole, never changed)."""

    source: str = ScaleSource.NONE.value
    state: str = 'none'           # a ScaleState's text, 'none' or 'unavailable'
    units: str = 'model'          # of the outputs now: 'metre' or 'model'
    frame: str = FrameKind.MODEL.value
    scale: Optional[float] = None
    sigma: Optional[float] = None
    age_s: Optional[float] = None  # stream time since the fit's newest sample
    window: int = 0
    fitted_window: Optional[int] = None
    samples: int = 0
    residual_rms_m: float = math.nan
    note: str = ''                # why there is no (new) fit, or why the source is unavailable
    base: str = 'not needed'      # 'known', 'unknown: <reason>' or 'not needed'
    map_to_odom: str = 'off'
    inputs_missing: int = 0       # frames without the source's input (odometry, depth)
    inputs_rejected: int = 0      # inputs that could not be used (depth of another size)

    @property
    def unavailable(self) -> bool:
        return self.state == 'unavailable'


@dataclass(frozen=True)
class Placed:
    """
    Where one frame's outputs go.

    ``placement`` None: withheld (nothing in the map frame). ``result``: depth and point
    rows in the published units. ``covariance [6, 6]``: the metric pose's, in the
    published axes (None: the stated one). ``odom_in_map``: the ``map -> odom`` to
    broadcast with this frame (the driving camera, anchored, odometry at the stamp).
    """

    result: FrameResult
    placement: Optional[Placement]
    pose: Optional[np.ndarray] = None
    covariance: Optional[np.ndarray] = None
    restarted: bool = False
    base_pose: Optional[np.ndarray] = None
    base_covariance: Optional[np.ndarray] = None
    odom_in_map: Optional[np.ndarray] = None
    drives_map_to_odom: bool = False

    @property
    def withheld(self) -> bool:
        return self.placement is None

    def twist_diagonal(self, diagonal: tuple) -> tuple:
        """Return the stated twist covariance diagonal in the published units ((m/s)^2)."""
        if self.placement is None or not self.placement.metric:
            return tuple(diagonal)
        s2 = self.placement.scale ** 2
        return tuple(v * s2 for v in diagonal[:3]) + tuple(diagonal[3:])


Say = Callable[[bool, str], None]  # (warning?, text): one log line


class CameraScale:
    """
    One camera's scale, metric frame and published frame; written by the output thread.

    ``source``: the scale source; ``unavailable``: why it cannot run here ('' if it can);
    ``drives``: this camera's poses drive ``map -> odom``; ``patch_size``: the model's
    (to put a depth image on the model grid); ``say``: the node's log, for changes only.
    """

    def __init__(self, source: ScaleSource, convention: MapConvention, say: Say,
                 fixed_scale: float = 1.0, unavailable: str = '', drives: bool = False,
                 patch_size: int = 14, map_to_odom: str = 'off') -> None:
        self.source = source
        self._unavailable = unavailable
        self._drives = drives
        self._convention = map_from_optical(convention)
        self._patch = int(patch_size)
        self._say = say
        self._fixed = float(fixed_scale)
        self._map_to_odom = 'waiting for the scale' if drives else map_to_odom
        self.report = ScaleReport(source=source.value, state=self._first_state(),
                                  note=unavailable, map_to_odom=self._map_to_odom)
        self._clear()

    def _first_state(self) -> str:
        """Return the state before any frame: the source's waiting state (or none / fitted)."""
        if self._unavailable:
            return 'unavailable'
        return {ScaleSource.ODOMETRY: ScaleState.WAITING_FOR_MOTION.value,
                ScaleSource.DEPTH: ScaleState.WAITING_FOR_DEPTH.value,
                ScaleSource.FIXED: ScaleState.FITTED.value}.get(self.source, 'none')

    def _clear(self) -> None:
        """Forget the map's scale and frame (a new map of the session, a reset)."""
        self._estimator = None
        self._lever: Optional[np.ndarray] = None
        src = None if self._unavailable else self.source
        if src is ScaleSource.FIXED:
            self._estimator = FixedScale(self._fixed)
        elif src is ScaleSource.DEPTH:
            self._estimator = DepthScale()
        self._metric = MetricFrame(self._estimator) if self._estimator is not None else None
        self._epoch: Optional[int] = None
        self._kind: Optional[FrameKind] = None
        self._anchor: Optional[np.ndarray] = None
        self._state = ''
        self._missing = self._rejected = 0
        self._note = self._unavailable
        self.base_previous: Optional[tuple] = None  # (stamp_ns, base pose) last published

    def restart(self) -> None:
        """Start over: the session began a new map (its old scale means nothing in it)."""
        self._clear()

    # --- save and resume -------------------------------------------------------------

    def export(self) -> Optional[SavedScale]:
        """
        Copy the scale, metric frame, anchor and published frame (on the output thread).

        None without a source, or before a frame of the current map was placed (a camera
        resumed from nothing starts the same way).
        """
        if self.source is ScaleSource.NONE or self._epoch is None or self._kind is None:
            return None
        est, prev = self._estimator, self.base_previous
        return SavedScale(
            source=self.source, drives=self._drives,
            fixed_scale=self._fixed if self.source is ScaleSource.FIXED else None,
            estimator=est.export() if isinstance(est, (OdometryScale, DepthScale)) else None,
            metric=None if self._metric is None else self._metric.export(),
            anchor=None if self._anchor is None else self._anchor.copy(),
            epoch=self._epoch, frame=self._kind, inputs_missing=self._missing,
            inputs_rejected=self._rejected,
            base_previous=None if prev is None else (int(prev[0]), np.array(prev[1])))

    def restore(self, saved: SavedScale) -> Optional[str]:
        """
        Go on from a saved scale (configure, before any thread runs); say why not, if not.

        Not taken (the camera keeps its fresh scale) when it was saved for another
        ``scale_source``, another ``fixed_scale``, the other role towards ``map -> odom``,
        or where the source cannot run here.
        """
        why = self._misfit(saved)
        if why is not None:
            return why
        estimator: object = None
        try:
            if isinstance(saved.estimator, SavedOdometry):
                estimator = OdometryScale.restored(saved.estimator)
            elif isinstance(saved.estimator, SavedDepth):
                estimator = DepthScale.restored(saved.estimator)
            elif self.source is ScaleSource.FIXED:
                estimator = FixedScale(self._fixed)
            metric = None if estimator is None else MetricFrame(estimator)
            if metric is not None and saved.metric is not None:
                metric.restore(saved.metric)
        except ValueError as exc:
            return f'the saved scale does not fit this camera: {exc}'
        self._clear()
        self._estimator, self._metric = estimator, metric
        if isinstance(saved.estimator, SavedOdometry):
            self._lever = saved.estimator.base_to_camera.copy()
        self._anchor = None if saved.anchor is None else saved.anchor.copy()
        self._epoch, self._kind = saved.epoch, saved.frame
        self._missing, self._rejected = saved.inputs_missing, saved.inputs_rejected
        prev = saved.base_previous
        self.base_previous = None if prev is None else (prev[0], prev[1].copy())
        est = None if estimator is None else estimator.estimate()
        self._state = self._first_state() if est is None else est.state.value
        self.report = replace(
            self.report, state=self._state, frame=saved.frame.value,
            units='metre' if saved.frame in (FrameKind.METRIC, FrameKind.ANCHORED) else 'model',
            scale=None if est is None else est.scale, sigma=None if est is None else est.sigma,
            window=0 if est is None else est.window_index,
            fitted_window=None if est is None else est.fitted_window,
            samples=0 if est is None else est.samples,
            residual_rms_m=math.nan if est is None else est.residual_rms_m,
            inputs_missing=self._missing, inputs_rejected=self._rejected)
        return None

    def _misfit(self, saved: SavedScale) -> Optional[str]:
        """Say why a saved scale cannot be this camera's (None: it can)."""
        if saved.source is not self.source:
            return (f'saved with scale_source {saved.source.value}, '
                    f'{self.source.value} here')
        if saved.drives != self._drives:
            return ('saved by the camera driving map -> odom, this one does not drive it'
                    if saved.drives else 'saved by a camera not driving map -> odom, this one '
                    'drives it')
        if self._unavailable:
            return f'scale_source {self.source.value} is unavailable here: {self._unavailable}'
        if self.source is ScaleSource.FIXED and saved.fixed_scale != self._fixed:
            return f'saved with fixed_scale {saved.fixed_scale:g}, {self._fixed:g} here'
        return None

    def assume_published(self, kind: FrameKind) -> None:
        """
        Say what the camera's restored track and map are in (a resume, before any frame).

        A frame placed in another kind starts them over, as it would in a running camera.
        """
        self._kind = kind

    # --- per frame -------------------------------------------------------------------

    def place(self, result: FrameResult, inputs: FrameInputs, needs_lever: bool = False,
              base_status_of: Callable[[], str] = lambda: 'not needed') -> Placed:
        """
        Feed one result (stream order) and say where its outputs land.

        ``needs_lever``: base_frame -> camera is wanted besides what the source and map ->
        odom need (~/base_odom); ``base_status_of``: says whether it is known, for the report.
        """
        if self._epoch is not None and result.map_epoch != self._epoch:
            self._clear()
        self._epoch = result.map_epoch
        w, pose = int(result.window_index), result.pose_c2w
        wanted = needs_lever or self._drives or (self.source is ScaleSource.ODOMETRY
                                                 and not self._unavailable)
        lever = inputs.lever() if wanted else None
        self._follow_lever(lever)
        if self._metric is not None:
            self._metric.observe(w, pose)
        self._feed(result, inputs, lever)
        metric = self._metric is not None and self._metric.is_metric(w)
        kind = self._frame_kind(metric, result, inputs, lever)
        restarted = self._kind is not None and kind is not self._kind
        if restarted:
            self.base_previous = None  # its twist would cross two frames
        if restarted or self._kind is None:
            self._say(False, f'outputs: {kind.value}' + (
                ' (the track and the map start over)' if restarted else ''))
        self._kind = kind
        placed = self._placed(result, kind, metric, lever, inputs, restarted)
        self._report(result, kind, base_status_of() if wanted else 'not needed', placed)
        return placed

    def _follow_lever(self, lever: Optional[np.ndarray]) -> None:
        """Odometry: an estimator per base -> camera transform (it is part of the fit)."""
        if self.source is not ScaleSource.ODOMETRY or self._unavailable or lever is None:
            return
        if self._lever is not None and np.allclose(lever, self._lever, atol=LEVER_TOLERANCE_M):
            return
        if self._lever is not None:
            self._say(True, 'base_frame -> camera changed: the odometry scale starts over')
        self._anchor = None  # it was set in the old metric frame
        self._lever = np.array(lever)
        self._estimator = OdometryScale(self._lever)
        self._metric = MetricFrame(self._estimator)

    def _feed(self, result: FrameResult, inputs: FrameInputs,
              lever: Optional[np.ndarray]) -> None:
        est, w, t = self._estimator, int(result.window_index), result.stamp_ns * 1e-9
        if isinstance(est, OdometryScale):
            base = inputs.odometry()
            if base is None:
                self._missing += 1
                return
            est.add(w, t, result.pose_c2w, base)
        elif isinstance(est, DepthScale):
            sensor = inputs.depth()
            if sensor is None or result.depth is None:
                self._missing += 1
                return
            try:
                grid = depth_on_grid(sensor, result.model_hw, self._patch)
            except ValueError as exc:
                self._rejected += 1
                self._note = str(exc)
                return
            step = max(1, int(math.sqrt(grid.size / DEPTH_FIT_PIXELS)))
            if not est.add(w, t, grid[::step, ::step], result.depth[::step, ::step]):
                self._rejected += 1

    def _frame_kind(self, metric: bool, result: FrameResult, inputs: FrameInputs,
                    lever: Optional[np.ndarray]) -> FrameKind:
        if not self._drives:
            return FrameKind.METRIC if metric else FrameKind.MODEL
        if not metric:
            return FrameKind.WITHHELD
        if self._anchor is None and lever is not None:
            odom_base = inputs.odom_base()
            if odom_base is not None:  # map := odom now: map -> odom starts at the identity
                w = int(result.window_index)
                base_in_metric = self._metric.pose(result.pose_c2w, w) @ invert_rigid(lever)
                self._anchor = odom_base @ invert_rigid(base_in_metric)
        return FrameKind.WITHHELD if self._anchor is None else FrameKind.ANCHORED

    def _placement(self, kind: FrameKind, w: int) -> Optional[Placement]:
        if kind is FrameKind.WITHHELD:
            return None
        if kind is FrameKind.MODEL:
            return Placement.model_units(self._convention)
        frame = self._convention if kind is FrameKind.METRIC else self._anchor
        offset = self._metric.points(np.zeros(3), w)
        return Placement(frame=frame, scale=float(self._metric.scale(w)), offset=offset,
                         metric=True, rows_axes=self._convention[:3, :3])

    def _placed(self, result: FrameResult, kind: FrameKind, metric: bool,
                lever: Optional[np.ndarray], inputs: FrameInputs, restarted: bool) -> Placed:
        w = int(result.window_index)
        placement = self._placement(kind, w)
        if placement is None:
            return Placed(result=result, placement=None, restarted=restarted,
                          drives_map_to_odom=self._drives)
        pose = placement.pose(result.pose_c2w)
        out = Placed(result=placement.result(result), placement=placement, pose=pose,
                     restarted=restarted, drives_map_to_odom=self._drives)
        if not metric:
            return out
        cov = placement.covariance(self._metric.pose_covariance(result.pose_c2w, w))
        base = base_cov = odom_in_map = None
        if lever is not None:
            base = pose @ invert_rigid(lever)
            model_base = base_pose(result.pose_c2w, lever, placement.scale)
            base_cov = placement.covariance(self._metric.pose_covariance(model_base, w))
            if kind is FrameKind.ANCHORED:
                odom_base = inputs.odom_base()
                if odom_base is not None:
                    odom_in_map = map_to_odom(base, odom_base)
        return Placed(result=out.result, placement=placement, pose=pose, covariance=cov,
                      restarted=restarted, base_pose=base, base_covariance=base_cov,
                      odom_in_map=odom_in_map, drives_map_to_odom=self._drives)

    # --- what diagnostics read -------------------------------------------------------

    def _estimate(self, result: FrameResult) -> Optional[ScaleEstimate]:
        if self._estimator is None:
            return None
        return self._estimator.estimate(int(result.window_index), result.stamp_ns * 1e-9)

    def _why(self, est: Optional[ScaleEstimate], base_status: str) -> str:
        """Say why the newest window has no (new) fit, or what the fit rests on."""
        source = self.source
        if self._unavailable or source in (ScaleSource.NONE, ScaleSource.FIXED):
            return self._note
        if source is ScaleSource.ODOMETRY and self._estimator is None:
            return f'waiting for base_frame -> camera ({base_status})'
        if self._missing and (est is None or not est.has_scale):
            what = ('odometry at the image stamps (TF odom_frame -> base_frame, or '
                    'odometry_topic)' if source is ScaleSource.ODOMETRY else
                    'depth image paired with the frames (depth_topics)')
            return f'no {what} for {self._missing} frame(s)'
        if isinstance(self._estimator, OdometryScale):
            return self._estimator.verdict.value
        return self._note

    def _report(self, result: FrameResult, kind: FrameKind, base_status: str,
                placed: Placed) -> None:
        est = self._estimate(result)
        note = self._why(est, base_status)
        state = self._first_state() if est is None else est.state.value
        if state != self._state:
            scale = '' if est is None or est.scale is None else \
                f': {est.scale:.6g} +- {est.sigma:.2g} m per model unit'
            why = f' ({note})' if note and state != 'fitted' else ''
            self._say(state in ('stale', 'unavailable'),
                      f'scale from {self.source.value} {state}{scale}{why}')
            self._state = state
        m2o = self._map_to_odom
        if self._drives:
            m2o = ('broadcast' if placed.odom_in_map is not None else
                   'waiting for the scale' if est is None or not est.has_scale else
                   f'waiting for base_frame -> camera ({base_status})'
                   if base_status != 'known' else
                   'waiting for odom_frame -> base_frame on TF at an image stamp')
        self.report = ScaleReport(
            source=self.source.value, state=state,
            units='metre' if placed.placement is not None and placed.placement.metric
            else 'model', frame=kind.value,
            scale=None if est is None else est.scale, sigma=None if est is None else est.sigma,
            age_s=None if est is None else est.age_s(result.stamp_ns * 1e-9),
            window=int(result.window_index),
            fitted_window=None if est is None else est.fitted_window,
            samples=0 if est is None else est.samples,
            residual_rms_m=math.nan if est is None else est.residual_rms_m, note=note,
            base=base_status, map_to_odom=m2o, inputs_missing=self._missing,
            inputs_rejected=self._rejected)
