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
The drift's weights: seeded random tensors under the released key names, and their file.

The reference's own initialisation leaves its heads near constant, so the drift draws its
own: every tensor by a recipe of its kind (below), from one seeded generator, in
state-dict order; both sides then load the same file strictly. Only our model's structure
is read here (on the meta device), so the file never needs the reference.
"""

import dataclasses
import enum
import json
import math
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from commits import REPO

import torch
from torch import nn

MANIFEST = REPO.parent / 'shared' / 'reference' / 'state_dict_manifest.json'

# The weight recipe (values = scale * N(0, 1) + offset).
MATRIX_GAIN = 1.0          # Linear / Conv weights: N(0, MATRIX_GAIN / fan_in)
NORM_STD, NORM_MEAN = 0.1, 1.0
BIAS_STD = 0.02
LAYER_SCALE_STD, LAYER_SCALE_MEAN = 0.02, 0.1
OTHER_STD = 0.5
# The pose branch's last layer: camera_head.pose_branch.fc2, 1024 -> 9 in the released model,
# out features [T (3), quaternion x y z w (4), fov_h, fov_w]. Its weight is scaled by 0.1 (its
# bias keeps the 0.02 draw); the offsets on the last three outputs keep the quaternion near
# identity (w) and both fields of view positive (they pass a ReLU).
POSE_LAST_LAYER = 'camera_head.pose_branch.fc2'
POSE_DIM = 9
POSE_WEIGHT_SCALE = 0.1
POSE_BIAS_OFFSET_LAST3 = (0.25, 0.3, 0.3)


class Draw(str, enum.Enum):
    """How one weight tensor is drawn."""

    MATRIX = 'linear/conv weight'
    NORM = 'layernorm weight'
    BIAS = 'bias'
    LAYER_SCALE = 'layer-scale gamma'
    OTHER = 'other'


RECIPE = {
    Draw.MATRIX.value: f'N(0, {MATRIX_GAIN:g}/fan_in); ConvTranspose fan_in = in * kh * kw / '
                       '(sh * sw)',
    Draw.NORM.value: f'{NORM_MEAN:g} + {NORM_STD:g} N(0, 1)',
    Draw.BIAS.value: f'{BIAS_STD:g} N(0, 1) (Linear, Conv and LayerNorm biases)',
    Draw.LAYER_SCALE.value: f'{LAYER_SCALE_MEAN:g} + {LAYER_SCALE_STD:g} N(0, 1)',
    Draw.OTHER.value: f'{OTHER_STD:g} N(0, 1) (tokens, position tables)',
    POSE_LAST_LAYER: f'weight x {POSE_WEIGHT_SCALE:g}; bias[-3:] += {POSE_BIAS_OFFSET_LAST3}',
    'order': 'one CPU torch.Generator seeded with --seed, tensors in state-dict order',
}


@dataclasses.dataclass(frozen=True)
class WeightSpec:
    """One tensor of the state dict and how it is drawn."""

    key: str
    shape: Tuple[int, ...]
    draw: Draw
    fan_in: float = 0.0


def draw_kind(module: nn.Module, name: str) -> Draw:
    """Return how the parameter ``name`` of ``module`` is drawn (works for either side)."""
    if name == 'bias':
        return Draw.BIAS
    if isinstance(module, nn.LayerNorm):
        return Draw.NORM
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)) and name == 'weight':
        return Draw.MATRIX
    if type(module).__name__ == 'LayerScale':
        return Draw.LAYER_SCALE
    return Draw.OTHER


def fan_in(module: nn.Module, shape: Sequence[int]) -> float:
    """Return the inputs that reach one output of a Linear or Conv weight of ``shape``."""
    if isinstance(module, nn.ConvTranspose2d):
        return shape[0] * math.prod(shape[2:]) / math.prod(module.stride)
    return float(math.prod(shape[1:]))


def categories(model: nn.Module) -> Dict[str, Draw]:
    """Return the draw of every state-dict tensor of ``model`` (keys in state-dict order)."""
    out = {}
    for key in model.state_dict(keep_vars=True):
        prefix, _, name = key.rpartition('.')
        out[key] = draw_kind(model.get_submodule(prefix), name)
    return out


def weight_plan(preset: str) -> List[WeightSpec]:
    """Return every tensor of our model of ``preset`` (released key names) with its draw."""
    from lingbot_ros.model.config import ModelConfig
    from lingbot_ros.model.network import LingBotMap
    with torch.device('meta'):
        model = LingBotMap(ModelConfig.preset(preset))
    plan = []
    for key, tensor in model.state_dict(keep_vars=True).items():
        prefix, _, name = key.rpartition('.')
        module = model.get_submodule(prefix)
        kind = draw_kind(module, name)
        fan = fan_in(module, tensor.shape) if kind is Draw.MATRIX else 0.0
        plan.append(WeightSpec(key, tuple(tensor.shape), kind, fan))
    pose = [s for s in plan if s.key.startswith(POSE_LAST_LAYER + '.')]
    if sorted(s.key for s in pose) != [f'{POSE_LAST_LAYER}.bias', f'{POSE_LAST_LAYER}.weight'] \
            or any(s.shape[0] != POSE_DIM for s in pose):
        raise RuntimeError(f'{POSE_LAST_LAYER} is not a {POSE_DIM}-output Linear in preset '
                           f'{preset}: {[(s.key, s.shape) for s in pose]}')
    return plan


def draw_weights(plan: Sequence[WeightSpec], seed: int) -> Dict[str, torch.Tensor]:
    """Draw float32 CPU tensors for ``plan`` from one seeded generator, in plan order."""
    gen = torch.Generator().manual_seed(int(seed))
    out = {}
    for spec in plan:
        x = torch.randn(spec.shape, generator=gen, dtype=torch.float32)
        if spec.draw is Draw.MATRIX:
            x.mul_(math.sqrt(MATRIX_GAIN / spec.fan_in))
        elif spec.draw is Draw.NORM:
            x.mul_(NORM_STD).add_(NORM_MEAN)
        elif spec.draw is Draw.BIAS:
            x.mul_(BIAS_STD)
        elif spec.draw is Draw.LAYER_SCALE:
            x.mul_(LAYER_SCALE_STD).add_(LAYER_SCALE_MEAN)
        else:
            x.mul_(OTHER_STD)
        if spec.key == f'{POSE_LAST_LAYER}.weight':
            x.mul_(POSE_WEIGHT_SCALE)
        elif spec.key == f'{POSE_LAST_LAYER}.bias':
            x[-len(POSE_BIAS_OFFSET_LAST3):] += torch.tensor(POSE_BIAS_OFFSET_LAST3)
        out[spec.key] = x
    return out


def manifest_check(plan: Sequence[WeightSpec], path: Path = MANIFEST) -> str:
    """Say whether ``plan`` has exactly the released manifest's keys and shapes."""
    if not path.is_file():
        return f'not checked ({path} absent); the reference loads the same file strictly'
    keys = json.loads(path.read_text())['keys']
    ours = {s.key: list(s.shape) for s in plan}
    if ours == keys:
        return f'equal to {path.name}: {len(keys)} keys, same shapes'
    missing = sorted(set(keys) - set(ours))
    extra = sorted(set(ours) - set(keys))
    shapes = sorted(k for k in set(keys) & set(ours) if keys[k] != ours[k])
    return (f'DIFFERS from {path.name}: {len(missing)} missing {missing[:3]}, {len(extra)} '
            f'extra {extra[:3]}, {len(shapes)} shapes {shapes[:3]}')


def write_checkpoint(plan: Sequence[WeightSpec], seed: int, path: Path, preset: str) -> dict:
    """Draw the weights of ``plan`` and write them to ``path``; return what describes them."""
    from safetensors.torch import save_file
    state = draw_weights(plan, seed)
    save_file(state, str(path))
    return {'tensors': len(state), 'params': int(sum(v.numel() for v in state.values())),
            'manifest': manifest_check(plan) if preset == 'release' else
            f'not applicable (preset {preset})', 'recipe': RECIPE,
            'draw_counts': {d.value: sum(s.draw is d for s in plan) for d in Draw},
            'pose_last_layer': POSE_LAST_LAYER,
            'fingerprint': float(sum(float(v.sum(dtype=torch.float64))
                                     for v in state.values()))}
