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
The network's structure as data: one model, many sizes.

``release`` is the structure of the published LingBot-Map checkpoints; ``tiny`` is a
small structure of the same shape for CPU tests and the bundled random-weight default.
The parity fixtures' ``config.json`` files map onto the same type
(:func:`ModelConfig.from_fixture`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import json
from pathlib import Path
from typing import Any, Mapping

SPECIAL_TOKENS = 6  # camera, 4 registers, scale: fixed by the token layout


class ConfigError(ValueError):
    """A configuration value outside what is allowed; the message names it."""


def _require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f'{name}={value!r} is invalid: expected {allowed}')


@dataclass(frozen=True)
class PatchEmbedConfig:
    """The DINOv2-with-registers ViT that turns each frame into patch tokens."""

    embed_dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    num_register_tokens: int = 4
    img_size: int = 518  # sizes the learned position grid only (img_size // patch_size)^2
    patch_size: int = 14


@dataclass(frozen=True)
class AggregatorConfig:
    """Alternating frame / global attention blocks over the per-frame tokens."""

    embed_dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    num_register_tokens: int = 4
    selected_layers: tuple[int, ...] = (4, 11, 17, 23)
    rope2d_frequency: float = 100.0
    rope3d_split: tuple[int, int, int] = (20, 22, 22)  # time, row, column dims of a head
    rope3d_theta: float = 10000.0
    max_frame_num: int = 1024  # rows of the temporal RoPE table

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads


@dataclass(frozen=True)
class CameraHeadConfig:
    """Iterative camera-token refinement trunk (width 2 * embed_dim)."""

    trunk_depth: int = 4
    num_heads: int = 16
    mlp_ratio: float = 4.0
    iterations: int = 4


@dataclass(frozen=True)
class DepthHeadConfig:
    """DPT depth head (depth + confidence)."""

    features: int = 256
    out_channels: tuple[int, int, int, int] = (256, 512, 1024, 1024)
    head_features_2: int = 32
    frames_chunk_size: int = 8


@dataclass(frozen=True)
class ModelConfig:
    """Everything that fixes the network's parameters and arithmetic."""

    name: str = 'release'
    patch_embed: PatchEmbedConfig = PatchEmbedConfig()
    aggregator: AggregatorConfig = AggregatorConfig()
    camera_head: CameraHeadConfig = CameraHeadConfig()
    depth_head: DepthHeadConfig = DepthHeadConfig()

    @property
    def patch_size(self) -> int:
        return self.patch_embed.patch_size

    @property
    def head_width(self) -> int:
        """Width of the tokens the heads read: concat(frame, global) outputs."""
        return 2 * self.aggregator.embed_dim

    def validate(self) -> 'ModelConfig':
        """Check cross-field rules once; return self so it chains."""
        agg, pe = self.aggregator, self.patch_embed
        _require(pe.embed_dim == agg.embed_dim, 'patch_embed.embed_dim', pe.embed_dim,
                 f'equal to aggregator.embed_dim ({agg.embed_dim})')
        for scope, cfg in (('patch_embed', pe), ('aggregator', agg)):
            _require(cfg.embed_dim % cfg.num_heads == 0, f'{scope}.num_heads', cfg.num_heads,
                     f'a divisor of embed_dim ({cfg.embed_dim})')
        _require(agg.num_register_tokens == SPECIAL_TOKENS - 2, 'aggregator.num_register_tokens',
                 agg.num_register_tokens, str(SPECIAL_TOKENS - 2))
        split = agg.rope3d_split
        _require(sum(split) == agg.head_dim and all(d % 2 == 0 for d in split),
                 'aggregator.rope3d_split', agg.rope3d_split,
                 f'three even numbers summing to head_dim ({agg.head_dim})')
        _require(agg.head_dim % 4 == 0, 'aggregator.head_dim', agg.head_dim, 'a multiple of 4')
        layers = agg.selected_layers
        _require(len(layers) == 4 and all(0 <= i < agg.depth for i in layers),
                 'aggregator.selected_layers', agg.selected_layers,
                 f'four block indices in [0, {agg.depth})')
        _require(self.head_width % self.camera_head.num_heads == 0, 'camera_head.num_heads',
                 self.camera_head.num_heads, f'a divisor of {self.head_width}')
        _require(self.camera_head.iterations >= 1, 'camera_head.iterations',
                 self.camera_head.iterations, '>= 1')
        _require(pe.img_size % pe.patch_size == 0, 'patch_embed.img_size', pe.img_size,
                 f'a multiple of patch_size ({pe.patch_size})')
        _require(agg.max_frame_num >= 2, 'aggregator.max_frame_num', agg.max_frame_num, '>= 2')
        return self

    # --- presets and (de)serialisation -------------------------------------------------

    @classmethod
    def preset(cls, name: str) -> 'ModelConfig':
        """Return a named structure: ``release`` or ``tiny``."""
        if name not in PRESETS:
            raise ConfigError(f'preset={name!r} is invalid: expected one of {sorted(PRESETS)}')
        return PRESETS[name]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'ModelConfig':
        """Build from :meth:`to_dict` output; unknown keys are errors."""
        def build(kind, values, scope):
            names = {f.name for f in dataclasses.fields(kind)}
            unknown = sorted(set(values) - names)
            if unknown:
                raise ConfigError(f'{scope}: unknown keys {unknown}; allowed {sorted(names)}')
            out = {}
            for f in dataclasses.fields(kind):
                if f.name not in values:
                    continue
                v = values[f.name]
                out[f.name] = tuple(v) if isinstance(v, list) else v
            return kind(**out)

        data = dict(data)
        parts = {'patch_embed': PatchEmbedConfig, 'aggregator': AggregatorConfig,
                 'camera_head': CameraHeadConfig, 'depth_head': DepthHeadConfig}
        top = build(cls, {k: v for k, v in data.items() if k not in parts}, 'model')
        sub = {k: build(kind, data.get(k, {}), k) for k, kind in parts.items()}
        return dataclasses.replace(top, **sub).validate()

    @classmethod
    def from_fixture(cls, data: Mapping[str, Any]) -> 'ModelConfig':
        """Map a parity fixture's ``config.json`` (upstream constructor terms) onto our type."""
        args = data['constructor_args']
        shrunk = data['shrunk_structure']
        pe, agg = shrunk['patch_embed'], shrunk['aggregator']
        cam, dpt = shrunk['camera_head'], shrunk['dpt']
        return cls(
            name=str(data.get('fixture', 'fixture')),
            patch_embed=PatchEmbedConfig(
                embed_dim=pe['embed_dim'], depth=pe['depth'], num_heads=pe['num_heads'],
                mlp_ratio=float(pe['mlp_ratio']), img_size=args['img_size'],
                patch_size=args['patch_size']),
            aggregator=AggregatorConfig(
                embed_dim=args['embed_dim'], depth=agg['depth'], num_heads=agg['num_heads'],
                mlp_ratio=float(agg['mlp_ratio']),
                num_register_tokens=agg['num_register_tokens'],
                selected_layers=tuple(agg['selected_idx']),
                rope3d_split=tuple(shrunk['rope3d_fhw_dim']),
                max_frame_num=args['max_frame_num']),
            camera_head=CameraHeadConfig(
                trunk_depth=cam['trunk_depth'], num_heads=cam['num_heads'],
                mlp_ratio=float(cam['mlp_ratio']), iterations=args['camera_num_iterations']),
            depth_head=DepthHeadConfig(features=dpt['features'],
                                       out_channels=tuple(dpt['out_channels'])),
        ).validate()

    @classmethod
    def load(cls, path: str | Path) -> 'ModelConfig':
        """Read a JSON file: a fixture ``config.json`` or our own ``to_dict`` form."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f'model config {path}: {exc}') from exc
        if 'constructor_args' in data:
            return cls.from_fixture(data)
        return cls.from_dict(data.get('model', data))


RELEASE = ModelConfig().validate()

TINY = ModelConfig(
    name='tiny',
    patch_embed=PatchEmbedConfig(embed_dim=32, depth=2, num_heads=2),
    aggregator=AggregatorConfig(embed_dim=32, depth=5, num_heads=2,
                                selected_layers=(0, 2, 3, 4), rope3d_split=(4, 6, 6)),
    camera_head=CameraHeadConfig(trunk_depth=2, num_heads=4),
    depth_head=DepthHeadConfig(features=8, out_channels=(4, 8, 16, 16)),
).validate()

PRESETS = {'release': RELEASE, 'tiny': TINY}
