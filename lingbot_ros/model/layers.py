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
Transformer pieces shared by the DINOv2 trunk, the aggregator and the camera head.

One pre-norm block serves all three; what differs (qk-norm, LayerNorm eps, how positions
rotate q/k, what the keys are attended against) is passed in, so the state-dict names
(``norm1 attn.qkv attn.q_norm attn.k_norm attn.proj ls1.gamma norm2 mlp.fc1 mlp.fc2
ls2.gamma``) are spelled in one place.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
from torch import nn
import torch.nn.functional as F

# the layers autocast runs in its low precision: their weights may be stored in it
MATMUL_MODULES = (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)
FLOAT32_ATTR = 'keeps_float32'  # set by keep_float32 on a head's last layer

Rotate = Callable[[torch.Tensor], torch.Tensor]
Attend = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def keep_float32(layer: nn.Module) -> nn.Module:
    """
    Mark a head's last layer (before ``exp`` or the pose code) to stay float32 under autocast.

    The depth head's last convolution writes the log of the depth: whatever it rounds, the
    output carries, and rounding only its weights to bf16 moves the depth as much as every
    other layer of the decoder in bf16 together. Its weights are kept float32 too.
    """
    setattr(layer, FLOAT32_ATTR, True)
    return layer


def low_precision_layer(module: nn.Module) -> bool:
    """Tell whether autocast may run ``module`` (and keep its weights) in low precision."""
    return isinstance(module, MATMUL_MODULES) and not getattr(module, FLOAT32_ATTR, False)


def float32_output(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """
    Run ``layer`` (a Linear, or a 1x1 Conv2d) in float32 whatever the autocast state.

    A 1x1 convolution runs as a matrix product over the channels: cuBLAS keeps float32
    products in float32 by default, where cuDNN would use TF32 (10-bit mantissas).
    """
    weight = layer.weight.float()
    bias = None if layer.bias is None else layer.bias.float()
    with torch.autocast(device_type=x.device.type, enabled=False):
        if isinstance(layer, nn.Linear):
            return F.linear(x.float(), weight, bias)
        if isinstance(layer, nn.Conv2d) and weight.shape[2:] == (1, 1) and \
                layer.stride == (1, 1) and layer.padding == (0, 0) and layer.groups == 1:
            out = F.linear(x.float().permute(0, 2, 3, 1), weight[:, :, 0, 0], bias)
            return out.permute(0, 3, 1, 2)
    raise TypeError(f'float32_output takes a Linear or a 1x1 Conv2d, not {layer}')


def head_autocast(device_type: str, dtype: Optional[torch.dtype]) -> torch.autocast:
    """Return the autocast context a head runs in: off for None (float32), else ``dtype``."""
    return torch.autocast(device_type=device_type, dtype=dtype or torch.float32,
                          enabled=dtype is not None)


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked softmax(q k^T / sqrt(d)) v among the given tokens."""
    return F.scaled_dot_product_attention(q, k, v)


class LayerScale(nn.Module):
    """Per-channel learned residual gain (``gamma``); values come from the checkpoint."""

    def __init__(self, dim: int, init_value: float = 1e-2) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), init_value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma


HALF_DTYPES = (torch.bfloat16, torch.float16)


def gelu_linear(fc: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """
    Return GELU(fc(x)); in half precision on CUDA as one GEMM with the GELU in its epilogue.

    Why: as kernels of their own, the GELUs after the blocks' ``fc1`` read and write every
    hidden activation once more, a launch per block. cuBLASLt adds the bias and applies
    GELU as it writes the product. Its GELU is the tanh form, at most 4.8e-4 from the exact
    (erf) one (at |x| = 2.7, where the values are about 2.7 and bf16 rounds by 8e-3, float16
    by 1e-3); float32 (the parity path) and the CPU keep the exact GELU.
    """
    low = _autocast_dtype(x.device) or x.dtype
    if not x.is_cuda or low not in HALF_DTYPES or fc.bias is None:
        return F.gelu(fc(x))
    return gelu_epilogue(fc, x, low)


def gelu_epilogue(fc: nn.Linear, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """
    Return GELU(fc(x)) computed in ``dtype`` by one ``torch._addmm_activation``.

    On CUDA that is cuBLASLt's bias + GELU epilogue (the tanh form); on the CPU the same
    call applies the exact GELU after the product, which lets the CPU suite check the
    layout (rows, transposed weight, bias) of what CUDA fuses.
    """
    rows = x.reshape(-1, x.shape[-1]).to(dtype)
    out = torch._addmm_activation(fc.bias.to(dtype), rows, fc.weight.to(dtype).t(),
                                  use_gelu=True)
    return out.reshape(*x.shape[:-1], out.shape[-1])


class Mlp(nn.Module):
    """Two linear layers with GELU between them, the exact one or fused (:func:`gelu_linear`)."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(gelu_linear(self.fc1, x))


def _autocast_dtype(device: torch.device) -> Optional[torch.dtype]:
    if torch.is_autocast_enabled(device.type):
        return torch.get_autocast_dtype(device.type)
    return None


class Attention(nn.Module):
    """
    Multi-head self-attention with optional per-head q/k LayerNorm.

    ``qkv`` output features are ordered (3, heads, head_dim), as in the checkpoints.
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = False,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f'dim {dim} is not a multiple of num_heads {num_heads}')
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim)
        if qk_norm:
            self.q_norm = nn.LayerNorm(self.head_dim, eps=norm_eps)
            self.k_norm = nn.LayerNorm(self.head_dim, eps=norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.proj = nn.Linear(dim, dim)

    # No forward of its own: a Block runs its parts (block_pre_attention and
    # block_post_attention), so that a compiler can take each half whole. Under autocast
    # q, k, v reach the attention in the autocast dtype (what SDPA would use anyway), so
    # a cache sees one dtype.


class Block(nn.Module):
    """Pre-norm transformer block: x + ls1(attn(norm1 x)), then x + ls2(mlp(norm2 x))."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float = 4.0, qk_norm: bool = False,
                 norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qk_norm=qk_norm, norm_eps=norm_eps)
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim)

        self.pieces: Optional[Pieces] = None   # compiled pre/post (see compiled.py)

    def forward(self, x: torch.Tensor, rotate: Optional[Rotate] = None,
                attend: Optional[Attend] = None) -> torch.Tensor:
        pre, post = self.pieces or (block_pre_attention, block_post_attention)
        q, k, v = pre(self, x, rotate)
        return post(self, x, (attend or plain_attention)(q, k, v))


def block_pre_attention(block: Block, x: torch.Tensor,
                        rotate: Optional[Rotate]) -> tuple[torch.Tensor, torch.Tensor,
                                                           torch.Tensor]:
    """Compute a block's part before attention: norm1, qkv, q/k norms, rotation, casts."""
    a = block.attn
    b, n, _ = x.shape
    qkv = a.qkv(block.norm1(x)).reshape(b, n, 3, a.num_heads, a.head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    if a.q_norm is not None:
        q, k = a.q_norm(q), a.k_norm(k)
    if rotate is not None:
        q, k = rotate(q), rotate(k)
    low = _autocast_dtype(x.device)
    if low is not None:
        q, k, v = q.to(low), k.to(low), v.to(low)
    return q, k, v


def block_post_attention(block: Block, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Compute a block's part after attention ``out [B, H, N, D]``: proj, residuals, MLP."""
    b, h, n, d = out.shape
    x = x + block.ls1(block.attn.proj(out.transpose(1, 2).reshape(b, n, h * d)))
    return x + block.ls2(block.mlp(block.norm2(x)))


Pieces = tuple[Callable, Callable]
