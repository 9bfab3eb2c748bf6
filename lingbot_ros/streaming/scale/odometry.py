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
Scale from the robot's odometry: a robust similarity fit of the model's camera track.

Per sample: the model's camera pose in the map frame (model units), the odometry's
base pose in ``odom_frame`` (metres) and the URDF's ``base_to_camera`` (metres). The
camera's metric pose in odom is ``base_in_odom @ base_to_camera``: its position moves
when the base only turns (the lever arm), so the lever arm is part of the model, not
noise. With ``R, t`` the unknown rigid odom <- map transform and ``s`` metres per
model unit::

    p_i = s R c_i + t + e_i        (p: camera position in odom, c: in the map frame)
    Q_i = R C_i                    (Q, C: the camera's orientation in odom and in map)

``R`` comes from the orientations (a weighted chordal mean, well conditioned even
for a straight drive, where positions alone leave a rotation about the line free),
``s`` and ``t`` then from a weighted linear fit of the positions; weights are Cauchy's
of both residuals, refitted until they settle (IRLS) from a start that outliers cannot
pull (the median of pairwise distance ratios).

Observability: the base must have travelled. Turning on the spot swings the camera
on a circle of the lever arm's radius, but a scale from that circle alone would
carry the URDF lever arm's error one to one, so the base's own spread must reach
``min_spread_m``, stand clear of the noise (``min_spread_to_noise``) and leave the
scale's relative uncertainty under ``max_relative_sigma``. Otherwise the window keeps
its last accepted fit (or has none) and :attr:`OdometryScale.verdict` says why.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import Enum
import math
from typing import Deque, NamedTuple, Optional

from lingbot_ros.streaming.robot_frame import camera_in_odom
from lingbot_ros.streaming.scale.estimate import (SavedBook, ScaleEstimate, ScaleSource,
                                                  ScaleState, WindowFit, WindowScales)
from lingbot_ros.streaming.scale.robust import (cauchy_weights, MEDIAN_NORM_3D,
                                                OUTLIER_NORM_3D, robust_sigma)
import numpy as np


@dataclass(frozen=True)
class OdometryScaleConfig:
    """
    Limits of the odometry fit (metres, radians, seconds).

    ``max_samples`` bounds a window's buffer (the oldest sample goes first); a sample
    is kept only when the base moved ``min_step_m`` or turned ``min_step_rad`` since
    the last kept one, so a robot standing still adds nothing.
    """

    max_samples: int = 300
    min_samples: int = 12
    min_step_m: float = 0.02
    min_step_rad: float = 0.03
    min_spread_m: float = 0.10
    min_spread_to_noise: float = 5.0
    max_relative_sigma: float = 0.03
    stale_after_s: float = 30.0
    noise_floor_m: float = 1e-3
    noise_floor_rad: float = 1e-3
    iterations: int = 30

    def __post_init__(self) -> None:
        """Refuse limits that make no fit possible."""
        if not (isinstance(self.max_samples, int) and isinstance(self.min_samples, int)
                and 3 <= self.min_samples <= self.max_samples):
            raise ValueError(f'need 3 <= min_samples <= max_samples (integers), got '
                             f'{self.min_samples}, {self.max_samples}')
        for name in ('min_step_m', 'min_step_rad', 'min_spread_m', 'min_spread_to_noise'):
            if not getattr(self, name) >= 0:
                raise ValueError(f'{name} must be >= 0, got {getattr(self, name)}')
        for name in ('max_relative_sigma', 'stale_after_s', 'noise_floor_m', 'noise_floor_rad'):
            if not getattr(self, name) > 0:
                raise ValueError(f'{name} must be > 0, got {getattr(self, name)}')
        if not (isinstance(self.iterations, int) and self.iterations >= 1):
            raise ValueError(f'iterations must be a positive integer, got {self.iterations}')


class FitVerdict(Enum):
    """The outcome of the latest refit (why a window has no new value)."""

    NOT_TRIED = 'no refit yet'
    ACCEPTED = 'accepted'
    STANDING_STILL = 'the base is standing still'
    TOO_FEW_SAMPLES = 'too few samples with motion between them'
    NOT_ENOUGH_TRAVEL = 'the base has not travelled far enough'
    TOO_NOISY = "the base's travel is small against the residual noise"
    TOO_UNCERTAIN = "the scale's relative uncertainty is too large"
    DEGENERATE = 'degenerate geometry (no usable motion in the model or the odometry)'


@dataclass(frozen=True)
class SimilarityFit:
    """
    One robust fit of ``p = s R c + t``: odometry camera positions against the model's.

    ``rotation``/``translation`` map the metric map frame (model units times ``scale``,
    same origin) into odom: ``odom <- map``. ``noise_m`` is the per-axis standard
    deviation of the position residuals; covariances are in the map frame.
    """

    scale: float
    sigma: float
    rotation: np.ndarray
    translation: np.ndarray
    weights: np.ndarray
    inliers: int
    noise_m: float
    residual_rms_m: float
    base_spread_m: float
    position_cov_m2: np.ndarray
    rotation_cov_rad2: np.ndarray


def _project_so3(m: np.ndarray) -> np.ndarray:
    """Rotation nearest ``m`` (Frobenius): the orthogonal Procrustes solution."""
    u, _, vt = np.linalg.svd(m)
    d = np.sign(np.linalg.det(u @ vt)) or 1.0
    return u @ np.diag([1.0, 1.0, d]) @ vt


def _rotation_vectors(r: np.ndarray) -> np.ndarray:
    """Axis times angle (rad) of rotations ``[N, 3, 3]``; exact away from half turns."""
    cos = np.clip((np.trace(r, axis1=-2, axis2=-1) - 1.0) / 2.0, -1.0, 1.0)
    angle = np.arccos(cos)
    v = 0.5 * np.stack([r[:, 2, 1] - r[:, 1, 2], r[:, 0, 2] - r[:, 2, 0],
                        r[:, 1, 0] - r[:, 0, 1]], -1)
    sin = np.linalg.norm(v, axis=-1)
    factor = np.where(sin > 1e-12, angle / np.where(sin > 1e-12, sin, 1.0), 1.0)
    return v * factor[:, None]


def _initial_scale(c: np.ndarray, p: np.ndarray) -> Optional[float]:
    """Median ratio of metric to model distance over long pairs: outliers cannot pull it."""
    n = len(c)
    idx = np.arange(n)
    offsets = sorted({k for k in (n // 2, n // 3, n // 4) if k >= 1})
    pairs = [(idx, (idx + k) % n) for k in offsets]
    i = np.concatenate([a for a, _ in pairs])
    j = np.concatenate([b for _, b in pairs])
    dp = np.linalg.norm(p[i] - p[j], axis=-1)
    dc = np.linalg.norm(c[i] - c[j], axis=-1)
    keep = (dc > 0) & (dp > 0)
    if not np.any(keep):
        return None
    keep &= dp >= np.median(dp[keep])
    return float(np.median(dp[keep] / dc[keep]))


def fit_similarity(camera_in_map: np.ndarray, camera_in_odom_m: np.ndarray,
                   base_in_odom_m: np.ndarray, noise_floor_m: float = 1e-3,
                   noise_floor_rad: float = 1e-3, iterations: int = 30) -> Optional[SimilarityFit]:
    """
    Fit scale and odom <- map to samples, robustly; None where the geometry gives nothing.

    ``camera_in_map [N, 4, 4]``: the model's camera poses (model units);
    ``camera_in_odom_m [N, 4, 4]``: the same cameras from odometry and the URDF (metres);
    ``base_in_odom_m [N, 3]``: the base's positions (metres), for its spread.
    """
    if iterations < 1:
        raise ValueError(f'iterations must be >= 1, got {iterations}')
    c, cr = camera_in_map[:, :3, 3], camera_in_map[:, :3, :3]
    p, q = camera_in_odom_m[:, :3, 3], camera_in_odom_m[:, :3, :3]
    if len(c) < 3:
        return None
    scale = _initial_scale(c, p)
    if scale is None or not scale > 0:
        return None
    # Q_i C_i^T: the chordal mean is R = proj(sum w_i M_i); the angle of the residual
    # Q_i^T R C_i has cosine (<R, M_i> - 1) / 2.
    m = q @ np.swapaxes(cr, -1, -2)
    rot = _project_so3(m.sum(0))
    trans = np.median(p - scale * c @ rot.T, axis=0)
    for _ in range(iterations):
        res = np.linalg.norm(p - scale * c @ rot.T - trans, axis=-1)
        ang = np.arccos(np.clip((np.einsum('ij,nij->n', rot, m) - 1.0) / 2.0, -1.0, 1.0))
        u_pos = res / robust_sigma(res, MEDIAN_NORM_3D, noise_floor_m)
        u_rot = ang / robust_sigma(ang, MEDIAN_NORM_3D, noise_floor_rad)
        w = cauchy_weights(u_pos) * cauchy_weights(u_rot)
        rot = _project_so3(np.einsum('n,nij->ij', w, m))
        total = w.sum()
        c_mean, p_mean = w @ c / total, w @ p / total
        c_rot = (c - c_mean) @ rot.T
        den = float(w @ np.sum(c_rot * c_rot, axis=-1))
        if not den > 0:
            return None
        new = float(w @ np.sum(c_rot * (p - p_mean), axis=-1)) / den
        trans = p_mean - new * rot @ c_mean
        done = abs(new - scale) <= 1e-10 * abs(scale)
        scale = new
        if done:
            break
    resid = p - scale * c @ rot.T - trans
    res = np.linalg.norm(resid, axis=-1)
    rot_res = _rotation_vectors(rot.T @ q @ np.swapaxes(cr, -1, -2))  # map-frame axes
    ang = np.linalg.norm(rot_res, axis=-1)
    sig_pos = robust_sigma(res, MEDIAN_NORM_3D, noise_floor_m)
    sig_rot = robust_sigma(ang, MEDIAN_NORM_3D, noise_floor_rad)
    inl = (res <= OUTLIER_NORM_3D * sig_pos) & (ang <= OUTLIER_NORM_3D * sig_rot)
    n_in = int(np.count_nonzero(inl))
    if n_in < 3 or not scale > 0:
        return None
    total = w.sum()
    c_cent = c - w @ c / total
    den = float(w @ np.sum(c_cent * c_cent, axis=-1))
    # per-axis residual variance of the weighted fit (4 fitted numbers: s, t)
    noise_var = float(w @ (res * res)) / max(3.0 * total - 4.0, 1.0)
    var_s = noise_var * float((w * w) @ np.sum(c_cent * c_cent, axis=-1)) / (den * den)
    resid_map = resid[inl] @ rot  # odom-frame residuals turned into the map frame
    base = base_in_odom_m[inl]
    spread = float(np.sqrt(np.mean(np.sum((base - base.mean(0)) ** 2, axis=-1))))
    return SimilarityFit(
        scale=scale, sigma=math.sqrt(var_s), rotation=rot, translation=trans, weights=w,
        inliers=n_in, noise_m=math.sqrt(noise_var),
        residual_rms_m=float(np.sqrt(np.mean(res[inl] ** 2))), base_spread_m=spread,
        position_cov_m2=resid_map.T @ resid_map / n_in,
        rotation_cov_rad2=rot_res[inl].T @ rot_res[inl] / n_in)


@dataclass(frozen=True)
class SavedOdometry:
    """
    An :class:`OdometryScale` at one instant, whole: what its next sample and estimate read.

    ``base_to_camera [4, 4]`` is the lever arm it fits for; the newest window's samples
    (at most ``max_samples``, oldest first) are ``stamps_s [n]`` and ``camera_in_map``,
    ``camera_in_odom``, ``base_in_odom`` ``[n, 4, 4]``; ``last_fit`` is that window's
    latest accepted fit.
    """

    base_to_camera: np.ndarray
    book: SavedBook
    window: Optional[int]
    stamps_s: np.ndarray
    camera_in_map: np.ndarray
    camera_in_odom: np.ndarray
    base_in_odom: np.ndarray
    last_fit: Optional[SimilarityFit]
    verdict: FitVerdict
    rejected: int


class _Sample(NamedTuple):
    stamp_s: float
    camera_in_map: np.ndarray   # [4, 4] model units
    camera_in_odom: np.ndarray  # [4, 4] metres
    base_in_odom: np.ndarray    # [4, 4] metres


class OdometryScale:
    """
    Online odometry scale per model window, refitted as the robot moves.

    Feed every frame that has an odometry pose at its stamp with :meth:`add`; ask
    :meth:`estimate` for the value a window uses. Only the newest window keeps
    samples (at most ``config.max_samples``); older windows keep their last accepted
    fit. A sample of an older window than the newest, or one that is not finite,
    is rejected and counted in :attr:`rejected`.
    """

    def __init__(self, base_to_camera: np.ndarray,
                 config: OdometryScaleConfig = OdometryScaleConfig()) -> None:
        lever = np.asarray(base_to_camera, dtype=np.float64)
        if lever.shape != (4, 4) or not np.all(np.isfinite(lever)):
            raise ValueError('base_to_camera must be a finite [4, 4] rigid transform (metres)')
        self._lever, self._cfg = lever, config
        self._book = WindowScales(ScaleSource.ODOMETRY, ScaleState.WAITING_FOR_MOTION,
                                  config.stale_after_s)
        self._window: Optional[int] = None
        self._samples: Deque[_Sample] = deque(maxlen=config.max_samples)
        self._last_fit: Optional[SimilarityFit] = None
        self._verdict = FitVerdict.NOT_TRIED
        self.rejected = 0

    @property
    def config(self) -> OdometryScaleConfig:
        return self._cfg

    @property
    def version(self) -> int:
        return self._book.version

    @property
    def verdict(self) -> FitVerdict:
        """Why the newest window's latest refit was or was not accepted."""
        return self._verdict

    @property
    def last_fit(self) -> Optional[SimilarityFit]:
        """Return the newest window's latest accepted fit (with odom <- map), if any."""
        return self._last_fit

    @property
    def buffered(self) -> int:
        """Count the samples held for the newest window."""
        return len(self._samples)

    def add(self, window_index: int, stamp_s: float, camera_in_map: np.ndarray,
            base_in_odom: np.ndarray) -> bool:
        """
        Offer one frame's sample; refit when it is kept. Return whether it was kept.

        ``camera_in_map``: the model's camera-to-map pose ``[4, 4]`` (model units) of a
        frame of window ``window_index``; ``base_in_odom``: the odometry's pose of
        ``base_frame`` in ``odom_frame`` at the frame's stamp ``stamp_s`` (s, metres).
        """
        cam = np.asarray(camera_in_map, dtype=np.float64)
        base = np.asarray(base_in_odom, dtype=np.float64)
        window_index = int(window_index)
        if (cam.shape != (4, 4) or base.shape != (4, 4) or not np.all(np.isfinite(cam))
                or not np.all(np.isfinite(base)) or not math.isfinite(stamp_s)
                or (self._window is not None and window_index < self._window)):
            self.rejected += 1
            return False
        if window_index != self._window:
            self._window = window_index
            self._samples.clear()
            self._last_fit = None
            self._verdict = FitVerdict.NOT_TRIED
        self._book.see(window_index)
        if self._samples and not self._moved(self._samples[-1].base_in_odom, base):
            if len(self._samples) < self._cfg.min_samples:
                self._verdict = FitVerdict.STANDING_STILL
            return False
        self._samples.append(_Sample(float(stamp_s), cam, camera_in_odom(base, self._lever),
                                     base))
        self._refit()
        return True

    def _moved(self, last: np.ndarray, base: np.ndarray) -> bool:
        step = float(np.linalg.norm(base[:3, 3] - last[:3, 3]))
        cos = (np.trace(last[:3, :3].T @ base[:3, :3]) - 1.0) / 2.0
        turn = math.acos(min(1.0, max(-1.0, cos)))
        return step >= self._cfg.min_step_m or turn >= self._cfg.min_step_rad

    def _refit(self) -> None:
        cfg = self._cfg
        if len(self._samples) < cfg.min_samples:
            self._verdict = FitVerdict.TOO_FEW_SAMPLES
            return
        fit = fit_similarity(np.stack([s.camera_in_map for s in self._samples]),
                             np.stack([s.camera_in_odom for s in self._samples]),
                             np.stack([s.base_in_odom[:3, 3] for s in self._samples]),
                             cfg.noise_floor_m, cfg.noise_floor_rad, cfg.iterations)
        self._verdict = self._judge(fit)
        if self._verdict is not FitVerdict.ACCEPTED:
            return
        self._last_fit = fit
        newest = max(s.stamp_s for s in self._samples)
        self._book.accept(self._window, WindowFit(
            scale=fit.scale, sigma=fit.sigma, samples=fit.inliers, stamp_s=newest,
            residual_rms_m=fit.residual_rms_m, position_cov_m2=fit.position_cov_m2,
            rotation_cov_rad2=fit.rotation_cov_rad2))

    def _judge(self, fit: Optional[SimilarityFit]) -> FitVerdict:
        cfg = self._cfg
        if fit is None:
            return FitVerdict.DEGENERATE
        if fit.inliers < cfg.min_samples:
            return FitVerdict.TOO_FEW_SAMPLES
        if fit.base_spread_m < cfg.min_spread_m:
            return FitVerdict.NOT_ENOUGH_TRAVEL
        if fit.base_spread_m < cfg.min_spread_to_noise * fit.noise_m:
            return FitVerdict.TOO_NOISY
        if not fit.sigma <= cfg.max_relative_sigma * fit.scale:
            return FitVerdict.TOO_UNCERTAIN
        return FitVerdict.ACCEPTED

    def estimate(self, window_index: Optional[int] = None,
                 now_s: Optional[float] = None) -> ScaleEstimate:
        """Return the scale window ``window_index`` (default: the newest) uses, at ``now_s``."""
        return self._book.estimate(window_index, now_s)

    def reset(self) -> None:
        """Forget everything: the stream restarted in a new map frame."""
        self._book.reset()
        self._window = None
        self._samples.clear()
        self._last_fit = None
        self._verdict = FitVerdict.NOT_TRIED

    def export(self) -> SavedOdometry:
        """Return a copy of the whole state (samples copied: the estimator goes on)."""
        def stack(name: str) -> np.ndarray:
            return np.stack([getattr(s, name) for s in self._samples]) if self._samples \
                else np.zeros((0, 4, 4))
        return SavedOdometry(
            base_to_camera=self._lever.copy(), book=self._book.export(), window=self._window,
            stamps_s=np.array([s.stamp_s for s in self._samples], dtype=np.float64),
            camera_in_map=stack('camera_in_map'), camera_in_odom=stack('camera_in_odom'),
            base_in_odom=stack('base_in_odom'), last_fit=self._last_fit,
            verdict=self._verdict, rejected=self.rejected)

    @classmethod
    def restored(cls, saved: SavedOdometry,
                 config: OdometryScaleConfig = OdometryScaleConfig()) -> 'OdometryScale':
        """
        Return an estimator that goes on exactly where ``saved`` stopped.

        Fed the same later samples, it gives the very estimates the saved one would have.
        A state it cannot hold (more samples than ``config.max_samples``, arrays of other
        shapes, samples without a window) is a ValueError.
        """
        est = cls(saved.base_to_camera, config)
        n = len(saved.stamps_s)
        if saved.stamps_s.shape != (n,) or any(
                getattr(saved, k).shape != (n, 4, 4)
                for k in ('camera_in_map', 'camera_in_odom', 'base_in_odom')):
            raise ValueError(f'odometry samples of shapes {saved.stamps_s.shape}, '
                             f'{saved.camera_in_map.shape}, {saved.camera_in_odom.shape}, '
                             f'{saved.base_in_odom.shape} do not pair up')
        if n > config.max_samples:
            raise ValueError(f'{n} odometry samples, more than max_samples '
                             f'({config.max_samples})')
        if saved.window != saved.book.latest or (n and saved.window is None):
            raise ValueError(f'odometry samples of window {saved.window}, the newest window '
                             f'is {saved.book.latest}')
        est._book.restore(saved.book)
        est._window = None if saved.window is None else int(saved.window)
        rows = zip(saved.stamps_s, saved.camera_in_map, saved.camera_in_odom, saved.base_in_odom)
        est._samples.extend(_Sample(float(t), c.copy(), o.copy(), b.copy()) for t, c, o, b in rows)
        est._last_fit, est._verdict = saved.last_fit, saved.verdict
        est.rejected = int(saved.rejected)
        return est
