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
Images -> model input, exactly as the reference prepares them, for files and live frames.

:mod:`.transform` the model grid of an input size; :mod:`.files` image and video files
through Pillow, as the reference; :mod:`.resample` Pillow's resampler in torch, bit for
bit; :mod:`.live` a camera frame by either; :mod:`.upload` how frames reach the device
(a pinned ring, graphed resizes), owned by the engine. Imports torch, numpy, Pillow,
OpenCV (video) and the model's pose and graph helpers; nothing of the streaming layer.
"""

from lingbot_ros.streaming.preprocess.files import (IMAGE_EXTENSIONS, list_images,
                                                    load_image_folder, load_images,
                                                    load_images_with_transforms, load_rgb,
                                                    load_video, video_frames)
from lingbot_ros.streaming.preprocess.live import preprocess_frame, ResizeMethod
from lingbot_ros.streaming.preprocess.resample import resample_graph_bytes
from lingbot_ros.streaming.preprocess.transform import FrameTransform, plan_transform, Prepared
from lingbot_ros.streaming.preprocess.upload import FrameUploads

__all__ = ['FrameTransform', 'FrameUploads', 'IMAGE_EXTENSIONS', 'list_images',
           'load_image_folder', 'load_images', 'load_images_with_transforms', 'load_rgb',
           'load_video', 'plan_transform', 'Prepared', 'preprocess_frame', 'resample_graph_bytes',
           'ResizeMethod', 'video_frames']
