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
DPT depth head: four token layers -> a per-pixel depth and confidence map.

Each frame is decoded on its own (frames are batched in chunks only to bound memory:
``chunk`` frames at a time, the config's ``frames_chunk_size`` unless a caller sets it: a
chunk holds the decoder's full-resolution activations of all its frames at once). Sums
whose left side is a fresh result are added in place, which changes no number and saves
one full-size map each.
Two details of the reference matter for its numbers and are kept on purpose: the
residual units add the ReLU of their input (the reference's in-place ReLU overwrote it),
and the 0.1-scaled sin/cos position embedding is computed in float64.

With an ``autocast_dtype`` (see :meth:`lingbot_ros.model.network.LingBotMap.set_autocast_dtype`)
the decoder runs under autocast in that dtype with channels-last activations and
weights, the layout cuDNN's half-precision convolutions want (no NCHW <-> NHWC
transposes around each one). The tokens are pixels with their channels last already:
the first convolutions read them as a view. The LayerNorm statistics, the position maps,
the last convolution and the ``exp`` activations stay float32.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Sequence, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from .config import ModelConfig
from .layers import float32_output, head_autocast, keep_float32

POS_EMBED_SCALE = 0.1
POS_EMBED_OMEGA0 = 100.0


def position_embedding(height: int, width: int, channels: int, aspect: float,
                       device: torch.device) -> torch.Tensor:
    """
    Build the DPT sin/cos position map ``[channels, height, width]`` (already scaled by 0.1).

    Grid coordinates span +-(n-1)/n of the image half-extent normalised by its diagonal
    (``aspect`` = image W / H); each axis is encoded with ``channels / 2`` channels.
    """
    diag = math.sqrt(aspect * aspect + 1.0)
    span_x, span_y = aspect / diag, 1.0 / diag
    xs = torch.linspace(-span_x * (width - 1) / width, span_x * (width - 1) / width,
                        steps=width, dtype=torch.float32, device=device)
    ys = torch.linspace(-span_y * (height - 1) / height, span_y * (height - 1) / height,
                        steps=height, dtype=torch.float32, device=device)
    quarter = channels // 4
    omega = torch.arange(quarter, dtype=torch.float64, device=device) / quarter
    omega = 1.0 / POS_EMBED_OMEGA0 ** omega

    def encode(pos: torch.Tensor) -> torch.Tensor:  # [n] -> [n, channels / 2]
        ang = pos.double()[:, None] * omega[None, :]
        return torch.cat([ang.sin(), ang.cos()], dim=1).float()

    ex = encode(xs)[None, :, :].expand(height, width, -1)
    ey = encode(ys)[:, None, :].expand(height, width, -1)
    return (torch.cat([ex, ey], dim=-1) * POS_EMBED_SCALE).permute(2, 0, 1)


def _resize(x: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    """
    Bilinear resize in ``x``'s own dtype, autocast or not.

    CUDA autocast runs upsampling in float32: a cast up, a float32 kernel writing twice the
    bytes, and a cast down at the next convolution. The kernel accumulates in float32 for
    any input dtype, so a low-precision input gives the same rounded values in one kernel.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        return F.interpolate(x, size=tuple(int(v) for v in size), mode='bilinear',
                             align_corners=True)


class _ResidualUnit(nn.Module):
    """conv2(relu(conv1(relu(x)))) + relu(x): the reference's effective arithmetic."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, 3, padding=1)
        self.conv2 = nn.Conv2d(features, features, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        return self.conv2(F.relu(self.conv1(x), inplace=True)).add_(x)


class _FusionBlock(nn.Module):
    """Add the (refined) skip, refine, resize, 1x1 conv."""

    def __init__(self, features: int, has_skip: bool) -> None:
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, 1)
        if has_skip:
            self.resConfUnit1 = _ResidualUnit(features)
        self.resConfUnit2 = _ResidualUnit(features)

    def forward(self, x: torch.Tensor, skip: torch.Tensor | None,
                size: Sequence[int]) -> torch.Tensor:
        if skip is not None:
            x = self.resConfUnit1(skip).add_(x)  # a + b == b + a, bit for bit
        return self.out_conv(_resize(self.resConfUnit2(x), size))


class DepthHead(nn.Module):
    """The reference DPT head; state-dict keys match ``depth_head.*`` of the checkpoints."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim = cfg.head_width
        dh = cfg.depth_head
        oc = dh.out_channels
        feats = dh.features
        self.patch_size = cfg.patch_size
        self.chunk = dh.frames_chunk_size
        self.norm = nn.LayerNorm(dim)
        self.projects = nn.ModuleList(nn.Conv2d(dim, c, 1) for c in oc)
        self.resize_layers = nn.ModuleList([
            nn.ConvTranspose2d(oc[0], oc[0], 4, stride=4),
            nn.ConvTranspose2d(oc[1], oc[1], 2, stride=2),
            nn.Identity(),
            nn.Conv2d(oc[3], oc[3], 3, stride=2, padding=1),
        ])
        scratch = nn.Module()
        for i, c in enumerate(oc, start=1):
            setattr(scratch, f'layer{i}_rn', nn.Conv2d(c, feats, 3, padding=1, bias=False))
        for i in range(1, 5):
            setattr(scratch, f'refinenet{i}', _FusionBlock(feats, has_skip=i != 4))
        scratch.output_conv1 = nn.Conv2d(feats, feats // 2, 3, padding=1)
        scratch.output_conv2 = nn.Sequential(
            nn.Conv2d(feats // 2, dh.head_features_2, 3, padding=1),
            nn.ReLU(),
            keep_float32(nn.Conv2d(dh.head_features_2, 2, 1)),
        )
        self.scratch = scratch
        self._pos_cache: dict = {}
        self.autocast_dtype: Optional[torch.dtype] = None  # None: float32, autocast off
        self.decoder: Optional[Callable] = None  # compiled decode_chunk; None: eager

    def forward(self, layer_outputs: List[torch.Tensor], image_hw: Tuple[int, int],
                patch_start: int = 6) -> Tuple[torch.Tensor, torch.Tensor]:
        """
        Decode the four selected layers' tokens ``[B, S, P, 2C]`` of an ``image_hw`` input.

        Tokens from ``patch_start`` on are the row-major patch grid. Returns depth
        ``[B, S, H, W, 1]`` (exp, positive) and confidence ``[B, S, H, W]`` (1 + exp).
        """
        if len(layer_outputs) != 4:
            raise ValueError(f'expected 4 layer outputs, got {len(layer_outputs)}')
        s = layer_outputs[0].shape[1]
        step = s if not self.chunk or self.chunk >= s else self.chunk
        positions = self._positions(image_hw, layer_outputs[0].device)
        decode = self.decoder or decode_chunk
        depths, confs = [], []
        for start in range(0, s, step):
            chunk = [t[:, start:start + step, patch_start:] for t in layer_outputs]
            d, c = decode(self, chunk, image_hw, positions)
            depths.append(d)
            confs.append(c)
        if len(depths) == 1:
            return depths[0], confs[0]
        return torch.cat(depths, dim=1), torch.cat(confs, dim=1)

    def _positions(self, image_hw: Tuple[int, int],
                   device: torch.device) -> Tuple[torch.Tensor, ...]:
        """Return the position maps a decode adds: one per projection, then the full-size one."""
        height, width = image_hw
        key = (height, width, str(device))
        maps = self._pos_cache.get(key)
        if maps is None:
            ph, pw = height // self.patch_size, width // self.patch_size
            aspect = width / height
            channels = [p.out_channels for p in self.projects]
            channels.append(self.scratch.output_conv1.out_channels)
            full = (ph * self.patch_size, pw * self.patch_size)
            sizes = [(ph, pw)] * len(self.projects) + [full]
            maps = tuple(position_embedding(h, w, c, aspect, device)
                         for (h, w), c in zip(sizes, channels))
            self._pos_cache[key] = maps
        return maps


def decode_chunk(head: DepthHead, layers: List[torch.Tensor], image_hw: Tuple[int, int],
                 positions: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Decode one chunk of frames: ``layers`` [B, S, P, 2C] patch tokens -> depth, confidence.

    A function of the head, not a method, so that ``torch.compile`` can route every call
    through one compiled graph per shape with the head's weights as inputs (see
    :func:`lingbot_ros.model.compiled.compile_depth_decoder`): in half precision the
    eager decoder is ~120 small kernels, its bias adds and resizes far below the memory
    bandwidth. ``positions`` are the head's position maps for ``image_hw``.
    """
    height, width = image_hw
    patch = head.patch_size
    ph, pw = height // patch, width // patch
    b, s = layers[0].shape[:2]
    low = head.autocast_dtype is not None
    with head_autocast(layers[0].device.type, head.autocast_dtype):
        feats = []
        for i, tokens in enumerate(layers):
            x = head.norm(tokens.float().reshape(b * s, ph * pw, tokens.shape[-1]))
            x = x.permute(0, 2, 1).reshape(b * s, -1, ph, pw)  # a channels-last view
            x = head.projects[i](x)
            x.add_(positions[i])
            feats.append(head.resize_layers[i](x))
        sc = head.scratch
        l1, l2, l3, l4 = (getattr(sc, f'layer{i + 1}_rn')(f) for i, f in enumerate(feats))
        feats = x = None  # let the projections go before the full-resolution stages
        out = sc.refinenet4(l4, None, l3.shape[2:])
        out = sc.refinenet3(out, l3, l2.shape[2:])
        out = sc.refinenet2(out, l2, l1.shape[2:])
        out = sc.refinenet1(out, l1, (2 * l1.shape[2], 2 * l1.shape[3]))
        out = _resize(sc.output_conv1(out), (ph * patch, pw * patch))
        out.add_(positions[-1])
        if low:
            last = sc.output_conv2[-1]
            out = float32_output(last, sc.output_conv2[:-1](out))
        else:
            out = sc.output_conv2(out)
        depth = out[:, 0].exp().reshape(b, s, out.shape[2], out.shape[3], 1)
        conf = (1 + out[:, 1].exp()).reshape(b, s, out.shape[2], out.shape[3])
    return depth, conf
