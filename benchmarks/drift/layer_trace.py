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
The layer trace (``--trace``): where one side's bf16 path leaves float32 faster than the other's.

Each run keeps a sample of every transformer block's output in its first model call (the
scale call: the same images, the same weights on both sides, module names as released), and
the report gives, block by block, each run's relative distance from the baseline's float32
run: the block where one side starts to grow away faster is where its rounding differs.
"""

from typing import Dict, List, Sequence

from drift.runs import RunKind

import numpy as np

import torch
from torch import nn

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


def trace_rows(arrays: Dict[RunKind, Dict[str, np.ndarray]], names: Sequence[str],
               baseline: RunKind) -> List[dict]:
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
