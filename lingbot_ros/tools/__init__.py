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
Console entry points and what only they use.

``replay`` (a recording or images, offline), ``play`` (images to topics), ``bench`` (a
synthetic stream's timings), ``prepare`` (kernels built ahead), ``demo`` and its scene.
May import any layer of the package; ``play`` and ``demo`` speak ROS, ``replay`` and
``bench`` do not. Nothing in the package imports ``tools``.
"""
