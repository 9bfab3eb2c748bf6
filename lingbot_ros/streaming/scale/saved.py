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
One camera's saved metric scale, and its encoding as arrays plus a JSON-able header.

A camera that publishes in metres carries more than its session: the estimator's
per-window fits and the newest window's samples, the metric frame's window anchors, the
published frame and, for the camera driving ``map -> odom``, the anchor of the map in
odom. :class:`SavedScale` holds all of it as numbers and arrays (each piece exported by
the class it belongs to: :class:`~.estimate.WindowScales`, :class:`~.odometry.OdometryScale`,
:class:`~.depth.DepthScale`, :class:`~.metric.MetricFrame`), so that a camera restored from
it places its next frame as if it had never stopped. :func:`encode` and :func:`decode`
turn it into named float64 / int64 arrays and a JSON object and back, bit for bit; a
decode checks every array's shape, dtype and finiteness and every header field, and
raises a one-line ValueError naming the first thing wrong. No torch, no file here
(:mod:`lingbot_ros.streaming.state_file` stores the parts).
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any, Dict, Mapping, Optional, Tuple, Union

from lingbot_ros.streaming.scale.depth import DepthRatio, SavedDepth
from lingbot_ros.streaming.scale.estimate import SavedBook, ScaleSource, WindowFit
from lingbot_ros.streaming.scale.metric import FrameKind, SavedMetricFrame
from lingbot_ros.streaming.scale.odometry import FitVerdict, SavedOdometry, SimilarityFit
import numpy as np

Arrays = Dict[str, np.ndarray]


@dataclass(frozen=True)
class SavedScale:
    """
    One camera's scale and published frame at one instant (what its next frame reads).

    ``estimator``: the odometry or depth estimator's state (None: a fixed scale, or an
    odometry source still waiting for its lever arm); ``metric``: the metric frame's
    anchors (None without a source that can give a scale); ``anchor [4, 4]``: odom <- the
    metric map frame of the camera driving ``map -> odom``, once set; ``epoch``: the
    session map it belongs to; ``frame``: where the outputs (track, map) were published;
    ``base_previous``: the last ``~/base_odom`` pose ``(stamp_ns, [4, 4])``, for its twist.
    """

    source: ScaleSource
    drives: bool
    fixed_scale: Optional[float]
    estimator: Optional[Union[SavedOdometry, SavedDepth]]
    metric: Optional[SavedMetricFrame]
    anchor: Optional[np.ndarray]
    epoch: int
    frame: FrameKind
    inputs_missing: int = 0
    inputs_rejected: int = 0
    base_previous: Optional[Tuple[int, np.ndarray]] = None


# --- encoding ---------------------------------------------------------------------------

_NONE = math.nan  # a fit without a stamp (timeless) is stored as NaN: no real stamp is NaN


def _f64(value: Any) -> np.ndarray:
    return np.array(value, dtype=np.float64, copy=True)


def _int(value: Optional[int]) -> Optional[int]:
    """Return a JSON-able integer (numpy's are not), or None."""
    return None if value is None else int(value)


def _book(book: SavedBook, out: Arrays) -> None:
    fits = [f for _, f in book.fits]
    out['book.windows'] = np.array([w for w, _ in book.fits], dtype=np.int64)
    out['book.samples'] = np.array([f.samples for f in fits], dtype=np.int64)
    out['book.values'] = _f64([[f.scale, f.sigma, f.residual_rms_m] for f in fits]).reshape(-1, 3)
    out['book.stamps_s'] = _f64([_NONE if f.stamp_s is None else f.stamp_s for f in fits])
    out['book.position_cov'] = _f64([f.position_cov_m2 for f in fits]).reshape(-1, 3, 3)
    out['book.rotation_cov'] = _f64([f.rotation_cov_rad2 for f in fits]).reshape(-1, 3, 3)


def _estimator(est: Union[SavedOdometry, SavedDepth], out: Arrays) -> dict:
    _book(est.book, out)
    head = {'window': _int(est.window), 'latest': _int(est.book.latest),
            'version': int(est.book.version), 'rejected': int(est.rejected)}
    if isinstance(est, SavedDepth):
        r = est.ratios
        out['depth.stamps_s'] = _f64(est.stamps_s)
        out['depth.values'] = _f64([[x.log_scale, x.sigma_log, x.residual_rms_m]
                                    for x in r]).reshape(-1, 3)
        out['depth.counts'] = np.array([[x.inliers, x.valid] for x in r],
                                       dtype=np.int64).reshape(-1, 2)
        return {**head, 'kind': ScaleSource.DEPTH.value}
    for name in ('base_to_camera', 'stamps_s', 'camera_in_map', 'camera_in_odom',
                 'base_in_odom'):
        out[f'odometry.{name}'] = _f64(getattr(est, name))
    fit = est.last_fit
    if fit is not None:
        out['odometry.last_fit.values'] = _f64([fit.scale, fit.sigma, fit.noise_m,
                                                fit.residual_rms_m, fit.base_spread_m])
        for name in ('rotation', 'translation', 'weights', 'position_cov_m2',
                     'rotation_cov_rad2'):
            out[f'odometry.last_fit.{name}'] = _f64(getattr(fit, name))
    return {**head, 'kind': ScaleSource.ODOMETRY.value, 'verdict': est.verdict.name,
            'last_fit_inliers': None if fit is None else int(fit.inliers)}


def encode(saved: SavedScale) -> Tuple[Arrays, dict]:
    """Return ``saved`` as named arrays (float64, int64) and a JSON-able header object."""
    out: Arrays = {}
    if saved.anchor is not None:
        out['anchor'] = _f64(saved.anchor)
    if saved.base_previous is not None:
        out['base_previous.pose'] = _f64(saved.base_previous[1])
    m = saved.metric
    if m is not None:
        out['metric.windows'] = np.array(m.windows, dtype=np.int64)
        out['metric.anchors'] = _f64(m.anchors).reshape(-1, 3)
        if m.last is not None:
            out['metric.last'] = _f64(m.last)
    header = {
        'source': saved.source.value, 'drives': bool(saved.drives),
        'fixed_scale': None if saved.fixed_scale is None else float(saved.fixed_scale),
        'epoch': int(saved.epoch), 'frame': saved.frame.name,
        'inputs_missing': int(saved.inputs_missing),
        'inputs_rejected': int(saved.inputs_rejected),
        'base_previous_stamp_ns': None if saved.base_previous is None
        else int(saved.base_previous[0]),
        'metric': m is not None,
        'estimator': None if saved.estimator is None else _estimator(saved.estimator, out)}
    return out, header


# --- decoding ---------------------------------------------------------------------------

class _Parts:
    """Checked access to the arrays and header fields of one saved scale."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self._arrays = arrays

    def array(self, name: str, shape: tuple, dtype: Any = np.float64,
              nan: bool = False) -> np.ndarray:
        """
        Return a copy of an array of ``shape`` (None: any size there) and ``dtype``.

        A float array must be finite (``nan``: NaN stands for 'none' in it, inf never).
        """
        if name not in self._arrays:
            raise ValueError(f'array {name} is missing')
        a = np.asarray(self._arrays[name])
        if a.ndim != len(shape) or any(want is not None and got != want
                                       for got, want in zip(a.shape, shape)):
            raise ValueError(f'array {name} has shape {a.shape}, expected '
                             f"{tuple('*' if s is None else s for s in shape)}")
        if a.dtype != dtype:
            raise ValueError(f'array {name} is {a.dtype}, expected {np.dtype(dtype)}')
        if dtype == np.float64 and not np.all(np.isfinite(a) | (nan & np.isnan(a))):
            raise ValueError(f'array {name} holds a value that is not finite')
        return a.copy()

    def has(self, name: str) -> bool:
        return name in self._arrays


def _get(data: Any, key: str, kind: Any, where: str, optional: bool = False) -> Any:
    """Return ``data[key]`` if it is a ``kind`` (ints are not bools, and are >= 0)."""
    if not isinstance(data, dict) or key not in data:
        raise ValueError(f'header field {where}.{key} is missing')
    value = data[key]
    if optional and value is None:
        return None
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if ok and kind is int:
        ok = value >= 0
    if ok and kind is float:
        ok = math.isfinite(value)
    if not ok:
        raise ValueError(f'header field {where}.{key}={value!r} is not allowed')
    return value


def _enum(kind: Any, text: Any, where: str, by_name: bool = False) -> Any:
    try:
        return kind[text] if by_name else kind(text)
    except (KeyError, ValueError, TypeError):
        raise ValueError(f'header field {where}={text!r} is not allowed') from None


def _decode_book(h: dict, p: _Parts) -> SavedBook:
    windows = p.array('book.windows', (None,), np.int64)
    k = len(windows)
    samples = p.array('book.samples', (k,), np.int64)
    values = p.array('book.values', (k, 3))
    stamps = p.array('book.stamps_s', (k,), nan=True)
    pos = p.array('book.position_cov', (k, 3, 3))
    rot = p.array('book.rotation_cov', (k, 3, 3))
    if np.any(windows < 0) or np.any(samples < 0):
        raise ValueError('array book.windows or book.samples holds a negative number')
    fits = tuple((int(w), WindowFit(scale=float(v[0]), sigma=float(v[1]), samples=int(n),
                                    stamp_s=None if math.isnan(t) else float(t),
                                    residual_rms_m=float(v[2]), position_cov_m2=pc,
                                    rotation_cov_rad2=rc))
                 for w, n, v, t, pc, rc in zip(windows, samples, values, stamps, pos, rot))
    return SavedBook(fits=fits, latest=_get(h, 'latest', int, 'scale.estimator', True),
                     version=_get(h, 'version', int, 'scale.estimator'))


def _decode_estimator(h: Any, p: _Parts) -> Union[SavedOdometry, SavedDepth]:
    where = 'scale.estimator'
    kind = _enum(ScaleSource, _get(h, 'kind', str, where), f'{where}.kind')
    book = _decode_book(h, p)
    window = _get(h, 'window', int, where, True)
    rejected = _get(h, 'rejected', int, where)
    if kind is ScaleSource.DEPTH:
        stamps = p.array('depth.stamps_s', (None,))
        n = len(stamps)
        values = p.array('depth.values', (n, 3))
        counts = p.array('depth.counts', (n, 2), np.int64)
        if np.any(counts < 0):
            raise ValueError('array depth.counts holds a negative number')
        ratios = tuple(DepthRatio(log_scale=float(v[0]), sigma_log=float(v[1]),
                                  inliers=int(c[0]), valid=int(c[1]), residual_rms_m=float(v[2]))
                       for v, c in zip(values, counts))
        return SavedDepth(book=book, window=window, stamps_s=stamps, ratios=ratios,
                          rejected=rejected)
    if kind is not ScaleSource.ODOMETRY:
        raise ValueError(f'header field {where}.kind={kind.value!r} is not allowed')
    stamps = p.array('odometry.stamps_s', (None,))
    n = len(stamps)
    poses = {name: p.array(f'odometry.{name}', (n, 4, 4))
             for name in ('camera_in_map', 'camera_in_odom', 'base_in_odom')}
    inliers = _get(h, 'last_fit_inliers', int, where, True)
    fit = None
    if inliers is not None:
        v = p.array('odometry.last_fit.values', (5,))
        weights = p.array('odometry.last_fit.weights', (None,))
        fit = SimilarityFit(
            scale=float(v[0]), sigma=float(v[1]), noise_m=float(v[2]),
            residual_rms_m=float(v[3]), base_spread_m=float(v[4]), inliers=inliers,
            rotation=p.array('odometry.last_fit.rotation', (3, 3)),
            translation=p.array('odometry.last_fit.translation', (3,)), weights=weights,
            position_cov_m2=p.array('odometry.last_fit.position_cov_m2', (3, 3)),
            rotation_cov_rad2=p.array('odometry.last_fit.rotation_cov_rad2', (3, 3)))
    return SavedOdometry(
        base_to_camera=p.array('odometry.base_to_camera', (4, 4)), book=book, window=window,
        stamps_s=stamps, **poses, last_fit=fit,
        verdict=_enum(FitVerdict, _get(h, 'verdict', str, where), f'{where}.verdict', True),
        rejected=rejected)


_ROLE_FRAMES = {True: (FrameKind.WITHHELD, FrameKind.ANCHORED),
                False: (FrameKind.MODEL, FrameKind.METRIC)}
_ESTIMATORS = {ScaleSource.ODOMETRY: (SavedOdometry, type(None)), ScaleSource.DEPTH: (SavedDepth,),
               ScaleSource.FIXED: (type(None),)}


def contradiction(saved: SavedScale) -> Optional[str]:
    """Say how the parts of ``saved`` contradict each other (None: they could be one camera's)."""
    if saved.source not in _ESTIMATORS:
        return f'a saved scale of scale_source {saved.source.value}'
    if not isinstance(saved.estimator, _ESTIMATORS[saved.source]):
        return f'a {saved.source.value} scale with a {type(saved.estimator).__name__} estimator'
    if (saved.fixed_scale is not None) != (saved.source is ScaleSource.FIXED) or (
            saved.fixed_scale is not None and not saved.fixed_scale > 0):
        return f'fixed_scale {saved.fixed_scale} with scale_source {saved.source.value}'
    if (saved.metric is None) != (saved.estimator is None and saved.source is not
                                  ScaleSource.FIXED):
        return 'a metric frame without an estimator, or an estimator without one'
    if saved.frame not in _ROLE_FRAMES[saved.drives]:
        role = 'driving' if saved.drives else 'not driving'
        return f'outputs {saved.frame.value!r} for a camera {role} map -> odom'
    if (saved.anchor is not None) != (saved.frame is FrameKind.ANCHORED) and not (
            saved.anchor is not None and saved.drives):
        return 'a map -> odom anchor without anchored outputs, or anchored outputs without one'
    return None


def decode(arrays: Mapping[str, np.ndarray], header: Any) -> SavedScale:
    """Rebuild a :class:`SavedScale` from :func:`encode`'s output; ValueError on what is off."""
    saved = _decode(arrays, header)
    why = contradiction(saved)
    if why is not None:
        raise ValueError(why)
    return saved


def _decode(arrays: Mapping[str, np.ndarray], header: Any) -> SavedScale:
    p, where = _Parts(arrays), 'scale'
    if not isinstance(header, dict):
        raise ValueError('header field scale is not an object')
    source = _enum(ScaleSource, _get(header, 'source', str, where), f'{where}.source')
    metric = None
    if _get(header, 'metric', bool, where):
        windows = p.array('metric.windows', (None,), np.int64)
        metric = SavedMetricFrame(
            windows=tuple(int(w) for w in windows),
            anchors=p.array('metric.anchors', (len(windows), 3)),
            last=p.array('metric.last', (3,)) if p.has('metric.last') else None)
    stamp = _get(header, 'base_previous_stamp_ns', int, where, True)
    est = header.get('estimator')
    return SavedScale(
        source=source, drives=_get(header, 'drives', bool, where),
        fixed_scale=_get(header, 'fixed_scale', float, where, True),
        estimator=None if est is None else _decode_estimator(est, p),
        metric=metric, anchor=p.array('anchor', (4, 4)) if p.has('anchor') else None,
        epoch=_get(header, 'epoch', int, where),
        frame=_enum(FrameKind, _get(header, 'frame', str, where), f'{where}.frame', True),
        inputs_missing=_get(header, 'inputs_missing', int, where),
        inputs_rejected=_get(header, 'inputs_rejected', int, where),
        base_previous=None if stamp is None else (stamp, p.array('base_previous.pose', (4, 4))))
