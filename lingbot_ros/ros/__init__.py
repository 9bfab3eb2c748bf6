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
The ROS 2 layer: the node and everything that speaks ROS.

The lifecycle node and its wiring, the command line, the ROS side of the parameter table
(descriptors, declaration, refusals, the rendered parameter files), the image
intake and conversion, the worker thread that drives the sessions, the output and map
threads and their publishers, services, diagnostics, TF lookups, each camera's metric
scale and the robot's tree (``map -> odom``), and the executor. The
only layer (with ``tools``) that imports rclpy and message types; may import
``lingbot_ros.streaming`` and, for shared types, ``model`` and ``cache``; never
``tools``.
"""
