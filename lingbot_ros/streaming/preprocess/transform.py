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
The model grid of an input size, as the reference's ``crop`` mode chooses it.

Both ways of preparing a frame (Pillow on files, the torch resampler on live frames) land
on this grid and map pixel values with :data:`TO_UNIT`, so a camera frame and the same
pixels read from a file give the same tensor. A :class:`FrameTransform` maps model-grid
intrinsics back to input pixels; a :class:`Prepared` frame is what a session is fed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple

from lingbot_ros.model.pose import intrinsics_to_input
import numpy as np
import torch

TO_UNIT = torch.arange(256, dtype=torch.float32) / 255  # uint8 -> [0, 1], as ToTensor does


@dataclass(frozen=True)
class Prepared:
    """One frame on the model grid: ``image [3, H, W]`` in [0, 1] on the model's device."""

    image: torch.Tensor
    model_to_input: np.ndarray  # 3x3: model-grid pixel coordinates -> input pixels
    input_hw: tuple


@dataclass(frozen=True)
class FrameTransform:
    """
    How an input image became the model grid: a resize, then a crop or a pad.

    Continuous pixel coordinates (edges on integers): resized = input * scale, and
    model = resized - ``offset_xy`` (positive offset: rows/columns cropped; negative: pad).
    """

    input_hw: Tuple[int, int]
    resized_hw: Tuple[int, int]
    offset_xy: Tuple[int, int]
    model_hw: Tuple[int, int]

    @property
    def scale_xy(self) -> Tuple[float, float]:
        """Model pixels per input pixel, (x, y)."""
        return (self.resized_hw[1] / self.input_hw[1], self.resized_hw[0] / self.input_hw[0])

    def intrinsics_to_input(self, k: torch.Tensor) -> torch.Tensor:
        """Map a model-grid pinhole ``[..., 3, 3]`` to the input image's pixels."""
        return intrinsics_to_input(k, self.scale_xy, self.offset_xy)

    def padded(self, model_hw: Tuple[int, int]) -> 'FrameTransform':
        """Return the transform after centring this grid on a larger ``model_hw`` canvas."""
        top = (model_hw[0] - self.model_hw[0]) // 2
        left = (model_hw[1] - self.model_hw[1]) // 2
        return FrameTransform(self.input_hw, self.resized_hw,
                              (self.offset_xy[0] - left, self.offset_xy[1] - top), model_hw)


def plan_transform(input_hw: Tuple[int, int], image_size: int = 518,
                   patch_size: int = 14) -> FrameTransform:
    """
    Choose the model grid for an input size (the reference's ``crop`` mode).

    Width becomes ``image_size``; height ``round(h * image_size / w / patch) * patch``
    (Python rounding); results taller than ``image_size`` keep their centre rows.
    """
    h, w = int(input_hw[0]), int(input_hw[1])
    if h < 1 or w < 1:
        raise ValueError(f'image size {w}x{h} is invalid: expected at least 1x1')
    if image_size < patch_size or image_size % patch_size:
        raise ValueError(f'image_size={image_size} is invalid: expected a positive multiple '
                         f'of patch_size ({patch_size})')
    new_h = round(h * (image_size / w) / patch_size) * patch_size
    if new_h < patch_size:
        raise ValueError(f'image {w}x{h} is too wide: its height rounds to 0 patches')
    top = (new_h - image_size) // 2 if new_h > image_size else 0
    return FrameTransform((h, w), (new_h, image_size), (0, top),
                          (min(new_h, image_size), image_size))
