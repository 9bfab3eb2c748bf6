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
The reference's side of one run: its ``inference_streaming`` on the drift's weights and images.

The checkout named by ``--reference`` is imported in a child of its own (never beside our
package), built with our cache's settings (the released structure, the same window and scale
frames), and loads the weights file strictly. In bf16 it runs as its demo does: on CUDA its
FlashInfer path under bf16 autocast with the aggregator cast to bf16, the heads in float32; on
a CPU only a smoke check (SDPA under CPU autocast, the heads kept in float32 by hooks).
"""

from pathlib import Path
import sys
import time
from typing import Dict, Optional, Tuple

from drift.device import device_name, set_float32_matmuls, sync
from drift.layer_trace import FirstCallTrace, traced_modules
from drift.runs import reduced_precision, RunKind, Settings
from drift.weights import categories

import numpy as np

import torch
from torch import nn


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
    bf16 = reduced_precision(run, settings)
    tf32 = set_float32_matmuls(strict=not bf16)
    flashinfer = bf16 and device.type == 'cuda'
    t0 = time.perf_counter()
    args = {**ctor, 'use_sdpa': not flashinfer}
    model = GCTStream(**args)
    state = load_file(str(weights))
    model.load_state_dict(state, strict=True)
    del state
    theirs = {k: v.value for k, v in categories(model).items()}
    differ = sorted(k for k in theirs if theirs[k] != draws.get(k))
    if bf16:  # as its demo: the aggregator in bf16, the heads in float32
        model.aggregator = model.aggregator.to(torch.bfloat16)
    model = model.to(device).eval()
    smoke = bf16 and device.type != 'cuda'
    if smoke:
        _cpu_heads_in_float32(model)
    load_s = time.perf_counter() - t0
    images = images.to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16)
    trace = FirstCallTrace(model, traced_modules(settings.preset)) if settings.trace else None
    sync(device)
    t0 = time.perf_counter()
    with torch.no_grad(), autocast:
        pred = model.inference_streaming(images, num_scale_frames=settings.scale_frames,
                                         keyframe_interval=1)
    sync(device)
    inference_s = time.perf_counter() - t0
    arrays = {'pose_enc': pred['pose_enc'][0].float().cpu().numpy(),
              'depth': pred['depth'][0, ..., 0].float().cpu().numpy()}
    if trace is not None:
        arrays.update(trace.close())
    facts = {'load_s': round(load_s, 2), 'inference_s': round(inference_s, 2),
             'ms_per_frame': round(inference_s * 1e3 / len(images), 1),
             'backend': 'flashinfer (use_sdpa=False)' if flashinfer else 'sdpa (use_sdpa=True)',
             'dtype': 'bfloat16 autocast, aggregator cast to bf16' if bf16 else 'float32',
             'constructor_args': args, 'load_state_dict': 'strict',
             'inference_call': f'inference_streaming(num_scale_frames={settings.scale_frames}, '
                               'keyframe_interval=1)',
             'draw_categories_differing': len(differ), 'draw_differing_keys': differ[:5],
             'evicted_frames': reference_evictions(model), 'tf32': tf32,
             'device': device_name(device)}
    if smoke:
        facts['note'] = ('CPU smoke check: SDPA under CPU autocast, heads with autocast off '
                         '(as its CUDA path); not the FlashInfer path')
    return arrays, facts


def reference_evictions(model: nn.Module) -> Optional[int]:
    """Return the frames whose patches the reference's dict cache evicted (None: not found)."""
    cache = getattr(getattr(model, 'aggregator', None), 'kv_cache', None)
    if not isinstance(cache, dict):
        return None
    special = [v for k, v in cache.items() if k.endswith('_special') and torch.is_tensor(v)]
    return int(special[0].shape[2]) if special else 0
