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
Camera head: iterative refinement of one camera token per frame into a 9-d pose code.

Each iteration modulates the same normalised camera token with an adaptive LayerNorm
driven by the previous estimate, runs a small causal transformer over the frames (its
keys and values cached per iteration and block, never evicted), and adds a delta to the
running pre-activation estimate. fp32 by default, as in the reference; with an
``autocast_dtype`` (see :meth:`lingbot_ros.model.network.LingBotMap.set_autocast_dtype`)
its linear layers and attention run in that dtype, while the LayerNorms, the residual
stream, the last pose layer and the estimate it accumulates stay float32: rounding the
pose code itself to bf16 would move a quaternion component by up to 2**-9 of its size.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from .cached_attention import attend_uncached, CachedAttention
from .config import ModelConfig
from .layers import Block, float32_output, gelu_linear, head_autocast, keep_float32

POSE_DIM = 9  # translation (3), quaternion x y z w (4), fov_h, fov_w


class _PoseBranch(nn.Module):
    """Two-layer GELU MLP from the trunk width to the 9-d delta (keys ``fc1``, ``fc2``)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, dim // 2)
        self.fc2 = keep_float32(nn.Linear(dim // 2, POSE_DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = gelu_linear(self.fc1, x)
        if torch.is_autocast_enabled(x.device.type):
            return float32_output(self.fc2, hidden)
        return self.fc2(hidden)


def activate_pose(raw: torch.Tensor) -> torch.Tensor:
    """Keep translation and quaternion linear; pass the two fields of view through ReLU."""
    return torch.cat([raw[..., :7], F.relu(raw[..., 7:])], dim=-1)


class CameraHead(nn.Module):
    """The reference camera head; state-dict keys match ``camera_head.*`` of the checkpoints."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.head_width
        head = cfg.camera_head
        self.trunk_depth = head.trunk_depth
        self.iterations = head.iterations
        self.trunk = nn.ModuleList(
            Block(dim, head.num_heads, mlp_ratio=head.mlp_ratio) for _ in range(head.trunk_depth))
        self.token_norm = nn.LayerNorm(dim)
        self.trunk_norm = nn.LayerNorm(dim)
        self.empty_pose_tokens = nn.Parameter(torch.zeros(1, 1, POSE_DIM))
        self.embed_pose = nn.Linear(POSE_DIM, dim)
        # Index 0 is the (parameter-free) SiLU, kept so the checkpoint key reads ``.1.``.
        self.poseLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 3 * dim))
        self.adaln_norm = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.pose_branch = _PoseBranch(dim)
        self.autocast_dtype: Optional[torch.dtype] = None  # None: float32, autocast off

    def forward(self, tokens: torch.Tensor, cache: Optional[CachedAttention] = None,
                iterations: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Refine the camera tokens ``[B, S, 2C]`` of the call's S frames (last selected layer).

        ``cache`` sees layer ``iteration * trunk_depth + block``; without one the S frames
        attend to each other only (bidirectionally). ``iterations`` may run fewer
        refinement steps than configured (the weights do not depend on it).
        Returns ``pose_enc [B, S, 9]`` (last iteration) and ``pose_enc_iters [B, S, n, 9]``.
        """
        n_iter = self.iterations if iterations is None else int(iterations)
        if n_iter < 1:
            raise ValueError(f'iterations={n_iter} is invalid: expected >= 1')
        with head_autocast(tokens.device.type, self.autocast_dtype):
            return self._refine(tokens.float(), cache, n_iter)

    def _refine(self, tokens: torch.Tensor, cache: Optional[CachedAttention],
                n_iter: int) -> Tuple[torch.Tensor, torch.Tensor]:
        b, s, _ = tokens.shape
        tok = self.token_norm(tokens)
        normed = self.adaln_norm(tok)  # the same every iteration
        raw = None
        outs = []
        for it in range(n_iter):
            prev = self.empty_pose_tokens.expand(b, s, -1) if raw is None else raw
            shift, scale, gate = self.poseLN_modulation(self.embed_pose(prev)).chunk(3, dim=-1)
            x = gate * (normed * (1 + scale) + shift) + tok
            for j, block in enumerate(self.trunk):
                x = block(x, attend=self._attend_fn(cache, it * self.trunk_depth + j))
            delta = self.pose_branch(self.trunk_norm(x))
            raw = delta if raw is None else raw + delta
            outs.append(activate_pose(raw))
        iters = torch.stack(outs, dim=2)
        return iters[:, :, -1], iters

    @staticmethod
    def _attend_fn(cache: Optional[CachedAttention], layer: int):
        if cache is None:
            return attend_uncached
        return lambda q, k, v: cache.attend(layer, q, k, v)
