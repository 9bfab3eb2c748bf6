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

"""What one processed frame yields: plain data, no ROS, no torch on the outside."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Optional

import numpy as np


class FrameType(IntEnum):
    """How a frame entered the stream (the fixtures' ``frame_type`` codes)."""

    SCALE = 0
    KEYFRAME = 1
    NON_KEYFRAME = 2


@dataclass(frozen=True)
class FrameTimings:
    """
    Host milliseconds a session spent on one frame (what ``/diagnostics`` splits a step into).

    ``model`` is the model call with its outputs on the host; a streamed frame also has
    ``step`` (the whole call from start to commit, ``model`` included, the resize not) and
    ``prepare`` (the resize; None where the caller resized), which the scale call lacks.
    """

    model: float = float('nan')
    step: Optional[float] = None
    prepare: Optional[float] = None

    @property
    def streamed(self) -> bool:
        """Whether these are a streamed frame's (``step`` timed), not the scale call's."""
        return self.step is not None


@dataclass(frozen=True)
class FrameResult:
    """
    Outputs for one input frame, stamped with the input's stamp.

    Conventions: ``pose_c2w`` maps camera (OpenCV optical axes: x right, y down,
    z forward) to the session's map frame; translation in model units (arbitrary
    scale). ``intrinsics`` are pinhole in pixels of the *input* image (before
    resize/crop); ``intrinsics_model`` in pixels of the model grid ``model_hw``.
    Depth and confidence live on the model grid.
    """

    stamp_ns: int
    index: int                      # frame index within the session (0-based, all frames)
    frame_type: FrameType
    pose_c2w: np.ndarray            # [4, 4] float64
    pose_enc: np.ndarray            # [9] float32: T(3), q xyzw(4), fov_h, fov_w
    intrinsics: np.ndarray          # [3, 3] float64, input pixels
    intrinsics_model: np.ndarray    # [3, 3] float64, model-grid pixels
    input_hw: tuple[int, int]
    model_hw: tuple[int, int]
    window_index: int = 0
    map_epoch: int = 0   # which map of the session the pose is in: a new one after each restart
    depth: Optional[np.ndarray] = None       # [H, W] float32, model grid
    confidence: Optional[np.ndarray] = None  # [H, W] float32, > 1
    colors: Optional[np.ndarray] = None      # [H, W, 3] uint8 RGB, model grid
    # made by the session when the stream's config.products asks (streaming/products)
    depth_input: Optional[np.ndarray] = None  # [h, w] float32 on the input's pixels (NaN: none)
    points_rows: Optional[np.ndarray] = None  # [N, 4] float32 x, y, z, packed rgb
    timings: FrameTimings = field(default_factory=FrameTimings)

    @property
    def is_keyframe(self) -> bool:
        return self.frame_type != FrameType.NON_KEYFRAME
