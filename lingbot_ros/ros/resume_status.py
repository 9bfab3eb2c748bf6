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
What a camera's resume came to, as /diagnostics says it.

configure writes a :class:`ResumeStatus` per camera (``resume_state`` set); the
diagnostics timer reads it. The measurements are the session's
:class:`~lingbot_ros.streaming.relocalise.ResumeReport`, which the worker fills as the
first resumed frames land: the distance of each camera position to the nearest saved
keyframe. A small distance says the model placed the robot near where the saved map
was built; with random weights the figures mean nothing. The distances are the model's
units; once the camera has a metric scale they are said in metres (the scale the camera
uses now). Nothing here imports rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List, Optional, Tuple

from lingbot_ros.streaming.relocalise import ResumeReport
import numpy as np


class ResumeOutcome(Enum):
    """How a camera started: from its saved state, or fresh after a refusal."""

    RESUMED = 'resumed'
    REFUSED = 'refused'   # resume_required false: a new map instead


@dataclass(frozen=True)
class ResumeView:
    """One reading of a camera's resume: its words, whether to WARN, and the values."""

    state: str
    warn: bool
    values: List[Tuple[str, str]]


@dataclass(frozen=True)
class ResumeStatus:
    """
    A camera's resume: the file, the outcome, and what it reads against.

    ``reason``: the refusal's line (REFUSED); ``report``: the session's resume report
    (None when the state held no keyframe to measure against); ``resets``: the camera's
    session resets when it resumed (a later reset or new map leaves the saved map);
    ``map_note``, ``scale_note``, ``track_note``: what became of the saved voxel map,
    metric scale and published track.
    """

    path: str
    outcome: ResumeOutcome
    reason: str = ''
    report: Optional[ResumeReport] = None
    resets: int = 0
    map_note: str = ''
    scale_note: str = ''
    track_note: str = ''

    def view(self, session_resets: int, far: float,
             metres_per_unit: Optional[float] = None) -> ResumeView:
        """
        Say where the camera stands against its saved map.

        ``session_resets``: the camera's count now; ``far``: resume_far_distance (model
        units); ``metres_per_unit``: a metric scale, where one is known (distances then
        in metres).
        """
        unit = 'model units' if metres_per_unit is None else 'm'
        scale = 1.0 if metres_per_unit is None else metres_per_unit
        report = self.report
        distances = report.distances() if report is not None else np.zeros(0)
        median = float(np.median(distances)) if distances.size else None
        warn = False
        if self.outcome is ResumeOutcome.REFUSED:
            state, warn = f'refused, started a new map: {self.reason}', True
        elif session_resets > self.resets or (report is not None and report.new_map):
            # a reset asked for, or one the stream said as WARN when it came (another size)
            state = 'resumed, then the stream started a new map'
        elif report is None:
            state = 'resumed (no saved keyframe to measure against)'
        elif median is None:
            state = 'resumed: waiting for frames'
        elif median <= far:
            state = f'relocalised within {median * scale:.3g} {unit}'
        else:
            state, warn = f'far from the saved map: {median * scale:.3g} {unit}', True
        values = [('resume_file', self.path), ('resume_state', state),
                  ('resume_report', report.summary(metres_per_unit) if report else 'n/a'),
                  ('resume_distance_median', 'n/a' if median is None
                   else f'{median * scale:.4f}'),
                  ('resume_distance_unit', unit), ('resume_map', self.map_note or 'n/a'),
                  ('resume_scale', self.scale_note or 'n/a'),
                  ('resume_track', self.track_note or 'n/a')]
        return ResumeView(state, warn, values)
