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
The one thing the model needs from a KV cache, stated as a protocol.

The model never imports the cache package; a streaming session hands the global
blocks and the camera head objects that satisfy :class:`CachedAttention`.
"""

from __future__ import annotations

from typing import Protocol

import torch


class CachedAttention(Protocol):
    """Attention of the current call's tokens over what a stream has cached, plus themselves."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        """
        Store this call's keys and values as pending, return softmax(q K^T / sqrt(d)) V.

        ``q``, ``k``, ``v`` are ``[B, heads, N, head_dim]`` for the frames of the current
        call, frame-major (``N = frames * tokens_per_frame``), keys already normalised and
        rotated. ``layer`` indexes the attention layer that calls (global block index, or
        ``iteration * trunk_depth + block`` in the camera head). The result has ``q``'s shape.
        A cache copies what it keeps: the caller may overwrite ``k`` and ``v`` afterwards
        (a CUDA-graph replay reuses the same buffers every frame).
        """
        ...


def attend_uncached(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain attention among the call's own tokens (no cache given)."""
    return torch.nn.functional.scaled_dot_product_attention(q, k, v)
