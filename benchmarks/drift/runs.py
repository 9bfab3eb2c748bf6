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
What a run of the drift is: its side, its engine configuration, and what every run shares.

Every run but ``ours-shipped`` is named for what it sets: float32 or bf16 autocast, the
heads' dtype, a float8 cache, the heads' weights in bf16, torch_compile. ``ours-shipped``
sets nothing itself: its engine configuration is the one the node builds from the parameter
table's defaults (``lingbot_ros.streaming.parameters``, as ``lingbot-ros-bench`` builds it),
with only what this benchmark decides on top (the structure, the weights file, the device),
so its drift follows the defaults wherever they go. Our package is imported inside the
functions: the reference's processes import this module too and never meet ours.
"""

import dataclasses
import enum
from pathlib import Path
from typing import List, Optional, TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from lingbot_ros.streaming.config import EngineConfig

NAME = 'bf16_drift'


class Side(str, enum.Enum):
    """Which implementation a run uses."""

    OURS = 'ours'
    REFERENCE = 'reference'


class RunKind(str, enum.Enum):
    """One model run: implementation, precision and cache storage."""

    OURS_FP32 = 'ours-fp32'
    OURS_SHIPPED = 'ours-shipped'
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
    def own_fp32(self) -> 'RunKind':
        """Return the float32 run of the same side."""
        return RunKind.REF_FP32 if self.side is Side.REFERENCE else RunKind.OURS_FP32


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


def shipped_config(settings: Settings, checkpoint: Optional[Path]) -> 'EngineConfig':
    """
    Return the engine configuration of the parameter table's defaults, as the node has it.

    Only the structure (``preset``), the weights file and the device are this benchmark's;
    'auto' resolves as on the node (bfloat16 on CUDA, float32 on the CPU). The seed is the
    weights' seed, as ``lingbot-ros-bench`` sets it (it draws nothing once a file is given).
    """
    from lingbot_ros.streaming.config import EngineConfig
    from lingbot_ros.streaming.parameters import parse
    params = parse({'preset': settings.preset, 'device': settings.device,
                    'checkpoint': '' if checkpoint is None else str(checkpoint)})
    return EngineConfig.from_parameters(params, torch.cuda.is_available()).replace(
        seed=settings.seed)


def engine_config(run: RunKind, settings: Settings,
                  checkpoint: Optional[Path]) -> 'EngineConfig':
    """Return the engine configuration of one of our runs (``checkpoint``: the weights)."""
    from lingbot_ros.streaming.config import (EngineConfig, HeadDtype, KvCacheDtype,
                                              WeightsDtype)
    if run.side is not Side.OURS:
        raise ValueError(f'{run.value} is not one of our runs')
    if run is RunKind.OURS_SHIPPED:
        return shipped_config(settings, checkpoint)
    if run is RunKind.OURS_BF16_FP8:
        return shipped_config(settings, checkpoint).replace(
            kv_cache_dtype=KvCacheDtype.FLOAT8_E4M3)
    bf16 = run is not RunKind.OURS_FP32
    heads = {RunKind.OURS_BF16_HEADS: HeadDtype.COMPUTE,
             RunKind.OURS_BF16_HEADS16: HeadDtype.FLOAT16,
             RunKind.OURS_BF16_HEADS16_COMPILED: HeadDtype.FLOAT16}
    return EngineConfig(checkpoint=None if checkpoint is None else str(checkpoint),
                        preset=settings.preset, device=settings.device,
                        dtype='bfloat16' if bf16 else 'float32',
                        attention_backend=settings.backend if bf16 else 'auto',
                        seed=settings.seed,
                        head_dtype=heads.get(run, HeadDtype.FLOAT32),
                        weights_dtype=WeightsDtype.COMPUTE
                        if run is RunKind.OURS_BF16_WEIGHTS else WeightsDtype.AUTO,
                        torch_compile=run is RunKind.OURS_BF16_HEADS16_COMPILED)


def config_fields(config: 'EngineConfig') -> dict:
    """Return an engine configuration as JSON values (members of choices by their value)."""
    return {f.name: getattr(config, f.name).value
            if isinstance(getattr(config, f.name), enum.Enum) else getattr(config, f.name)
            for f in dataclasses.fields(config)}


def reduced_precision(run: RunKind, settings: Settings) -> bool:
    """Return whether the run computes below float32 (under autocast) on this device."""
    if run.side is Side.REFERENCE:
        return run is RunKind.REF_BF16
    return engine_config(run, settings, None).dtype != 'float32'


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
    if run.side is Side.REFERENCE:
        if reference is None:
            return 'no --reference given'
        if not (reference / 'lingbot_map' / 'models' / 'gct_stream.py').is_file():
            return f'{reference} has no lingbot_map/models/gct_stream.py'
        if settings.preset != 'release':
            return f'the reference builds the released structure only (preset {settings.preset})'
        return None
    from lingbot_ros.streaming.config import KvCacheDtype
    if engine_config(run, settings, None).kv_cache_dtype is KvCacheDtype.FLOAT8_E4M3 and \
            not settings.device.startswith('cuda'):
        return f'the float8 KV cache is measured on CUDA only (device {settings.device})'
    return None
