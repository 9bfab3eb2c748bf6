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
Synthetic robot runs with a known metric scale, for the scale estimators' tests.

A planar base drives a smooth random path in ``odom`` (metres); a camera sits on it at
a random lever arm; the model sees the camera in its own map frame, a random rigid
transform away from odom, in model units that differ per window. Window ``w`` starts
at frame ``k`` and is tied to frame ``k - 1`` as the session's Sim(3) ties it, so its
model positions are ``c_i = c_{k-1} + (P_i - P_{k-1}) / s_w`` with ``P`` the true metric
camera positions in the map frame: exactly what a perfect metric conversion undoes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.trajectory import quat_to_matrix
import numpy as np


def rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def random_rotation(rng: np.random.Generator) -> np.ndarray:
    return quat_to_matrix(rng.normal(size=4))


def random_rigid(rng: np.random.Generator, spread: float = 5.0) -> np.ndarray:
    return rigid(random_rotation(rng), rng.uniform(-spread, spread, 3))


# optical frame of a camera looking along the base's x axis (x right, y down, z forward)
OPTICAL = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def random_lever(rng: np.random.Generator, reach: float = 0.4) -> np.ndarray:
    """Return a camera pose in base_link: ahead / aside / above the base, tilted a little."""
    tilt = quat_to_matrix(np.concatenate([rng.normal(scale=0.1, size=3), [1.0]]))
    return rigid(tilt @ OPTICAL, rng.uniform([-reach, -reach, 0.1], [reach, reach, reach]))


def smooth_path(rng: np.random.Generator, amplitude: float,
                duration_s: float) -> Callable[[np.ndarray], np.ndarray]:
    """Return a random planar base path ``t -> [N, 4, 4]`` (base_link in odom)."""
    freq = rng.uniform(0.5, 2.0, (3, 3)) * 2 * np.pi / duration_s
    phase = rng.uniform(0, 2 * np.pi, (3, 3))
    amp = rng.uniform(0.3, 1.0, (3, 3)) * amplitude
    amp[2] *= 0.8 / max(amplitude, 1e-9)  # heading: up to a few tenths of a radian per term

    def pose(t: np.ndarray) -> np.ndarray:
        t = np.asarray(t, dtype=np.float64).reshape(-1)
        x, y, yaw = (np.sum(amp[k] * np.sin(freq[k] * t[:, None] + phase[k]), -1)
                     for k in range(3))
        out = np.tile(np.eye(4), (len(t), 1, 1))
        out[:, :3, :3] = np.stack([rot_z(a) for a in yaw])
        out[:, 0, 3], out[:, 1, 3] = x, y
        return out
    return pose


@dataclass
class RobotRun:
    """One synthetic run: the truth, what odometry reports and what the model reports."""

    stamps: np.ndarray                # [N] s
    base_in_odom: np.ndarray          # [N, 4, 4] metres, true
    odometry: np.ndarray              # [N, 4, 4] metres, as reported (noisy)
    base_to_camera: np.ndarray        # [4, 4] metres
    map_from_odom: np.ndarray         # [4, 4] rigid: odom in the (metric) map frame
    camera_metric: np.ndarray         # [N, 4, 4] true camera pose in the metric map frame
    camera_model: np.ndarray          # [N, 4, 4] the model's pose (model units, noisy)
    windows: np.ndarray               # [N] window index
    window_scales: np.ndarray         # [W] true metres per model unit
    outliers: np.ndarray              # [N] bool: frames given a gross model error


def model_poses(camera_metric: np.ndarray, windows: np.ndarray,
                window_scales: Sequence[float]) -> np.ndarray:
    """Return the model's view of metric camera poses: per-window units, tied at window starts."""
    out = camera_metric.copy()
    pos = camera_metric[:, :3, 3]
    for i in range(len(out)):
        w = windows[i]
        if i == 0:
            out[i, :3, 3] = pos[0] / window_scales[w]
        else:
            # each step in its own window's units: window w's first frame steps from the
            # tie frame (the one before it), the rest telescope back to it
            out[i, :3, 3] = out[i - 1, :3, 3] + (pos[i] - pos[i - 1]) / window_scales[w]
    return out


def robot_run(seed: int, scale: float, n: int = 120, amplitude: float = 1.5,
              noise_m: float = 0.0, noise_rad: float = 0.0, outlier_fraction: float = 0.0,
              windows: Optional[Sequence[int]] = None,
              window_scales: Optional[Sequence[float]] = None,
              path: Optional[Callable[[np.ndarray], np.ndarray]] = None,
              duration_s: float = 60.0) -> RobotRun:
    """
    Build a run; ``scale`` is metres per model unit (every window's, unless given).

    ``noise_m`` is Gaussian noise per axis on the odometry's positions, ``noise_rad`` on
    the model's orientations; an outlier frame's model position jumps by 0.5-3 m.
    """
    rng = np.random.default_rng(seed)
    stamps = np.linspace(0.0, duration_s, n)
    path = path or smooth_path(rng, amplitude, duration_s)
    base = path(stamps)
    lever = random_lever(rng)
    map_from_odom = random_rigid(rng)
    camera_metric = map_from_odom @ base @ lever
    windows = np.zeros(n, dtype=np.int64) if windows is None else np.asarray(windows)
    scales = (np.full(windows.max() + 1, scale) if window_scales is None
              else np.asarray(window_scales, dtype=np.float64))
    camera_model = model_poses(camera_metric, windows, scales)
    if noise_rad > 0:
        for i in range(n):
            jitter = quat_to_matrix(np.concatenate([rng.normal(scale=noise_rad / 2, size=3),
                                                    [1.0]]))
            camera_model[i, :3, :3] = jitter @ camera_model[i, :3, :3]
    outliers = rng.random(n) < outlier_fraction
    outliers[0] = False
    for i in np.flatnonzero(outliers):
        direction = rng.normal(size=3)
        jump = direction / np.linalg.norm(direction) * rng.uniform(0.5, 3.0)
        camera_model[i, :3, 3] += jump / scales[windows[i]]
    odometry = base.copy()
    odometry[:, :3, 3] += rng.normal(scale=noise_m, size=(n, 3)) if noise_m > 0 else 0.0
    return RobotRun(stamps=stamps, base_in_odom=base, odometry=odometry, base_to_camera=lever,
                    map_from_odom=map_from_odom, camera_metric=camera_metric,
                    camera_model=camera_model, windows=windows, window_scales=scales,
                    outliers=outliers)
