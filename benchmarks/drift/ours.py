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
Our side of one run: the images streamed through our public API, as the node streams them.

The engine configuration comes from :func:`drift.runs.engine_config` (for ``ours-shipped``
the parameter table's defaults); the stream is the benchmark's (every frame a keyframe, one
window), and the run refuses to report if the session did anything else, so both sides
always see the same scale frames and the same evictions. Imported only by our children.
"""

from pathlib import Path
import time
from typing import Dict, Tuple

from drift.device import device_name, set_float32_matmuls, sync
from drift.layer_trace import FirstCallTrace, traced_modules
from drift.runs import config_fields, engine_config, NAME, RunKind, Settings
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.result import FrameType

import numpy as np

import torch


def run_ours(run: RunKind, settings: Settings, weights: Path,
             images: torch.Tensor) -> Tuple[Dict[str, np.ndarray], dict]:
    """Stream ``images`` through our Engine/Session; return (arrays, facts of the run)."""
    t0 = time.perf_counter()
    cfg = engine_config(run, settings, weights)
    tf32 = set_float32_matmuls(strict=cfg.dtype == 'float32')
    engine = Engine.load(cfg, progress=lambda msg: print(f'[{run.value}] {msg}', flush=True))
    load_s = time.perf_counter() - t0
    stream = StreamConfig(scale_frames=settings.scale_frames,
                          sliding_window=settings.sliding_window, keyframe_interval=1,
                          camera_iterations=settings.camera_iterations,
                          max_window_frames=max(settings.frames, settings.scale_frames + 1))
    session = engine.new_session(NAME, stream)
    trace = FirstCallTrace(engine.model, traced_modules(settings.preset)) \
        if settings.trace else None
    sync(engine.device)
    t0 = time.perf_counter()
    out = session.run(images)
    sync(engine.device)
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
    if run is RunKind.OURS_SHIPPED:
        facts['engine_config'] = config_fields(cfg)
    return arrays, facts
