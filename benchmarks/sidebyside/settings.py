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

"""What both sides run: the image size, the window and the two settings of the comparison."""

HEIGHT, WIDTH, SCALE_FRAMES, SLIDING_WINDOW = 378, 504, 8, 64
STANDARD_FRAMES = 300  # the frames of a full run; fewer is recorded as shortened
SETTINGS = {
    'default': {'keyframe_interval': 1, 'camera_iterations': 4,
                'label': '4 camera iterations, every frame a keyframe'},
    'kf2_it1': {'keyframe_interval': 2, 'camera_iterations': 1,
                'label': '1 camera iteration, keyframe interval 2'},
}
