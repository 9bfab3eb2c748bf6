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
Checkpoints in, model out: strict, pickle-free, and without a second copy of the weights.

``.pt`` / ``.pth`` files are read with ``torch.load(weights_only=True)`` (memory-mapped
where the format allows), the state dict taken from the top level or from ``'model'``;
``.safetensors`` files are read tensor by tensor. The model is built on the meta device
and the loaded tensors are assigned into it, so a 1.16 B-parameter checkpoint needs its
own size in memory once, not twice. Any missing, unexpected or mis-shaped key is an
error naming the file and the keys.
"""

from __future__ import annotations

import math
from pathlib import Path
import pickle
from typing import Dict, Iterable, Mapping, Optional, Union

import torch
from torch import nn

from .config import ModelConfig
from .layers import LayerScale
from .network import LingBotMap

PathLike = Union[str, Path]
TORCH_SUFFIXES = ('.pt', '.pth')
SAFETENSORS_SUFFIX = '.safetensors'
SHOW_KEYS = 5

# Seeded random weights: the parity fixtures' recipe (fixture config.json,
# 'weights.rerandomise_rules'); every path is non-zero and activations stay O(1).
BIAS_STD = 0.05
NORM_WEIGHT_MEAN, NORM_WEIGHT_STD = 1.0, 0.1
LAYERSCALE_MEAN, LAYERSCALE_STD = 0.2, 0.05
FREE_PARAM_STD = 0.5
# Last layer of the camera pose branch: small, biased so fov > 0 and rotation ~ identity.
POSE_FC2_WEIGHT_SCALE = 0.1
POSE_FC2_BIAS_STD = 0.02
POSE_FC2_BIAS_OFFSET = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.25, 0.3, 0.3)


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the file and the reason."""


def _keys_text(keys: Iterable[str]) -> str:
    keys = sorted(keys)
    head = ', '.join(keys[:SHOW_KEYS])
    more = f', ... ({len(keys) - SHOW_KEYS} more)' if len(keys) > SHOW_KEYS else ''
    return f'{len(keys)} ({head}{more})'


def read_state_dict(path: PathLike) -> Dict[str, torch.Tensor]:
    """Read a state dict (CPU tensors, memory-mapped where possible) from a checkpoint file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f'checkpoint {path}: no such file')
    suffix = path.suffix.lower()
    if suffix == SAFETENSORS_SUFFIX:
        return _read_safetensors(path)
    if suffix in TORCH_SUFFIXES:
        return _read_torch(path)
    raise CheckpointError(f'checkpoint {path}: unknown format {suffix!r}; expected one of '
                          f'{TORCH_SUFFIXES + (SAFETENSORS_SUFFIX,)}')


def _read_safetensors(path: Path) -> Dict[str, torch.Tensor]:
    from safetensors import safe_open
    from safetensors import SafetensorError
    try:
        with safe_open(str(path), framework='pt', device='cpu') as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f'checkpoint {path}: not a readable safetensors file: {exc}') \
            from exc


def _read_torch(path: Path) -> Dict[str, torch.Tensor]:
    def load(mmap: bool):
        return torch.load(path, map_location='cpu', weights_only=True, mmap=mmap)

    try:
        try:
            obj = load(mmap=True)
        except RuntimeError as exc:  # legacy (non-zip) files cannot be memory-mapped
            if 'mmap' not in str(exc):
                raise
            obj = load(mmap=False)
    except pickle.UnpicklingError as exc:
        reason = [ln.strip() for ln in str(exc).splitlines() if 'Unsupported' in ln]
        raise CheckpointError(
            f'checkpoint {path}: refused: it holds objects other than tensors and plain '
            f'containers, and code is never unpickled ({(reason or [str(exc)])[0][:300]})') \
            from exc
    except (RuntimeError, OSError, EOFError) as exc:
        raise CheckpointError(f'checkpoint {path}: not a readable PyTorch file: {exc}') from exc
    if isinstance(obj, Mapping) and isinstance(obj.get('model'), Mapping):
        obj = obj['model']
    if not isinstance(obj, Mapping):
        raise CheckpointError(f'checkpoint {path}: expected a state dict (or one under '
                              f"'model'), found {type(obj).__name__}")
    not_tensors = [str(k) for k, v in obj.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise CheckpointError(f'checkpoint {path}: entries that are not tensors: '
                              f'{_keys_text(not_tensors)}')
    return dict(obj)


def check_state_dict(state: Mapping[str, torch.Tensor], model: nn.Module,
                     source: str) -> None:
    """Raise :class:`CheckpointError` unless ``state`` has exactly the model's keys and shapes."""
    expected = model.state_dict()
    missing = set(expected) - set(state)
    unexpected = set(state) - set(expected)
    wrong = [f'{k} {list(state[k].shape)} vs {list(expected[k].shape)}'
             for k in sorted(set(state) & set(expected)) if state[k].shape != expected[k].shape]
    problems = []
    if missing:
        problems.append(f'missing keys {_keys_text(missing)}')
    if unexpected:
        problems.append(f'unexpected keys {_keys_text(unexpected)}')
    if wrong:
        problems.append(f'wrong shapes (checkpoint vs model) {_keys_text(wrong)}')
    if problems:
        raise CheckpointError(f'checkpoint {source} does not fit model {model_name(model)}: '
                              + '; '.join(problems))


def model_name(model: nn.Module) -> str:
    cfg = getattr(model, 'cfg', None)
    return repr(cfg.name) if cfg is not None else type(model).__name__


def _build_meta(cfg: ModelConfig) -> LingBotMap:
    with torch.device('meta'):
        return LingBotMap(cfg)


def _finish(model: LingBotMap, device: torch.device,
            autocast_dtype: Optional[torch.dtype]) -> LingBotMap:
    model.aggregator.init_buffers(device)
    leftover = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
                if t.is_meta]
    if leftover:
        raise CheckpointError(f'tensors left unmaterialised: {_keys_text(leftover)}')
    model.set_autocast_dtype(autocast_dtype)
    return model.eval().requires_grad_(False)


def load_model(cfg: ModelConfig, checkpoint: Optional[PathLike] = None,
               device: Union[str, torch.device] = 'cpu', dtype: torch.dtype = torch.float32,
               seed: int = 0, autocast_dtype: Optional[torch.dtype] = None) -> LingBotMap:
    """
    Build the model for inference: from ``checkpoint`` strictly, or seeded random weights.

    ``dtype`` is the storage dtype of the weights (fp32 as released); ``autocast_dtype``
    (None, bf16, fp16) casts the aggregator and runs it under autocast, as the
    reference GPU demo does.
    """
    device = torch.device(device)
    if checkpoint is None:
        model = random_init(cfg, seed, device=device, dtype=dtype)
        return _finish(model, device, autocast_dtype)
    state = read_state_dict(checkpoint)
    model = _build_meta(cfg)
    check_state_dict(state, model, str(checkpoint))
    state = {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype)
             for k, v in state.items()}
    model.load_state_dict(state, strict=True, assign=True)
    return _finish(model, device, autocast_dtype)


def random_init(cfg: ModelConfig, seed: int, device: Union[str, torch.device] = 'cpu',
                dtype: torch.dtype = torch.float32) -> LingBotMap:
    """
    Return a model with seeded random weights of sane scale (same seed, same device: same).

    Linear/conv weights N(0, 1/fan_in), biases N(0, 0.05^2), LayerNorm N(1, 0.1^2) /
    N(0, 0.05^2), LayerScale N(0.2, 0.05^2), free tokens and tables N(0, 0.5^2); the
    pose branch's last layer is scaled down and offset so the field of view is positive.
    """
    device = torch.device(device)
    model = _build_meta(cfg).to_empty(device=device).to(dtype)
    gen = torch.Generator(device=device).manual_seed(int(seed))
    with torch.no_grad():
        for module in model.modules():
            for name, param in module.named_parameters(recurse=False):
                mean, std = _init_stats(module, name, param)
                param.normal_(mean, std, generator=gen)
        fc2 = model.camera_head.pose_branch.fc2
        fc2.weight.mul_(POSE_FC2_WEIGHT_SCALE)
        fc2.bias.normal_(0.0, POSE_FC2_BIAS_STD, generator=gen)
        fc2.bias.add_(torch.tensor(POSE_FC2_BIAS_OFFSET, dtype=dtype, device=device))
    model.aggregator.init_buffers(device)
    return model.eval()


def _init_stats(module: nn.Module, name: str, param: torch.Tensor) -> tuple:
    """Return (mean, std) of the random draw for one parameter."""
    if isinstance(module, nn.LayerNorm):
        return (NORM_WEIGHT_MEAN, NORM_WEIGHT_STD) if name == 'weight' else (0.0, BIAS_STD)
    if isinstance(module, LayerScale):
        return LAYERSCALE_MEAN, LAYERSCALE_STD
    if isinstance(module, (nn.Linear, nn.Conv2d, nn.ConvTranspose2d)):
        if name == 'bias':
            return 0.0, BIAS_STD
        if isinstance(module, nn.ConvTranspose2d):
            fan_in = param.shape[0] * param[0, 0].numel() / math.prod(module.stride)
        else:
            fan_in = param[0].numel()
        return 0.0, 1.0 / math.sqrt(fan_in)
    return 0.0, FREE_PARAM_STD
