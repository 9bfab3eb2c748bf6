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
LingBot-Map streaming 3D reconstruction as a ROS 2 package.

Layers, arrows pointing down only: ``ros`` -> ``streaming`` -> (``model``, ``cache``);
``tools`` (console entry points) may use any of them. ``model`` and ``cache`` never
import each other, and only ``ros`` and ``tools`` import rclpy or ROS message types, so
the model, the cache and a whole stream run and are tested without ROS. No import
cycles; ``test/unit/test_layers.py`` checks the import graph, lazy imports included.
"""
