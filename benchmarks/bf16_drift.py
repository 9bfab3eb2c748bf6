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
#
# ---------------------------------------------------------------------------------------------
# On the GPU machine: prepare .reference/ and .whl.tar.xz as the top of side_by_side.py says,
# copy the courthouse frames to .data/courthouse (git-ignored), then one device call, carry
# [".whl.tar.xz", ".reference", ".data"], timeout 600:
#
#   rm -rf .site .whl; tar -xJf .whl.tar.xz && python3 -m pip install -q --no-index \
#   --no-deps --no-compile --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD \
#   MAX_JOBS=16 PYTHONUNBUFFERED=1 || exit; python3 benchmarks/bf16_drift.py --reference \
#   .reference --images .data/courthouse --out $OUT
#
# The weights file (4.6 GB) goes to a temporary folder, never under $OUT. Should one call not
# be enough, add --work .drift_work and repeat the call with --resume on the still-warm machine:
# the runs that finished are reused. A CPU smoke run (the released structure, tiny settings;
# the reference also needs einops and scipy importable):
#
#   .venv/bin/python benchmarks/bf16_drift.py --reference .reference --frames 12 \
#   --scale-frames 3 --sliding-window 4 --image-size 84 --device cpu --out /tmp/drift
# ---------------------------------------------------------------------------------------------

"""
bf16 drift of our model and of the reference, each against the reference in float32.

Why: "ours in bf16 drifts no more than the reference in bf16" needs both sides run on the
same weights and the same real images, and compared against one yardstick. This script
draws one set of seeded random weights whose outputs vary (the reference's own init leaves
the heads near constant) under the released checkpoint's key names, preprocesses the
courthouse frames once with our preprocessing, and plays them ping-pong (0..47, 46..1, 0..)
up to ``--frames``. Each run goes in a child process of this script (the reference's
imports never meet ours):

- ``ours-fp32``, ``ours-bf16`` (autocast as our Engine runs it; our default back end: FlashInfer
  on CUDA, SDPA elsewhere), ``ours-bf16-fp8cache`` (``kv_cache_dtype: float8_e4m3``; CUDA only),
  ``ours-bf16-heads`` (``ours-bf16`` with the camera and depth heads under autocast too,
  ``head_dtype: compute``), ``ours-bf16-heads16`` (the heads under float16 autocast,
  ``head_dtype: float16``), ``ours-bf16-heads16-compiled`` (that with ``torch_compile:
  true``, as ``side_by_side.py --ours-compile --ours-head-dtype float16`` times it),
  ``ours-bf16-weights`` (``weights_dtype: compute``: the heads'
  linear and convolution weights in bf16, computing in float32, as the 8 GB profile),
  through our public streaming API (Engine, Session);
- ``ref-fp32`` (its SDPA path, ``use_sdpa=True``) and ``ref-bf16`` (on CUDA its FlashInfer path
  under bf16 autocast with the aggregator cast to bf16, as its demo does; on a CPU only a smoke
  check: SDPA under CPU autocast), from the checkout named by ``--reference``, loaded strictly.

Float32 runs switch TF32 off (a true float32 yardstick); bf16 runs keep PyTorch's defaults, as
deployed. Every run is compared with ``ref-fp32`` (per frame: camera rotation angle,
translation, median and p90 relative depth error, field of view) and every bf16 run also with
its own side's float32 run. ``--out DIR`` receives ``bf16_drift.json`` (settings, versions,
device, date, wall times, per-frame errors), ``bf16_drift.txt`` (the tables) and
``bf16_drift.log`` (the children's output). Commands: see the comment above.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import hashlib
import importlib.metadata
import json
import math
import os
import pathlib
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple, TYPE_CHECKING

import numpy as np

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import side_by_side  # noqa: E402,I100 (the commits, found as the side-by-side run finds them)

if TYPE_CHECKING:
    from lingbot_ros.streaming.config import HeadDtype

Path = pathlib.Path
REPO = Path(__file__).resolve().parents[1]
IMAGE_FOLDERS = (REPO.parent / 'shared' / 'data' / 'courthouse', REPO / '.data' / 'courthouse')
MANIFEST = REPO.parent / 'shared' / 'reference' / 'state_dict_manifest.json'
NAME = 'bf16_drift'
CHILD_TIMEOUT_S = 1500.0

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

# The issue's figures (140 frames, 68 evictions, each against the reference in float32).
ISSUE_FIGURES = {
    'ref-bf16': {'rotation_mean_deg': 0.157, 'depth_median_pct': 0.14},
    'ours-bf16': {'rotation_mean_deg': 0.263, 'depth_median_pct': 0.43},
    'ours-bf16-fp8cache': {'rotation_mean_deg': 0.245, 'depth_median_pct': 0.43},
}


class Side(str, enum.Enum):
    """Which implementation a run uses."""

    OURS = 'ours'
    REFERENCE = 'reference'


class RunKind(str, enum.Enum):
    """One model run: implementation, precision and cache storage."""

    OURS_FP32 = 'ours-fp32'
    OURS_BF16 = 'ours-bf16'
    OURS_BF16_FP8 = 'ours-bf16-fp8cache'
    OURS_BF16_HEADS = 'ours-bf16-heads'
    OURS_BF16_HEADS16 = 'ours-bf16-heads16'
    OURS_BF16_HEADS16_COMPILED = 'ours-bf16-heads16-compiled'
    OURS_BF16_WEIGHTS = 'ours-bf16-weights'
    REF_FP32 = 'ref-fp32'
    REF_BF16 = 'ref-bf16'

    @property
    def side(self) -> Side:
        """Return the implementation."""
        return Side.REFERENCE if self.value.startswith('ref-') else Side.OURS

    @property
    def bf16(self) -> bool:
        """Return whether the run computes in bfloat16 (autocast)."""
        return '-bf16' in self.value

    @property
    def fp8_cache(self) -> bool:
        """Return whether the aggregator's KV cache is stored in float8 e4m3."""
        return self is RunKind.OURS_BF16_FP8

    @property
    def head_dtype(self) -> 'HeadDtype':
        """Return our ``head_dtype`` for the run: what the heads compute in."""
        from lingbot_ros.streaming.config import HeadDtype  # ours only in our children
        return {RunKind.OURS_BF16_HEADS: HeadDtype.COMPUTE,
                RunKind.OURS_BF16_HEADS16: HeadDtype.FLOAT16,
                RunKind.OURS_BF16_HEADS16_COMPILED: HeadDtype.FLOAT16}.get(self,
                                                                           HeadDtype.FLOAT32)

    @property
    def compiled(self) -> bool:
        """Return whether the run has ``torch_compile`` on (as side_by_side.py times ours)."""
        return self is RunKind.OURS_BF16_HEADS16_COMPILED

    @property
    def low_weights(self) -> bool:
        """Return whether the heads keep their weights in bfloat16 (``weights_dtype: compute``)."""
        return self is RunKind.OURS_BF16_WEIGHTS

    @property
    def own_fp32(self) -> 'RunKind':
        """Return the float32 run of the same side."""
        return RunKind.REF_FP32 if self.side is Side.REFERENCE else RunKind.OURS_FP32


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
class Settings:
    """What every run of one benchmark shares."""

    preset: str = 'release'
    frames: int = 140
    scale_frames: int = 8
    sliding_window: int = 64
    camera_iterations: int = 4
    image_size: int = 518
    seed: int = 0
    device: str = 'cpu'
    backend: str = 'auto'  # our attention back end ('auto': FlashInfer on CUDA, else SDPA)
    trace: bool = False    # keep a token sample of every block's output in the scale call

    @property
    def evictions(self) -> int:
        """Return the window frames pushed out over the run (every frame a keyframe)."""
        return max(0, self.frames - self.scale_frames - self.sliding_window)

    @property
    def first_evicting_frame(self) -> int:
        """Return the index of the first frame whose arrival evicts a window frame."""
        return self.scale_frames + self.sliding_window


@dataclasses.dataclass(frozen=True)
class WeightSpec:
    """One tensor of the state dict and how it is drawn."""

    key: str
    shape: Tuple[int, ...]
    draw: Draw
    fan_in: float = 0.0


# --------------------------------------------------------------------------- weights


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


# --------------------------------------------------------------------------- images


def ping_pong(images: int, frames: int) -> List[int]:
    """Return ``frames`` indices into ``images`` frames: 0..n-1, n-2..1, 0.. (no repeats)."""
    if images < 1:
        raise ValueError('no images to play')
    if images == 1:
        return [0] * frames
    period = 2 * (images - 1)
    return [p if p < images else period - p for p in (i % period for i in range(frames))]


def find_images(given: Optional[str]) -> Path:
    """Return the courthouse folder: ``given``, else the shared copy, else ``.data/``."""
    if given:
        for path in (Path(given), REPO / given):
            if path.is_dir():
                return path.resolve()
        raise FileNotFoundError(f'--images {given}: no such folder')
    for path in IMAGE_FOLDERS:
        if path.is_dir():
            return path.resolve()
    raise FileNotFoundError(f'no courthouse images in {[str(p) for p in IMAGE_FOLDERS]}; '
                            'pass --images')


def image_stack(folder: Path, settings: Settings) -> Tuple[torch.Tensor, List[int], dict]:
    """Preprocess the folder's images as our tools do; return the ping-pong stack and info."""
    from lingbot_ros.model.config import ModelConfig
    from lingbot_ros.streaming.preprocess import list_images, load_images
    paths = list_images(folder)
    patch = ModelConfig.preset(settings.preset).patch_size
    base = load_images(paths, settings.image_size, patch)
    order = ping_pong(len(paths), settings.frames)
    stack = base[order].contiguous()
    info = {'folder': str(folder), 'files': len(paths), 'first': paths[0].name,
            'last': paths[-1].name, 'model_hw': list(stack.shape[-2:]),
            'preprocessing': f'lingbot_ros.streaming.preprocess.load_images(image_size='
                             f'{settings.image_size}, patch_size={patch})',
            'order': 'ping-pong ' + ','.join(map(str, order[:3])) + ',...,'
                     + ','.join(map(str, order[-3:])),
            'sha256': hashlib.sha256(stack.numpy().tobytes()).hexdigest()}
    return stack, order, info


# --------------------------------------------------------------------------- comparison


def quaternion_matrices(q: np.ndarray) -> np.ndarray:
    """Return rotations ``[S, 3, 3]`` (float64) of scalar-last quaternions ``[S, 4]``."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    x, y, z, w = np.moveaxis(q, -1, 0)
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], -1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], -1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], -1),
    ], -2)


def rotation_angle_deg(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Return the angle (degrees) of ``ra^T rb`` per frame; accurate for tiny angles too."""
    rel = np.einsum('sji,sjk->sik', ra, rb)
    axis = np.stack([rel[:, 2, 1] - rel[:, 1, 2], rel[:, 0, 2] - rel[:, 2, 0],
                     rel[:, 1, 0] - rel[:, 0, 1]], -1)
    sin = np.linalg.norm(axis, axis=-1) / 2
    cos = (np.trace(rel, axis1=1, axis2=2) - 1) / 2
    return np.degrees(np.arctan2(sin, cos))


def compare(run: Dict[str, np.ndarray], base: Dict[str, np.ndarray],
            first_evicting: int) -> dict:
    """
    Errors of ``run`` against ``base`` (``pose_enc [S, 9]``, ``depth [S, H, W]``).

    Returns ``summary`` (means, maxima, pixel quantiles) and ``per_frame`` lists: rotation
    angle of the camera rotations (deg), translation distance, median and p90 of
    ``|d - d_base| / |d_base|`` (%), largest field-of-view difference (rad).
    """
    a, b = np.asarray(run['pose_enc'], np.float64), np.asarray(base['pose_enc'], np.float64)
    if a.shape != b.shape:
        raise ValueError(f'pose_enc shapes differ: {a.shape} vs {b.shape}')
    rot = rotation_angle_deg(quaternion_matrices(a[:, 3:7]), quaternion_matrices(b[:, 3:7]))
    trans = np.linalg.norm(a[:, :3] - b[:, :3], axis=-1)
    trans_scale = float(np.sqrt(np.mean(np.sum(b[:, :3] ** 2, axis=-1))))
    fov = np.abs(a[:, 7:9] - b[:, 7:9]).max(axis=-1)
    da, db = np.asarray(run['depth'], np.float64), np.asarray(base['depth'], np.float64)
    if da.shape != db.shape:
        raise ValueError(f'depth shapes differ: {da.shape} vs {db.shape}')
    rel = (np.abs(da - db) / np.maximum(np.abs(db), np.finfo(np.float64).tiny)).reshape(
        len(db), -1) * 100
    late = slice(first_evicting, None)
    summary = {
        'rotation_mean_deg': float(rot.mean()),
        'rotation_max_deg': float(rot.max()),
        'rotation_mean_deg_evicting': float(rot[late].mean()) if len(rot[late]) else None,
        'translation_mean': float(trans.mean()),
        'translation_max': float(trans.max()),
        'translation_rms_of_base': trans_scale,
        'translation_mean_rel': float(trans.mean() / max(trans_scale, 1e-30)),
        'depth_median_pct': float(np.median(rel)),
        'depth_p90_pct': float(np.quantile(rel, 0.9)),
        'depth_frame_median_max_pct': float(np.median(rel, axis=1).max()),
        'fov_max_rad': float(fov.max()),
        'pose_enc_max_abs': float(np.abs(a - b).max()),
        'frames': int(len(rot)),
    }
    per_frame = {
        'rotation_deg': _rounded(rot),
        'translation': _rounded(trans),
        'depth_median_pct': _rounded(np.median(rel, axis=1)),
        'depth_p90_pct': _rounded(np.quantile(rel, 0.9, axis=1)),
        'fov_rad': _rounded(fov),
    }
    return {'summary': summary, 'per_frame': per_frame}


def _rounded(x: np.ndarray) -> List[float]:
    return [float(f'{v:.4g}') for v in np.asarray(x, np.float64)]


# --------------------------------------------------------------------------- children


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def set_float32_matmuls(strict: bool) -> dict:
    """Switch TF32 off (strict) or leave PyTorch's defaults; return the resulting flags."""
    if strict:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return {'matmul_tf32': bool(torch.backends.cuda.matmul.allow_tf32),
            'cudnn_tf32': bool(torch.backends.cudnn.allow_tf32)}


def device_name(device: torch.device) -> str:
    """Return a readable name of ``device``."""
    if device.type == 'cuda':
        return torch.cuda.get_device_name(device)
    return f'CPU {platform.processor() or platform.machine()} ({os.cpu_count()} cores, ' \
           f'{torch.get_num_threads()} torch threads)'


# --------------------------------------------------------------------------- layer trace
#
# Where does one side's bf16 path leave float32 faster than the other's? With --trace each
# run keeps a sample of every transformer block's output in its first model call (the scale
# call: the same images, the same weights on both sides, module names as released), and the
# report gives, block by block, each bf16 run's relative distance from the reference's
# float32 run: the block where ours starts to grow away faster is where its rounding differs.

TRACE_STRIDE = 7  # every 7th token row of a traced output is kept (the same rows on both sides)


def traced_modules(preset: str) -> List[str]:
    """Name the modules whose first-call outputs ``--trace`` keeps, in the order they run."""
    from lingbot_ros.model.config import ModelConfig
    cfg = ModelConfig.preset(preset)
    names = [f'aggregator.patch_embed.blocks.{j}' for j in range(cfg.patch_embed.depth)]
    names.append('aggregator.patch_embed.norm')
    for i in range(cfg.aggregator.depth):
        names += [f'aggregator.frame_blocks.{i}', f'aggregator.global_blocks.{i}']
    # the camera head's trunk, in its first refinement iteration (float32 on both sides
    # unless the heads run in bf16), and the depth head's fusion stages, coarse to fine
    names += [f'camera_head.trunk.{k}' for k in range(cfg.camera_head.trunk_depth)]
    names += [f'depth_head.scratch.refinenet{k}' for k in (4, 3, 2, 1)]
    names.append('depth_head.scratch.output_conv1')
    return names


class FirstCallTrace:
    """A sample (every TRACE_STRIDE-th token) of named modules' outputs in the first call."""

    def __init__(self, model: nn.Module, names: Sequence[str]) -> None:
        modules = dict(model.named_modules())
        self.outputs: Dict[str, np.ndarray] = {}
        self.missing = [n for n in names if n not in modules]
        self._handles = [modules[n].register_forward_hook(self._keeper(n))
                         for n in names if n in modules]

    def _keeper(self, name: str):
        def keep(module: nn.Module, args: tuple, output: object) -> None:
            if name in self.outputs or not torch.is_tensor(output):
                return
            rows = output.detach().reshape(-1, output.shape[-1])[::TRACE_STRIDE]
            self.outputs[name] = rows.float().cpu().numpy()
        return keep

    def close(self) -> Dict[str, np.ndarray]:
        """Remove the hooks; return what was kept, keyed ``trace/<module>``."""
        for handle in self._handles:
            handle.remove()
        return {f'trace/{k}': v for k, v in self.outputs.items()}


def relative_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Return ``||a - b|| / ||b||`` (float64), or NaN when the shapes differ."""
    if a.shape != b.shape:
        return float('nan')
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a64 - b64) / max(np.linalg.norm(b64), 1e-30))


def trace_rows(arrays: Dict['RunKind', Dict[str, np.ndarray]], names: Sequence[str],
               baseline: 'RunKind') -> List[dict]:
    """Per traced module: each other run's relative distance from ``baseline``'s output."""
    rows = []
    for name in names:
        key = f'trace/{name}'
        if key not in arrays.get(baseline, {}):
            continue
        row = {'module': name}
        for run, data in arrays.items():
            if run is not baseline and key in data:
                row[run.value] = relative_distance(data[key], arrays[baseline][key])
        rows.append(row)
    return rows


def trace_table(rows: Sequence[dict], baseline: str) -> List[str]:
    """Return the trace rows as aligned text (relative distance from ``baseline``)."""
    runs = sorted({k for r in rows for k in r if k != 'module'})
    if not rows or not runs:
        return []
    head = f"{'module (scale call)':36s}" + ''.join(f'{r:>20s}' for r in runs)
    lines = [f'layer trace: ||run - {baseline}|| / ||{baseline}|| of each block output, '
             f'every {TRACE_STRIDE}th token', head, '-' * len(head)]
    for r in rows:
        lines.append(f"{r['module']:36s}"
                     + ''.join(f"{_num(r[k]) if k in r else '-':>20s}" for k in runs))
    return lines


def run_ours(run: RunKind, settings: Settings, weights: Path,
             images: torch.Tensor) -> Tuple[Dict[str, np.ndarray], dict]:
    """Stream ``images`` through our Engine/Session; return (arrays, facts of the run)."""
    from lingbot_ros.streaming.config import (EngineConfig, KvCacheDtype,
                                              StreamConfig, WeightsDtype)
    from lingbot_ros.streaming.engine import Engine
    from lingbot_ros.streaming.result import FrameType
    tf32 = set_float32_matmuls(strict=not run.bf16)
    t0 = time.perf_counter()
    cfg = EngineConfig(checkpoint=str(weights), preset=settings.preset, device=settings.device,
                       dtype='bfloat16' if run.bf16 else 'float32',
                       attention_backend=settings.backend if run.bf16 else 'auto',
                       seed=settings.seed,
                       kv_cache_dtype=KvCacheDtype.FLOAT8_E4M3 if run.fp8_cache
                       else KvCacheDtype.AUTO,
                       head_dtype=run.head_dtype,
                       weights_dtype=WeightsDtype.COMPUTE if run.low_weights
                       else WeightsDtype.AUTO,
                       torch_compile=run.compiled)
    engine = Engine.load(cfg, progress=lambda msg: print(f'[{run.value}] {msg}', flush=True))
    load_s = time.perf_counter() - t0
    stream = StreamConfig(scale_frames=settings.scale_frames,
                          sliding_window=settings.sliding_window, keyframe_interval=1,
                          camera_iterations=settings.camera_iterations,
                          max_window_frames=max(settings.frames, settings.scale_frames + 1))
    session = engine.new_session(NAME, stream)
    trace = FirstCallTrace(engine.model, traced_modules(settings.preset)) \
        if settings.trace else None
    _sync(engine.device)
    t0 = time.perf_counter()
    out = session.run(images)
    _sync(engine.device)
    inference_s = time.perf_counter() - t0
    stats = session.stats()
    kinds = [int(t) for t in out.arrays['frame_type']]
    expected = [int(FrameType.SCALE)] * min(settings.scale_frames, len(kinds)) + \
        [int(FrameType.KEYFRAME)] * max(0, len(kinds) - settings.scale_frames)
    problems = []
    if kinds != expected:
        problems.append(f'frame types {kinds} are not scale frames then keyframes')
    if 'window_index' in out.arrays:
        problems.append('the session opened a second window')
    if stats.evictions != settings.evictions:
        problems.append(f'{stats.evictions} evictions, expected {settings.evictions}')
    if problems:
        raise RuntimeError(f'{run.value}: ' + '; '.join(problems))
    arrays = {'pose_enc': np.asarray(out.arrays['pose_enc'], np.float32),
              'depth': np.asarray(out.arrays['depth'][..., 0], np.float32)}
    if trace is not None:
        arrays.update(trace.close())
    facts = {'load_s': round(load_s, 2), 'inference_s': round(inference_s, 2),
             'ms_per_frame': round(inference_s * 1e3 / len(images), 1),
             'backend': engine.backend.value, 'backend_reason': engine.backend_reason,
             'dtype': cfg.dtype, 'kv_cache_dtype': str(engine.kv_dtype).replace('torch.', ''),
             'head_dtype': cfg.head_dtype.value,
             'cuda_graphs': engine.graph_status, 'torch_compile': engine.compile_status,
             'evictions': int(stats.evictions),
             'keyframes': int(stats.keyframes), 'model': engine.description,
             'tf32': tf32, 'device': device_name(engine.device)}
    return arrays, facts


def _cpu_heads_in_float32(model: nn.Module) -> None:
    """
    Run the reference's heads with CPU autocast off (CPU smoke runs only).

    Its heads turn CUDA autocast off around themselves; under CPU autocast they would run
    in bf16, which no GPU run does. These hooks do on the CPU what it does on CUDA.
    """
    def enter(module: nn.Module, args: tuple) -> None:
        ctx = torch.autocast('cpu', enabled=False)
        ctx.__enter__()
        module._drift_autocast_off = ctx

    def leave(module: nn.Module, args: tuple, output: object) -> None:
        module._drift_autocast_off.__exit__(None, None, None)

    for head in (model.camera_head, model.depth_head):
        head.register_forward_pre_hook(enter)
        head.register_forward_hook(leave, always_call=True)


def reference_constructor_args(settings: Settings) -> dict:
    """Return the reference constructor's arguments: the released structure and our cache."""
    from lingbot_ros.model.config import ModelConfig
    cfg = ModelConfig.preset(settings.preset)
    return {'img_size': cfg.patch_embed.img_size, 'patch_size': cfg.patch_size,
            'enable_3d_rope': True, 'max_frame_num': cfg.aggregator.max_frame_num,
            'kv_cache_sliding_window': settings.sliding_window,
            'kv_cache_scale_frames': settings.scale_frames,
            'kv_cache_cross_frame_special': True, 'kv_cache_include_scale_frames': True,
            'camera_num_iterations': settings.camera_iterations}


def run_reference(run: RunKind, settings: Settings, weights: Path, images: torch.Tensor,
                  reference: Path, ctor: dict,
                  draws: Dict[str, str]) -> Tuple[Dict[str, np.ndarray], dict]:
    """Run the reference's ``inference_streaming``; return (arrays, facts of the run)."""
    from safetensors.torch import load_file
    sys.path.insert(0, str(reference))
    from lingbot_map.models.gct_stream import GCTStream
    device = torch.device(settings.device)
    tf32 = set_float32_matmuls(strict=not run.bf16)
    flashinfer = run.bf16 and device.type == 'cuda'
    t0 = time.perf_counter()
    args = {**ctor, 'use_sdpa': not flashinfer}
    model = GCTStream(**args)
    state = load_file(str(weights))
    model.load_state_dict(state, strict=True)
    del state
    theirs = {k: v.value for k, v in categories(model).items()}
    differ = sorted(k for k in theirs if theirs[k] != draws.get(k))
    if run.bf16:  # as its demo: the aggregator in bf16, the heads in float32
        model.aggregator = model.aggregator.to(torch.bfloat16)
    model = model.to(device).eval()
    smoke = run.bf16 and device.type != 'cuda'
    if smoke:
        _cpu_heads_in_float32(model)
    load_s = time.perf_counter() - t0
    images = images.to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=run.bf16)
    trace = FirstCallTrace(model, traced_modules(settings.preset)) if settings.trace else None
    _sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), autocast:
        pred = model.inference_streaming(images, num_scale_frames=settings.scale_frames,
                                         keyframe_interval=1)
    _sync(device)
    inference_s = time.perf_counter() - t0
    arrays = {'pose_enc': pred['pose_enc'][0].float().cpu().numpy(),
              'depth': pred['depth'][0, ..., 0].float().cpu().numpy()}
    if trace is not None:
        arrays.update(trace.close())
    facts = {'load_s': round(load_s, 2), 'inference_s': round(inference_s, 2),
             'ms_per_frame': round(inference_s * 1e3 / len(images), 1),
             'backend': 'flashinfer (use_sdpa=False)' if flashinfer else 'sdpa (use_sdpa=True)',
             'dtype': 'bfloat16 autocast, aggregator cast to bf16' if run.bf16 else 'float32',
             'constructor_args': args, 'load_state_dict': 'strict',
             'inference_call': f'inference_streaming(num_scale_frames={settings.scale_frames}, '
                               'keyframe_interval=1)',
             'draw_categories_differing': len(differ), 'draw_differing_keys': differ[:5],
             'evicted_frames': _reference_evictions(model), 'tf32': tf32,
             'device': device_name(device)}
    if smoke:
        facts['note'] = ('CPU smoke check: SDPA under CPU autocast, heads with autocast off '
                         '(as its CUDA path); not the FlashInfer path')
    return arrays, facts


def _reference_evictions(model: nn.Module) -> Optional[int]:
    """Frames whose patches the reference's dict cache evicted (None: not found)."""
    cache = getattr(getattr(model, 'aggregator', None), 'kv_cache', None)
    if not isinstance(cache, dict):
        return None
    special = [v for k, v in cache.items() if k.endswith('_special') and torch.is_tensor(v)]
    return int(special[0].shape[2]) if special else 0


def child_main(run: RunKind, job_path: Path) -> int:
    """Run one ``run`` described by the job file; write its arrays and facts next to it."""
    job = json.loads(job_path.read_text())
    settings = Settings(**job['settings'])
    work = job_path.parent
    images = torch.from_numpy(np.load(work / 'images.npy'))
    weights = work / 'weights.safetensors'
    print(f'[{run.value}] {len(images)} frames {tuple(images.shape[-2:])} on '
          f'{settings.device}', flush=True)
    if run.side is Side.OURS:
        arrays, facts = run_ours(run, settings, weights, images)
    else:
        arrays, facts = run_reference(run, settings, weights, images, Path(job['reference']),
                                      job['reference_constructor_args'], job['draws'])
    np.savez(work / f'{run.value}.npz', **arrays)
    (work / f'{run.value}.json').write_text(json.dumps(facts, indent=1))
    print(f"[{run.value}] done: load {facts['load_s']} s, inference {facts['inference_s']} s "
          f"({facts['ms_per_frame']} ms/frame), {facts['backend']}", flush=True)
    return 0


def _pump(stream, log) -> None:
    for chunk in iter(lambda: stream.read1(65536), b''):
        log.write(chunk)
        log.flush()
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()


def run_child(run: RunKind, job: Path, log: Path, timeout: float) -> dict:
    """Run one child process; return its exit code, whether it timed out and its seconds."""
    cmd = [sys.executable, str(Path(__file__).resolve()), '--child', run.value,
           '--job', str(job)]
    env = {**os.environ, 'PYTHONUNBUFFERED': '1'}
    t0 = time.monotonic()
    timed_out = False
    with open(log, 'ab') as fh:
        fh.write(f'\n===== {run.value}: {" ".join(cmd)}\n'.encode())
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        pump = threading.Thread(target=_pump, args=(proc.stdout, fh), daemon=True)
        pump.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group
            rc = proc.wait()
        pump.join(timeout=10)
    return {'returncode': rc, 'timed_out': timed_out,
            'child_s': round(time.monotonic() - t0, 1)}


# --------------------------------------------------------------------------- report


def versions(reference: Optional[Path], ours_commit: Optional[str] = None) -> dict:
    """
    Return Python, torch, FlashInfer and numpy versions and both commits.

    ``ours_commit`` (``--ours-commit``) wins over what git says: the GPU machine's copy of
    the tree can carry a ``.git`` older than the tree itself. Both commits are found the
    way ``side_by_side.py`` finds them.
    """
    out = {'python': platform.python_version(), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'numpy': np.__version__, 'flashinfer': None}
    for dist in ('flashinfer-python', 'flashinfer'):
        try:
            out['flashinfer'] = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    ours = side_by_side.ours_commit(ours_commit)
    out['ours_commit'], out['ours_dirty'] = ours['commit'], ours['dirty']
    out['reference_commit'] = (side_by_side.reference_commit(reference)
                               if reference is not None else None)
    return out


def _num(x: float) -> str:
    if x is None or not math.isfinite(x):
        return '-'
    return f'{x:.4f}' if abs(x) >= 1e-3 or x == 0 else f'{x:.1e}'


COLUMNS = (('rot mean', 'rotation_mean_deg'), ('rot max', 'rotation_max_deg'),
           ('rot evict', 'rotation_mean_deg_evicting'), ('depth med%', 'depth_median_pct'),
           ('depth p90%', 'depth_p90_pct'), ('trans mean', 'translation_mean'),
           ('trans max', 'translation_max'), ('fov max', 'fov_max_rad'),
           ('enc max', 'pose_enc_max_abs'))


def table(comparisons: Sequence[dict]) -> List[str]:
    """Return the comparison rows as aligned plain text."""
    head = f"{'run':20s} {'against':10s}" + ''.join(f'{c:>11s}' for c, _ in COLUMNS)
    lines = [head, '-' * len(head)]
    for c in comparisons:
        s = c['summary']
        lines.append(f"{c['run']:20s} {c['against']:10s}"
                     + ''.join(f'{_num(s[k]):>11s}' for _, k in COLUMNS))
    return lines


def report_text(result: dict) -> str:
    """Return the plain-text report: settings, the drift table, wall times, notes."""
    s = result['settings']
    img = result['images']
    lines = [
        f"bf16 drift, {result['date']} on {result['device']}",
        f"{s['frames']} frames ping-ponged from {img['files']} images ({img['folder']}), "
        f"model grid {img['model_hw'][0]}x{img['model_hw'][1]}; preset {s['preset']}, "
        f"{s['scale_frames']} scale frames, window {s['sliding_window']} "
        f"({result['evictions']} evictions), every frame a keyframe, "
        f"{s['camera_iterations']} camera iterations, weight seed {s['seed']}",
        f"versions: {json.dumps(result['versions'])}",
        '',
        'rotation: degrees between camera rotations (mean, max, mean over frames from the '
        'first eviction on); depth: |d - d_ref| / |d_ref| over all pixels of all frames (%); '
        'translation: distance of T (model units); fov: radians',
        '',
    ]
    lines += table(result['comparisons'])
    if result.get('trace'):
        lines += [''] + trace_table(result['trace'], result['baseline'])
    lines += ['', f"{'run':20s} {'status':8s} {'load s':>8s} {'infer s':>8s} {'ms/frame':>9s} "
              f"{'child s':>8s}  back end"]
    for name, r in result['runs'].items():
        if r.get('skipped'):
            lines.append(f"{name:20s} skipped  {r['skipped']}")
            continue
        f = r.get('facts', {})
        status = ('reused' if r.get('resumed') else 'ok') if r.get('ok') else 'FAILED'
        lines.append(f"{name:20s} {status:8s} {f.get('load_s', '-'):>8} "
                     f"{f.get('inference_s', '-'):>8} {f.get('ms_per_frame', '-'):>9} "
                     f"{r.get('child_s', '-'):>8}  {f.get('backend', r.get('error', ''))}")
    lines += ['', 'issue figures (140 frames, 68 evictions, against ref-fp32): '
              + json.dumps(result['issue_figures'])]
    lines += [''] + [f'note: {n}' for n in result['notes']]
    return '\n'.join(lines) + '\n'


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    p.add_argument('--reference', type=Path, default=None,
                   help='checkout of Robbyant/lingbot-map (see side_by_side.py); without it '
                   'the reference runs are skipped')
    p.add_argument('--images', default=None,
                   help='folder of the courthouse frames (default ../shared/data/courthouse, '
                   'else .data/courthouse)')
    p.add_argument('--frames', type=int, default=140)
    p.add_argument('--scale-frames', type=int, default=8)
    p.add_argument('--sliding-window', type=int, default=64)
    p.add_argument('--camera-iterations', type=int, default=4)
    p.add_argument('--image-size', type=int, default=518,
                   help='model-grid width, as our tools name it (courthouse 518x294 -> '
                   '294x518 at 518, 280x504 at 504)')
    p.add_argument('--device', default='auto', help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    p.add_argument('--backend', default='auto', choices=('auto', 'sdpa', 'flashinfer'),
                   help='our attention back end for the bf16 runs (float32 always gets SDPA)')
    p.add_argument('--runs', default=','.join(r.value for r in RunKind),
                   help=f'comma-separated subset of {[r.value for r in RunKind]}')
    p.add_argument('--seed', type=int, default=0, help='seed of the random weights')
    p.add_argument('--ours-commit', default=None,
                   help="our commit to record (the GPU machine's .git can be stale)")
    p.add_argument('--trace', action='store_true',
                   help="also keep a sample of every block's output in the scale call and "
                   'report, block by block, how far each run is from the baseline')
    p.add_argument('--preset', default='release', help='our model preset (release, tiny)')
    p.add_argument('--out', type=Path, help='folder for bf16_drift.{json,txt,log}')
    p.add_argument('--work', type=Path, default=None,
                   help='folder for the weights file, images and arrays, kept afterwards '
                   '(default: a temporary folder, removed); never inside --out')
    p.add_argument('--resume', action='store_true',
                   help='with --work: reuse its weights and images if the settings are the '
                   'same, and the runs that finished there (split a run over calls)')
    p.add_argument('--timeout', type=float, default=CHILD_TIMEOUT_S,
                   help='seconds each run may take')
    p.add_argument('--child', default=None, help=argparse.SUPPRESS)
    p.add_argument('--job', type=Path, default=None, help=argparse.SUPPRESS)
    return p


def parse_runs(text: str) -> List[RunKind]:
    """Return the runs named in ``text`` (comma-separated), in the canonical order."""
    names = [t.strip() for t in text.split(',') if t.strip()]
    allowed = {r.value for r in RunKind}
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ValueError(f'--runs {text!r}: expected a subset of {sorted(allowed)}')
    return [r for r in RunKind if r.value in names]


def skip_reason(run: RunKind, settings: Settings, reference: Optional[Path]) -> Optional[str]:
    """Return why ``run`` cannot run here, or None."""
    if run.fp8_cache and not settings.device.startswith('cuda'):
        return f'the float8 KV cache is measured on CUDA only (device {settings.device})'
    if run.side is Side.REFERENCE:
        if reference is None:
            return 'no --reference given'
        if not (reference / 'lingbot_map' / 'models' / 'gct_stream.py').is_file():
            return f'{reference} has no lingbot_map/models/gct_stream.py'
        if settings.preset != 'release':
            return f'the reference builds the released structure only (preset {settings.preset})'
    return None


def _resolve_device(name: str) -> str:
    if name == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    return name


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Build weights and images once, run every requested run in a child, compare, report."""
    args = _parser().parse_args(argv)
    if args.child:
        return child_main(RunKind(args.child), args.job)
    if args.out is None:
        _parser().error('--out DIR is required')
    if args.resume and args.work is None:
        _parser().error('--resume needs --work DIR (the folder of the earlier call)')
    runs = parse_runs(args.runs)
    settings = Settings(preset=args.preset, frames=args.frames, scale_frames=args.scale_frames,
                        sliding_window=args.sliding_window,
                        camera_iterations=args.camera_iterations, image_size=args.image_size,
                        seed=args.seed, device=_resolve_device(args.device),
                        backend=args.backend, trace=args.trace)
    reference = args.reference.resolve() if args.reference is not None else None
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / f'{NAME}.log'
    if not args.resume or not log.is_file():
        log.write_bytes(b'')
    if args.work is not None:
        work = args.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f'{NAME}_'))
    try:
        result = _measure(runs, settings, reference, find_images(args.images), work, log,
                          args.timeout, args.resume, args.ours_commit)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    (args.out / f'{NAME}.json').write_text(json.dumps(result, indent=1))
    text = report_text(result)
    (args.out / f'{NAME}.txt').write_text(text)
    print('\n' + text)
    print(f'wrote {args.out / NAME}.json, .txt, .log')
    return 0 if all(r.get('ok') or r.get('skipped') for r in result['runs'].values()) else 1


def _prepare(settings: Settings, reference: Optional[Path], folder: Path, work: Path,
             resume: bool) -> Tuple[dict, dict, float]:
    """Write images.npy, weights.safetensors and job.json into ``work`` (or reuse them)."""
    from safetensors.torch import save_file
    t0 = time.monotonic()
    stack, _, image_info = image_stack(folder, settings)
    plan = weight_plan(settings.preset)
    job = {'settings': dataclasses.asdict(settings),
           'reference': str(reference) if reference is not None else None,
           'draws': {s.key: s.draw.value for s in plan}, 'images_sha256': image_info['sha256']}
    if settings.preset == 'release':
        job['reference_constructor_args'] = reference_constructor_args(settings)
    job_path, info_path = work / 'job.json', work / 'weights_info.json'
    if resume and job_path.is_file() and info_path.is_file() and \
            (work / 'weights.safetensors').is_file() and (work / 'images.npy').is_file() and \
            json.loads(job_path.read_text()) == job:
        print(f'reusing the images and weights in {work}', flush=True)
        return image_info, json.loads(info_path.read_text()), time.monotonic() - t0
    for old in work.glob('*.npz'):  # arrays of other settings must not be resumed
        old.unlink()
    np.save(work / 'images.npy', stack.numpy())
    state = draw_weights(plan, settings.seed)
    save_file(state, str(work / 'weights.safetensors'))
    weights_info = {'tensors': len(state), 'params': int(sum(v.numel() for v in state.values())),
                    'manifest': manifest_check(plan) if settings.preset == 'release' else
                    f'not applicable (preset {settings.preset})', 'recipe': RECIPE,
                    'draw_counts': {d.value: sum(s.draw is d for s in plan) for d in Draw},
                    'pose_last_layer': POSE_LAST_LAYER,
                    'fingerprint': float(sum(float(v.sum(dtype=torch.float64))
                                             for v in state.values()))}
    del state
    info_path.write_text(json.dumps(weights_info))
    job_path.write_text(json.dumps(job))
    return image_info, weights_info, time.monotonic() - t0


def _measure(runs: Sequence[RunKind], settings: Settings, reference: Optional[Path],
             folder: Path, work: Path, log: Path, timeout: float, resume: bool = False,
             ours_commit: Optional[str] = None) -> dict:
    image_info, weights_info, prep_s = _prepare(settings, reference, folder, work, resume)
    print(f'images {image_info["model_hw"]} x {settings.frames}, weights '
          f'{weights_info["params"]:,} params ({weights_info["manifest"]}) in {prep_s:.1f} s',
          flush=True)
    records: Dict[str, dict] = {}
    arrays: Dict[RunKind, Dict[str, np.ndarray]] = {}
    for run in runs:
        reason = skip_reason(run, settings, reference)
        if reason is not None:
            print(f'[{run.value}] skipped: {reason}', flush=True)
            records[run.value] = {'skipped': reason}
            continue
        facts_path, npz_path = work / f'{run.value}.json', work / f'{run.value}.npz'
        if resume and npz_path.is_file() and facts_path.is_file():
            print(f'[{run.value}] reusing {npz_path}', flush=True)
            rec = {'returncode': 0, 'timed_out': False, 'resumed': True}
        else:
            npz_path.unlink(missing_ok=True)
            rec = run_child(run, work / 'job.json', log, timeout)
        rec['ok'] = rec['returncode'] == 0 and npz_path.is_file()
        if rec['ok']:
            rec['facts'] = json.loads(facts_path.read_text())
            with np.load(npz_path) as data:
                arrays[run] = {k: data[k] for k in data.files}
        else:
            rec['error'] = 'timed out' if rec['timed_out'] else f"exit {rec['returncode']}"
        records[run.value] = rec
    baseline = RunKind.REF_FP32 if RunKind.REF_FP32 in arrays else RunKind.OURS_FP32
    pairs = [(r, baseline) for r in arrays if r is not baseline]
    pairs += [(r, r.own_fp32) for r in arrays
              if r.bf16 and r.own_fp32 in arrays and r.own_fp32 is not baseline]
    pairs += [(r, RunKind.REF_BF16) for r in (RunKind.OURS_BF16, RunKind.OURS_BF16_FP8,
                                              RunKind.OURS_BF16_HEADS, RunKind.OURS_BF16_HEADS16)
              if r in arrays and RunKind.REF_BF16 in arrays]
    comparisons = []
    for run, base in pairs:
        c = compare(arrays[run], arrays[base], settings.first_evicting_frame)
        comparisons.append({'run': run.value, 'against': base.value, **c})
    notes = [
        'Weights: seeded random (recipe under weights.recipe), released key names, float32; '
        'both sides load the same file strictly.',
        'Float32 runs: TF32 off. bf16 runs: PyTorch defaults (cuDNN convolutions of the '
        'float32 heads may use TF32), as deployed; ours-bf16-heads: the heads under bf16 '
        'autocast too (head_dtype compute); ours-bf16-heads16: under float16 autocast '
        '(head_dtype float16); ours-bf16-heads16-compiled: that with torch_compile on (on '
        'CUDA; elsewhere the engine says it is off).',
        f'Baseline: {baseline.value}' + ('' if baseline is RunKind.REF_FP32 else
                                         ' (ref-fp32 did not run)'),
    ]
    trace = trace_rows(arrays, traced_modules(settings.preset), baseline) \
        if settings.trace else []
    device = torch.device(settings.device)
    return {'benchmark': NAME, 'trace': trace,
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            'device': device_name(device) if device.type != 'cuda' else
            next((r['facts']['device'] for r in records.values() if r.get('facts')), 'cuda'),
            'settings': dataclasses.asdict(settings), 'evictions': settings.evictions,
            'images': image_info, 'weights': weights_info,
            'versions': versions(reference, ours_commit), 'prepare_s': round(prep_s, 1),
            'baseline': baseline.value, 'runs': records, 'comparisons': comparisons,
            'issue_figures': ISSUE_FIGURES, 'notes': notes}


if __name__ == '__main__':
    sys.exit(main())
