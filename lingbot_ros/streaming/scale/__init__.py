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
Metric scale for the model's poses, points and depth: estimators, metric frame, offline fit.

The model's units are arbitrary and each window's drift a little (windows are chained
by a Sim(3) whose scale comes from the model's own depth), so a scale in metres per
model unit is estimated per window from an outside source: the robot's odometry
(:mod:`.odometry`), a registered depth sensor (:mod:`.depth`) or a fixed number
(:mod:`.estimate`). :mod:`.metric` applies the windows' scales so the metric trajectory
stays continuous where windows meet; :mod:`.offline` runs the odometry or depth fit over
a recorded run; :mod:`.saved` holds one camera's scale state, exactly, for a saved stream
to resume with. No ROS here.
"""
