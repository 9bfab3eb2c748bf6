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
The aggregator: per-frame tokens, then alternating frame and global attention.

Each frame becomes ``[camera, 4 registers, scale, patches...]``. Frame blocks attend
within a frame (2D RoPE); global blocks attend across the call's frames and, through a
:class:`CachedAttention`, across what the stream has cached (3D RoPE, time = frame
index in the stream). Selected layers are returned as ``cat(frame_out, global_out)``.
"""

from __future__ import annotations

from typing import List, Optional, Union

import torch
from torch import nn

from .cached_attention import attend_uncached, CachedAttention
from .config import ModelConfig, SPECIAL_TOKENS
from .layers import Block
from .patch_embed import DinoViT
from .rope import Rope2D, Rope3D

IMAGE_MEAN = (0.485, 0.456, 0.406)
IMAGE_STD = (0.229, 0.224, 0.225)


class Aggregator(nn.Module):
    """DINOv2 patch tokens plus special tokens through ``depth`` frame/global block pairs."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        agg = cfg.aggregator
        dim = agg.embed_dim
        self.patch_size = cfg.patch_size
        self.selected_layers = tuple(agg.selected_layers)
        # Slot 0 / slot 1 rows: see special_tokens().
        self.camera_token = nn.Parameter(torch.zeros(1, 2, 1, dim))
        self.register_token = nn.Parameter(torch.zeros(1, 2, agg.num_register_tokens, dim))
        self.scale_token = nn.Parameter(torch.zeros(1, 2, 1, dim))
        self.patch_embed = DinoViT(cfg.patch_embed)
        self.frame_blocks = nn.ModuleList(
            Block(dim, agg.num_heads, agg.mlp_ratio, qk_norm=True) for _ in range(agg.depth))
        self.global_blocks = nn.ModuleList(
            Block(dim, agg.num_heads, agg.mlp_ratio, qk_norm=True) for _ in range(agg.depth))
        self.rope2d = Rope2D(agg.head_dim, agg.rope2d_frequency, SPECIAL_TOKENS)
        self.rope3d = Rope3D(agg.rope3d_split, agg.rope3d_theta, SPECIAL_TOKENS)
        self.init_buffers()

    def init_buffers(self, device: Optional[torch.device] = None) -> None:
        """
        (Re)create the non-persistent normalisation constants (fp32) on ``device``.

        Needed after a meta-device build, and after casting the aggregator to a low
        precision: the constants stay fp32 (the reference's GPU demo rounds them to bf16
        as a side effect of its cast; training did not).
        """
        if device is None:
            device = self.camera_token.device
        for name, values in (('image_mean', IMAGE_MEAN), ('image_std', IMAGE_STD)):
            t = torch.tensor(values, dtype=torch.float32, device=device).view(1, 3, 1, 1)
            self.register_buffer(name, t, persistent=False)

    def special_tokens(self, batch: int, frames: int, first_frame: bool,
                       scale_frames: bool) -> torch.Tensor:
        """
        Return the ``[batch * frames, 6, C]`` special tokens of a call.

        Camera and register tokens use row 0 only for the very first frame of a
        sequence (frame 0 of a call with ``first_frame``), row 1 otherwise; the scale
        token uses row 0 for every frame of a scale call, row 1 otherwise.
        """
        def rows(param: torch.Tensor, first: int) -> torch.Tensor:  # [1, 2, n, C] -> [S, n, C]
            first = min(first, frames)
            return torch.cat([param[0, 0:1].expand(first, -1, -1),
                              param[0, 1:2].expand(frames - first, -1, -1)], dim=0)

        camera = rows(self.camera_token, 1 if first_frame else 0)
        registers = rows(self.register_token, 1 if first_frame else 0)
        scale = rows(self.scale_token, frames if scale_frames else 0)
        tokens = torch.cat([camera, registers, scale], dim=1)
        return tokens.unsqueeze(0).expand(batch, -1, -1, -1).reshape(batch * frames,
                                                                     SPECIAL_TOKENS, -1)

    def forward(self, images: torch.Tensor, *, time_index: Union[int, torch.Tensor],
                first_frame: bool, scale_frames: bool,
                cache: Optional[CachedAttention] = None) -> List[torch.Tensor]:
        """
        Run the trunk on ``images [B, S, 3, H, W]`` in [0, 1].

        Returns one ``[B, S, P, 2C]`` tensor per selected layer (P = 6 + patches).
        Frame s of the call has 3D-RoPE time ``time_index + s``.
        """
        b, s, _, h, w = images.shape
        gh, gw = h // self.patch_size, w // self.patch_size
        x = (images - self.image_mean[None]) / self.image_std[None]
        patches = self.patch_embed(x.reshape(b * s, 3, h, w))
        tokens = torch.cat([self.special_tokens(b, s, first_frame, scale_frames), patches],
                           dim=1)
        p, c = tokens.shape[1], tokens.shape[2]

        device = tokens.device
        # q/k leave the qk LayerNorm in fp32 under autocast, so the tables are fp32 then.
        rope_dtype = torch.float32 if torch.is_autocast_enabled(device.type) else tokens.dtype
        table2d = self.rope2d.table(gh, gw, device, rope_dtype)
        table3d = self.rope3d.table(time_index, s, gh, gw, device, rope_dtype)

        def rotate2d(t: torch.Tensor) -> torch.Tensor:
            return Rope2D.apply(t, table2d)

        def rotate3d(t: torch.Tensor) -> torch.Tensor:
            return Rope3D.apply(t, table3d)

        outputs = []
        for i, (frame_block, global_block) in enumerate(zip(self.frame_blocks,
                                                            self.global_blocks)):
            tokens = frame_block(tokens.reshape(b * s, p, c), rotate=rotate2d)
            frame_out = tokens.reshape(b, s, p, c)
            attend = attend_uncached if cache is None else _layer_attend(cache, i)
            tokens = global_block(tokens.reshape(b, s * p, c), rotate=rotate3d, attend=attend)
            if i in self.selected_layers:
                outputs.append(torch.cat([frame_out, tokens.reshape(b, s, p, c)], dim=-1))
        return outputs


def _layer_attend(cache: CachedAttention, layer: int):
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return cache.attend(layer, q, k, v)
    return attend
