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
The matrices of the map conventions the node offers (no message types, so light).

:class:`~lingbot_ros.streaming.choices.MapConvention` names them (the parameter table's
choices live below ``ros/``); here is what each means for poses and points.

``rep103``: the map is REP-103's body frame at the first camera pose (x forward, y left,
z up); ``optical``: the map is the first camera's optical frame (x right, y down, z forward).
"""

from lingbot_ros.streaming.choices import MapConvention
import numpy as np


# optical (x right, y down, z forward) -> REP-103 body (x forward, y left, z up)
OPTICAL_TO_REP103 = np.array([[0.0, 0.0, 1.0, 0.0],
                              [-1.0, 0.0, 0.0, 0.0],
                              [0.0, -1.0, 0.0, 0.0],
                              [0.0, 0.0, 0.0, 1.0]])


def map_from_optical(convention: MapConvention) -> np.ndarray:
    """Return the 4x4 that turns the session's (optical) map frame into ``convention``'s."""
    return OPTICAL_TO_REP103 if convention == MapConvention.REP103 else np.eye(4)
