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
Where one frame's outputs land: the published map frame, in metres or in model units.

The session gives its outputs in its own map frame (the first camera's optical frame) in
model units. A window's metric conversion is affine, ``x -> s x + o``
(:class:`~lingbot_ros.streaming.scale.metric.MetricFrame`: ``s`` the window's metres per
model unit, ``o`` its offset, which keeps the trajectory continuous where windows meet).
The published map frame is a rigid ``frame`` away (published <- session axes): the map
convention's rotation, or with publish_map_to_odom the anchor that makes it odom's pose
when the scale arrived. So a session point ``x`` is published at ``R (s x + o) + t``:
poses turn by ``R`` and their positions move as points do, depth is multiplied by ``s``,
and the point rows the session made in the convention's axes get one affine map. A
:class:`Placement` is one window's such map, built per frame; pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional

from lingbot_ros.streaming.result import FrameResult
import numpy as np


def _zeros3() -> np.ndarray:
    return np.zeros(3)


def _eye3() -> np.ndarray:
    return np.eye(3)


@dataclass(frozen=True)
class Placement:
    """
    One window's map from the session's outputs to the published map frame.

    ``frame [4, 4]``: published <- session axes (rigid; metres when ``metric``).
    ``scale`` / ``offset [3]``: the window's metric conversion (1 and 0 in model units).
    ``rows_axes [3, 3]``: the rotation the session made its point rows in (session ->
    the map convention's axes, ``PointsSpec.map_from_session``).
    """

    frame: np.ndarray
    scale: float = 1.0
    offset: np.ndarray = field(default_factory=_zeros3)
    metric: bool = False
    rows_axes: np.ndarray = field(default_factory=_eye3)

    @staticmethod
    def model_units(frame: np.ndarray, rows_axes: Optional[np.ndarray] = None) -> 'Placement':
        """Return the placement without a scale: a rigid change of axes only."""
        frame = np.asarray(frame, dtype=np.float64)
        axes = frame[:3, :3] if rows_axes is None else np.asarray(rows_axes, np.float64)
        return Placement(frame=frame, rows_axes=axes)

    @property
    def rotation(self) -> np.ndarray:
        """Return ``R``: the published frame's rotation from the session's axes."""
        return self.frame[:3, :3]

    def pose(self, pose_c2w: np.ndarray) -> np.ndarray:
        """Return a session camera-to-map pose ``[4, 4]`` in the published map frame."""
        out = np.array(pose_c2w, dtype=np.float64)
        out[:3, 3] = self.scale * out[:3, 3] + self.offset
        return self.frame @ out

    def points(self, xyz: np.ndarray) -> np.ndarray:
        """Return session-frame points ``[..., 3]`` (model units) in the published frame."""
        x = np.asarray(xyz, dtype=np.float64)
        return (self.scale * x + self.offset) @ self.rotation.T + self.frame[:3, 3]

    def _rows_map(self) -> Optional[tuple]:
        """Return ``(M, b)`` with published = M y + b for rows ``y``; None when the identity."""
        m = self.scale * self.rotation @ self.rows_axes.T
        b = self.rotation @ self.offset + self.frame[:3, 3]
        if np.array_equal(m, np.eye(3)) and not np.any(b):
            return None
        return m, b

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """Return point rows ``[N, 4+]`` (x, y, z first; float32) in the published frame."""
        affine = self._rows_map()
        if affine is None:
            return rows
        m, b = affine
        out = np.array(rows, dtype=np.float32, copy=True)
        xyz = out[:, :3].astype(np.float64) @ m.T + b
        out[:, :3] = xyz
        return out

    def depth(self, depth: Optional[np.ndarray]) -> Optional[np.ndarray]:
        """Return a depth image in metres when metric (NaN stays NaN, None stays None)."""
        if depth is None or not self.metric:
            return depth
        return depth * np.asarray(depth).dtype.type(self.scale)

    def result(self, result: FrameResult) -> FrameResult:
        """
        Return ``result`` with depth and the session's products in the published units.

        ``pose_c2w`` stays the session's (model units): :meth:`pose` places it. Depth
        and the depth on the input pixels scale; the point rows move into the published
        frame. Unchanged (the same object) when nothing moves.
        """
        if not self.metric and self._rows_map() is None:
            return result
        rows = None if result.points_rows is None else self.rows(result.points_rows)
        return replace(result, depth=self.depth(result.depth),
                       depth_input=self.depth(result.depth_input), points_rows=rows)

    def covariance(self, session_cov: np.ndarray) -> np.ndarray:
        """Return a ``[6, 6]`` pose covariance of the session's axes in the published axes."""
        r = np.zeros((6, 6))
        r[:3, :3] = r[3:, 3:] = self.rotation
        return r @ np.asarray(session_cov, dtype=np.float64) @ r.T
