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
One camera stream over a loaded model, offline or live; no ROS.

The engine (:mod:`.engine`: the loaded model, what its sessions share) opens sessions;
a session (:mod:`.session`: the state machine and its transactions) runs the scale
phase and the per-frame step, with its windows (:mod:`.windows`: caches, seeding, the
Sim(3), the out-of-memory shrink), the frame in flight (:mod:`.flight`) and, for a whole
stack, the offline run and its arrays (:mod:`.offline`). Around them: the node's one
parameter table (:mod:`.parameters`, its choices in :mod:`.choices`; plain data, so the
configs below check their fields through it and the ``ros`` layer derives its descriptors
from it), configuration (:mod:`.config`), dtype rules (:mod:`.dtypes`), the memory
estimate (:mod:`.memory`), preprocessing (:mod:`.preprocess`), keyframe policies, results
and products, the map cloud (:mod:`.map_state`: its voxels as arrays), metric scale
(:mod:`.scale`), export (PLY, COLMAP), and a stream's saved state (:mod:`.state`,
:mod:`.state_file`; :mod:`.relocalise` for where a resumed stream finds itself). May
import ``lingbot_ros.model`` and ``lingbot_ros.cache``, torch, numpy, OpenCV and Pillow;
never ``ros`` or ``tools``, rclpy or message types.
"""
