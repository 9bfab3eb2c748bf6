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
The DINOv2-with-registers ViT that turns every frame into normalised patch tokens.

Token order inside the ViT: cls, registers, patches; only the final-norm patch tokens
leave it. The learned position table covers a square ``img_size / patch_size`` grid and
is resized (bicubic, antialiased, fp32) to the input's grid; resized tables are kept
per grid, so a stream of one resolution resizes once.
"""

from __future__ import annotations

from typing import Dict

import torch
from torch import nn
import torch.nn.functional as F

from .config import PatchEmbedConfig
from .layers import Block

NORM_EPS = 1e-6


class ConvPatches(nn.Module):
    """Non-overlapping ``patch x patch`` convolution (key ``patch_embed.proj``)."""

    def __init__(self, patch_size: int, dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class DinoViT(nn.Module):
    """DINOv2 ViT with registers, LayerScale, exact GELU; returns patch tokens ``[N, h*w, C]``."""

    def __init__(self, cfg: PatchEmbedConfig) -> None:
        super().__init__()
        dim = cfg.embed_dim
        self.patch_size = cfg.patch_size
        self.table_grid = cfg.img_size // cfg.patch_size
        self.num_register_tokens = cfg.num_register_tokens
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.table_grid ** 2, dim))
        self.register_tokens = nn.Parameter(torch.zeros(1, cfg.num_register_tokens, dim))
        self.mask_token = nn.Parameter(torch.zeros(1, dim))  # training only; kept for the keys
        self.patch_embed = ConvPatches(cfg.patch_size, dim)
        self.blocks = nn.ModuleList(
            Block(dim, cfg.num_heads, cfg.mlp_ratio, qk_norm=False, norm_eps=NORM_EPS)
            for _ in range(cfg.depth))
        self.norm = nn.LayerNorm(dim, eps=NORM_EPS)
        self._pos_cache: Dict[tuple, torch.Tensor] = {}

    def position_table(self, grid_h: int, grid_w: int, dtype: torch.dtype) -> torch.Tensor:
        """Return the ``[1, 1 + grid_h * grid_w, C]`` position table (cls entry first)."""
        if grid_h == grid_w == self.table_grid:
            return self.pos_embed
        table = self.pos_embed
        key = (grid_h, grid_w, dtype, table.device, id(table), table._version)
        cacheable = not (torch.is_grad_enabled() and table.requires_grad)
        if cacheable and key in self._pos_cache:
            return self._pos_cache[key]
        full = table.float()
        dim = full.shape[-1]
        grid = full[:, 1:].reshape(1, self.table_grid, self.table_grid, dim).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(grid_h, grid_w), mode='bicubic', antialias=True)
        grid = grid.permute(0, 2, 3, 1).reshape(1, grid_h * grid_w, dim)
        out = torch.cat([full[:, :1], grid], dim=1).to(dtype)
        if cacheable:
            # One entry per resolution (a handful of cameras); entries of replaced weights
            # go. Entries are never dropped otherwise: captured CUDA graphs read them.
            self._pos_cache = {k: v for k, v in self._pos_cache.items() if k[3:] == key[3:]}
            self._pos_cache[key] = out
        return out

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Embed normalised images ``[N, 3, H, W]`` (H, W multiples of the patch size)."""
        n, _, h, w = images.shape
        x = self.patch_embed(images)
        x = torch.cat([self.cls_token.expand(n, -1, -1), x], dim=1)
        x = x + self.position_table(h // self.patch_size, w // self.patch_size, x.dtype)
        x = torch.cat([x[:, :1], self.register_tokens.expand(n, -1, -1), x[:, 1:]], dim=1)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)[:, 1 + self.num_register_tokens:]
