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
LingBot-Map as one module: aggregator, camera head, depth head.

State-dict keys are the released checkpoints' (``aggregator.*``, ``camera_head.*``,
``depth_head.*``). One :meth:`LingBotMap.forward` call processes the frames of one
stream step; the caller owns the caches and the time index.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import nn

from .aggregator import Aggregator
from .cached_attention import CachedAttention
from .camera_head import CameraHead
from .config import ModelConfig, SPECIAL_TOKENS
from .depth_head import DepthHead
from .layers import low_precision_layer

AUTOCAST_DTYPES = (None, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class ModelOutput:
    """Predictions for the S frames of one call (fp32, whatever the heads compute in)."""

    pose_enc: torch.Tensor  # [S, 9]: T (3), quaternion xyzw (4), fov_h, fov_w
    pose_enc_iters: torch.Tensor  # [S, iterations, 9]
    depth: Optional[torch.Tensor]  # [S, H, W, 1] or None
    depth_conf: Optional[torch.Tensor]  # [S, H, W] or None
    camera_tokens: torch.Tensor  # [S, 4, 2C]: token 0 of each selected layer


def _cast_matmul_weights(module: nn.Module, dtype: Optional[torch.dtype]) -> None:
    """Keep ``module``'s linear and convolution weights in ``dtype`` (None: fp32), others fp32."""
    for sub in module.modules():
        low = low_precision_layer(sub) and dtype is not None
        for name, param in list(sub.named_parameters(recurse=False)):
            want = dtype if low else torch.float32
            if param.dtype != want:
                sub._parameters[name] = nn.Parameter(param.detach().to(want),
                                                     requires_grad=param.requires_grad)


class LingBotMap(nn.Module):
    """The streaming reconstruction network; see :meth:`forward` for the call contract."""

    def __init__(self, cfg: ModelConfig, autocast_dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        self.cfg = cfg.validate()
        self.aggregator = Aggregator(cfg)
        self.camera_head = CameraHead(cfg)
        self.depth_head = DepthHead(cfg)
        self.autocast_dtype: Optional[torch.dtype] = None
        if autocast_dtype is not None:
            self.set_autocast_dtype(autocast_dtype)

    def tokens_per_frame(self, height: int, width: int) -> int:
        """Return the aggregator tokens of one ``height x width`` frame (specials + patches)."""
        p = self.cfg.patch_size
        return SPECIAL_TOKENS + (height // p) * (width // p)

    def set_autocast_dtype(self, dtype: Optional[torch.dtype],
                           heads: Optional[torch.dtype] = None) -> 'LingBotMap':
        """
        Run the aggregator under autocast in ``dtype`` (None: fp32), as the reference GPU demo.

        The aggregator's linear and convolution weights are cast to ``dtype``; its other
        parameters stay float32 (``checkpoint.storage_dtype`` says why). The heads stay
        fp32 and run with autocast off unless ``heads`` names a dtype (and ``dtype`` is
        not None): then they run under autocast in it, their linear and convolution
        weights cast to it and the depth head's convolution weights made channels-last
        (their other parameters float32).
        Casting down is lossy: going back to None (or to float32 heads) afterwards keeps
        the rounded weights.
        """
        for name, value in (('autocast_dtype', dtype), ('heads', heads)):
            if value not in AUTOCAST_DTYPES:
                raise ValueError(f'{name}={value!r} is invalid: expected one of '
                                 f'{AUTOCAST_DTYPES}')
        _cast_matmul_weights(self.aggregator, dtype)
        self.aggregator.init_buffers()
        self.autocast_dtype = dtype
        low_heads = heads if dtype is not None else None
        if low_heads is not None or self.head_autocast_dtype is not None:
            for head in (self.camera_head, self.depth_head):
                _cast_matmul_weights(head, low_heads)
            layout = torch.channels_last if low_heads is not None else torch.contiguous_format
            self.depth_head.to(memory_format=layout)
        self.camera_head.autocast_dtype = self.depth_head.autocast_dtype = low_heads
        return self

    @property
    def head_autocast_dtype(self) -> Optional[torch.dtype]:
        """Return the dtype the heads compute in under autocast (None: float32)."""
        return self.depth_head.autocast_dtype

    def forward(self, images: torch.Tensor, *, time_index: Union[int, torch.Tensor],
                first_frame: bool,
                scale_frames: bool, global_cache: Optional[CachedAttention],
                camera_cache: Optional[CachedAttention], with_depth: bool = True,
                camera_iterations: Optional[int] = None) -> ModelOutput:
        """
        Predict camera (and depth) for ``images [S, 3, H, W]`` in [0, 1], H and W multiples of 14.

        ``time_index``: 3D-RoPE time of frame 0 of the call (frame s gets +s).
        ``first_frame``: frame 0 is the first of its sequence (camera/register row 0).
        ``scale_frames``: the call's frames are scale frames (scale-token row 0).
        ``global_cache`` / ``camera_cache``: what the global blocks and the camera head
        attend through (None: the call's frames only). The caller opens and commits or
        rolls back the caches' transactions around the call. ``camera_iterations``: how
        many camera refinements to run (None: the configured number).
        """
        self._check_images(images)
        h, w = images.shape[-2:]
        device_type = images.device.type
        with torch.autocast(device_type, dtype=self.autocast_dtype or torch.float32,
                            enabled=self.autocast_dtype is not None):
            if not torch.is_tensor(time_index):
                time_index = int(time_index)
            layers = self.aggregator(images[None], time_index=time_index,
                                     first_frame=bool(first_frame),
                                     scale_frames=bool(scale_frames), cache=global_cache)
        with torch.autocast(device_type, enabled=False):
            layers = [t.float() for t in layers]
            pose_enc, pose_iters = self.camera_head(layers[-1][:, :, 0], camera_cache,
                                                    iterations=camera_iterations)
            depth = conf = None
            if with_depth:
                depth, conf = self.depth_head(layers, (h, w), patch_start=SPECIAL_TOKENS)
                depth, conf = depth[0], conf[0]
        return ModelOutput(
            pose_enc=pose_enc[0], pose_enc_iters=pose_iters[0], depth=depth, depth_conf=conf,
            camera_tokens=torch.stack([t[0, :, 0] for t in layers], dim=1))

    def _check_images(self, images: torch.Tensor) -> None:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(f'images must be [S, 3, H, W], got shape {tuple(images.shape)}')
        if images.shape[0] < 1:
            raise ValueError('images must hold at least one frame')
        p = self.cfg.patch_size
        h, w = images.shape[-2:]
        if h % p or w % p or h == 0 or w == 0:
            raise ValueError(f'image size {h}x{w} (HxW) is invalid: both must be positive '
                             f'multiples of the patch size {p}')
        if not images.is_floating_point():
            raise ValueError(f'images must be floating point in [0, 1], got {images.dtype}')
