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
A live camera frame -> model input, equal to the file path's result for the same pixels.

A frame is resampled either by Pillow on the host (as every file is) or by the torch
re-implementation of Pillow's fixed-point resampler where the model runs (integer
arithmetic, so bit-identical on any device); either way onto the grid of
:func:`~.transform.plan_transform`.
"""

from __future__ import annotations

from enum import Enum
from typing import Optional, Tuple, Union

from lingbot_ros.streaming.preprocess.files import pil, pil_to_model
from lingbot_ros.streaming.preprocess.resample import Resampler
from lingbot_ros.streaming.preprocess.transform import FrameTransform, plan_transform
from lingbot_ros.streaming.preprocess.upload import FrameUploads, plain_frame_to
import numpy as np
import torch


class ResizeMethod(str, Enum):
    """Where a live frame is resampled onto the model grid; all give the same values."""

    AUTO = 'auto'    # PIL for a CPU device, TORCH for any other
    PIL = 'pil'      # Pillow on the host, as the reference (and every file) does
    TORCH = 'torch'  # the same fixed-point resampler in torch, on the model's device


def _check_frame(rgb: Union[np.ndarray, torch.Tensor]) -> Union[np.ndarray, torch.Tensor]:
    """Validate a uint8 RGB (or grey) frame; return it as HxWx3 or HxWx1, unconverted."""
    if isinstance(rgb, np.ndarray):
        ok_type = rgb.dtype == np.uint8
    else:
        ok_type = isinstance(rgb, torch.Tensor) and rgb.dtype == torch.uint8
    if not ok_type:
        kind = getattr(rgb, 'dtype', type(rgb).__name__)
        raise ValueError(f'frame type {kind} is invalid: expected a uint8 array or tensor')
    if rgb.ndim == 2:
        rgb = rgb[:, :, None]
    if rgb.ndim != 3 or rgb.shape[2] not in (1, 3) or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f'frame shape {tuple(rgb.shape)} is invalid: expected HxWx3 RGB '
                         '(or HxW grey)')
    return rgb


def _resize_method(method: Union[ResizeMethod, str]) -> ResizeMethod:
    """Return the member ``method`` is or names (ValueError naming the allowed ones)."""
    try:
        return ResizeMethod(method)  # a member, or the value of one
    except ValueError:
        names = [repr(m.value) for m in ResizeMethod]
        raise ValueError(f"method={method!r} is invalid: expected {', '.join(names[:-1])} or "
                         f'{names[-1]}') from None


def preprocess_frame(rgb: Union[np.ndarray, torch.Tensor],
                     device: Union[str, torch.device] = 'cpu', image_size: int = 518,
                     patch_size: int = 14,
                     method: Union[ResizeMethod, str] = ResizeMethod.AUTO,
                     uploads: Optional[FrameUploads] = None
                     ) -> Tuple[torch.Tensor, FrameTransform]:
    """
    Turn one ``uint8 [H, W, 3]`` RGB frame into the model input ``float32 [3, h, w]``.

    The grid follows :func:`plan_transform`. ``method``: ``'pil'`` resizes with Pillow on
    the host, ``'torch'`` runs the same integer resampler on ``device``; ``'auto'`` picks
    Pillow for a CPU device. Both give the file path's values bit for bit. ``uploads``:
    the engine's way to its device (pinned buffers, graphed resizes, kept weight
    matrices); without it the frame goes up the plain way and nothing is kept.
    """
    device = torch.device(device)
    frame = _check_frame(rgb)
    plan = plan_transform((frame.shape[0], frame.shape[1]), image_size, patch_size)
    method = _resize_method(method)
    if method is ResizeMethod.AUTO:
        method = ResizeMethod.PIL if device.type == 'cpu' else ResizeMethod.TORCH
    if method is ResizeMethod.PIL:
        image_mod, _ = pil()
        arr = frame.cpu().numpy() if isinstance(frame, torch.Tensor) else frame
        arr = np.ascontiguousarray(np.broadcast_to(arr, arr.shape[:2] + (3,)))
        img = image_mod.fromarray(arr)
        return pil_to_model(img, plan).to(device), plan
    if uploads is None:
        return Resampler()(plain_frame_to(frame, device), plan), plan
    out = uploads.resized(frame, plan, device)
    if out is not None:
        return out, plan
    return uploads.resampler(uploads.frame_to(frame, device), plan), plan
