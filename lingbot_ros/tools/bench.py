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
``lingbot-ros-bench``: the performance harness (prints numbers, asserts nothing).

Runs a streaming session over a synthetic, smoothly moving image stack and reports
milliseconds per frame (all frames, and steady state once the window is full), peak
device memory and, with ``--compare-fp32``, how far the poses of the chosen dtype
drift from a float32 run of the same weights and images. Random weights by default:
speed does not depend on their values.

The model runs as the node would run it: its settings (dtype, attention, CUDA graphs,
torch_compile, head_dtype ...) come from the parameter table's defaults, a node parameter
file (``--params-file``) and ``--set`` overrides; the flags below override those again.
The stream's settings (image size, window, keyframes) are the bench's own, so that the
reference's profiler can be run with the same ones; so are the random weights' seed
(``--seed``) and FlashInfer's key parts per frame (``--kv-splits``), which no node sets.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
import statistics
import sys
import time
from typing import Callable, Optional, Sequence

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.config import BACKENDS, EngineConfig, HeadDtype, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.parameters import parse
from lingbot_ros.tools import param_values
import numpy as np
import torch


def synthetic_stack(frames: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """
    Return ``[S, 3, H, W]`` in [0, 1]: a smooth random texture panned across frames.

    Deterministic for a seed; content only matters in that it is not constant.
    """
    gen = torch.Generator().manual_seed(seed)
    big = torch.rand(1, 3, height // 8 + 8, (width + 4 * frames) // 8 + 8, generator=gen)
    big = torch.nn.functional.interpolate(big, scale_factor=8, mode='bicubic',
                                          align_corners=False).clamp(0, 1)[0]
    return torch.stack([big[:, :height, 4 * i:4 * i + width] for i in range(frames)])


def _sync(device: torch.device) -> None:
    if device.type == 'cuda':
        torch.cuda.synchronize(device)


def run_once(engine: Engine, stream: StreamConfig, images: torch.Tensor,
             on_progress: Optional[Callable[[int], None]] = None) -> dict:
    """
    Stream ``images`` through a fresh session; return per-call times and pose codes.

    A frame's time ends when its outputs are on the host (the session waits for them
    before it reports progress), so no device sync is added per frame: the next frame is
    already queued on the device by then. ``on_progress`` is called with the frames done
    so far each time frames land.
    """
    session = engine.new_session('bench', stream)
    device = engine.device
    marks = []

    def progress(done: int) -> None:
        marks.append((done, time.perf_counter()))
        if on_progress is not None:
            on_progress(done)

    _sync(device)
    start = time.perf_counter()
    out = session.run(images, progress=progress)
    per_call, last_t, last_n = [], start, 0
    for done, t in marks:
        if done > last_n:
            per_call.append(((t - last_t) * 1e3, done - last_n))
        last_t, last_n = t, done
    return {'calls': per_call, 'pose_enc': out.arrays['pose_enc'], 'stats': session.stats()}


def summarise(calls: list, steady_after: int) -> dict:
    """Milliseconds per frame: overall, streaming-only, steady state (window full)."""
    stream = [ms for ms, n in calls[1:]]       # calls after the scale call, one frame each
    steady = stream[steady_after:] or stream
    total_ms = sum(ms for ms, _ in calls)
    total_frames = sum(n for _, n in calls)
    q = sorted(steady)
    return {
        'frames': total_frames,
        'ms_per_frame_overall': total_ms / max(total_frames, 1),
        'scale_call_ms': calls[0][0] if calls else math.nan,
        'stream_ms_median': statistics.median(stream) if stream else math.nan,
        'steady_ms_median': statistics.median(steady) if steady else math.nan,
        'steady_ms_p90': q[int(0.9 * (len(q) - 1))] if q else math.nan,
        'steady_fps': 1e3 / statistics.median(steady) if steady else math.nan,
    }


def _kernel_table(prof, frames: int, top: int) -> dict:
    """Device time and kernel launches per frame, and the ops with the most device time."""
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.device_time_total, reverse=True)[:top]
    table = [{'name': e.key[:90], 'calls_per_frame': e.count / frames,
              'device_ms_per_frame': e.device_time_total / 1e3 / frames} for e in rows]
    kernels = [e for e in events if e.device_time_total > 0 and e.device_type.name == 'CUDA']
    families = kernel_families([(e.key, e.device_time_total / 1e3 / frames, e.count / frames)
                                for e in kernels])
    return {'device_ms_per_frame': sum(e.device_time_total for e in kernels) / 1e3 / frames,
            'kernels_per_frame': sum(e.count for e in kernels) / frames, 'top': table,
            'families': families}


# Kernel families by name, first match wins: where a frame's device time goes at a glance.
FAMILIES = (
    ('attention over the cache', ('flashinfer', 'prefill', '_merge_kernel')),
    ('attention within a frame', ('sdpa', 'fmha', 'flash_fprop', 'attention')),
    ('matrix products and convolutions', ('nvjet', 'gemm', 'xmma', 'cutlass', 'cublas',
                                          'addmm', 'conv')),
    ('compiled norms and elementwise', ('triton_',)),
    ('copies and indexing', ('copy', 'index', 'memcpy', 'memset', 'cat')),
)


def kernel_families(kernels: list) -> dict:
    """Sum (name, device ms, launches) rows by :data:`FAMILIES`; the rest is 'other'."""
    out: dict = {}
    for name, ms, launches in kernels:
        low = name.lower()
        family = next((f for f, keys in FAMILIES if any(k in low for k in keys)), 'other')
        got = out.setdefault(family, [0.0, 0.0])
        got[0] += ms
        got[1] += launches
    return {f: {'device_ms': ms, 'launches': n} for f, (ms, n) in
            sorted(out.items(), key=lambda kv: -kv[1][0])}


def _activities(engine: Engine) -> list:
    from torch.profiler import ProfilerActivity
    return [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if engine.device.type == 'cuda'
                                     else [])


def profile_landed(engine: Engine, stream: StreamConfig, images: torch.Tensor, first: int,
                   last: Optional[int] = None, record_shapes: bool = False) -> tuple:
    """
    Profile a run from the landing of frame ``first`` to that of ``last`` (None: its end).

    Returns (profiler, the frame count at which it started, frames profiled); the profiler
    is None when the run never reached ``first``. Counted by landings, so the run (frames
    queued ahead) may hold one frame's kernels more or less at each edge.
    """
    from torch.profiler import profile
    prof = profile(activities=_activities(engine), record_shapes=record_shapes)
    marks: list = []

    def on_landing(done: int) -> None:
        if not marks and done >= first:
            marks.append(done)
            prof.start()
        elif len(marks) == 1 and last is not None and done >= last:
            marks.append(done)
            prof.stop()

    run_once(engine, stream, images, on_progress=on_landing)
    if not marks:
        return None, 0, 0
    if len(marks) == 1:
        prof.stop()
        marks.append(images.shape[0])
    return prof, marks[0], marks[1] - marks[0]


def profile_run(engine: Engine, stream: StreamConfig, images: torch.Tensor,
                top: int = 30, steady_from: int = 0) -> dict:
    """
    Profile a whole run, then the frames from ``steady_from`` on (the window full).

    The steady figures say whether the steady wall time is the device's.
    """
    from torch.profiler import profile
    with profile(activities=_activities(engine)) as prof:
        run_once(engine, stream, images)
    result = _kernel_table(prof, images.shape[0], top)
    print(f"device time {result['device_ms_per_frame']:.1f} ms/frame in "
          f"{result['kernels_per_frame']:.0f} kernels/frame; top:")
    for r in result['top']:
        print(f"  {r['device_ms_per_frame']:8.3f} ms  {r['calls_per_frame']:7.1f}x  {r['name']}")
    frames = images.shape[0]
    if not 0 < steady_from < frames - 1:
        return result
    steady, started, n = profile_landed(engine, stream, images, steady_from)
    if steady is None:
        return result
    table = _kernel_table(steady, n, top)
    result.update(steady_frames=n,
                  steady_device_ms_per_frame=table['device_ms_per_frame'],
                  steady_kernels_per_frame=table['kernels_per_frame'], steady_top=table['top'],
                  steady_families=table['families'])
    print(f'steady (frames {started}-{frames}, window full): device time '
          f"{table['device_ms_per_frame']:.1f} ms/frame in {table['kernels_per_frame']:.0f} "
          'kernels/frame; by family:')
    for family, got in table['families'].items():
        print(f"  {got['device_ms']:8.3f} ms  {got['launches']:7.1f}x  {family}")
    return result


def pose_drift(a: np.ndarray, b: np.ndarray) -> dict:
    """Largest differences between two pose-code runs: translation, rotation, fov."""
    qa = a[:, 3:7] / np.linalg.norm(a[:, 3:7], axis=1, keepdims=True)
    qb = b[:, 3:7] / np.linalg.norm(b[:, 3:7], axis=1, keepdims=True)
    cos = np.clip(np.abs(np.sum(qa * qb, axis=1)), 0.0, 1.0)
    scale = max(float(np.abs(b[:, :3]).max()), 1e-9)
    return {
        'translation_max_abs': float(np.abs(a[:, :3] - b[:, :3]).max()),
        'translation_max_rel': float(np.abs(a[:, :3] - b[:, :3]).max() / scale),
        'rotation_max_deg': float(np.degrees(2 * np.arccos(cos)).max()),
        'fov_max_abs_rad': float(np.abs(a[:, 7:] - b[:, 7:]).max()),
    }


def _kv_splits(engine: Engine, args: argparse.Namespace, settings: EngineConfig) -> int:
    """Key parts of a streaming frame's attention (FlashInfer only; else 1)."""
    if engine.backend is not AttentionBackend.FLASHINFER:
        return 1
    if settings.attention_kv_splits:
        return settings.attention_kv_splits
    from lingbot_ros.cache.backends import auto_kv_splits
    from lingbot_ros.model.config import SPECIAL_TOKENS
    mc, p = engine.model_config, engine.model_config.patch_size
    queries = SPECIAL_TOKENS + (args.height // p) * (args.width // p)
    return auto_kv_splits(queries, mc.aggregator.num_heads, mc.aggregator.head_dim,
                          engine.device)


def _dtype_name(dtype: Optional[torch.dtype]) -> str:
    """Name what the heads compute in (None: float32, autocast off)."""
    return str(dtype or torch.float32).replace('torch.', '')


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog='lingbot-ros-bench', description=__doc__.split('\n')[1])
    param_values.add_arguments(p)
    p.add_argument('--preset', default=None,
                   help="network structure (default: the parameters' where they name one, "
                        "else release, the released model's)")
    p.add_argument('--checkpoint', default=None)
    p.add_argument('--device', default=None, help="default: the parameters' ('auto')")
    p.add_argument('--dtype', default=None, choices=['float32', 'bfloat16', 'float16'],
                   help="default: the parameters' (bfloat16 on CUDA, float32 on the CPU)")
    p.add_argument('--backend', default=None, choices=BACKENDS,
                   help="attention backend (default: the parameters')")
    p.add_argument('--height', type=int, default=378)
    p.add_argument('--width', type=int, default=504)
    p.add_argument('--frames', type=int, default=100)
    p.add_argument('--scale-frames', type=int, default=8)
    p.add_argument('--sliding-window', type=int, default=64)
    p.add_argument('--keyframe-interval', type=int, default=1)
    p.add_argument('--camera-iterations', type=int, default=4)
    p.add_argument('--warmup', type=int, default=1, help='untimed runs before the timed one')
    p.add_argument('--compare-fp32', action='store_true',
                   help='also run in float32 and report the pose drift')
    p.add_argument('--eager', action='store_true', help='no CUDA graphs (as the reference)')
    p.add_argument('--compile', default=None, action=argparse.BooleanOptionalAction,
                   help="torch.compile the blocks' pieces around attention and the depth "
                        "decoder (CUDA only; default: the parameters' torch_compile)")
    p.add_argument('--kv-splits', type=int, default=0,
                   help='FlashInfer key parts per frame (default 0: chosen from the frame '
                        'size and the GPU)')
    p.add_argument('--head-dtype', default=None, choices=[h.value for h in HeadDtype],
                   help='what the camera and depth heads compute in (default: the '
                        "parameters' head_dtype); no effect when --dtype is float32")
    p.add_argument('--profile', action='store_true',
                   help='after timing, profile one more run and print the top kernels')
    p.add_argument('--seed', type=int, default=0, help="the random weights' and images' seed")
    p.add_argument('--out', type=Path, default=None, help='write the numbers as JSON')
    return p


def engine_settings(args: argparse.Namespace) -> EngineConfig:
    """
    Return the engine configuration the node would run, with the bench's flags on top.

    The bench's own default is the release structure where the parameters leave it at
    'auto' (which means tiny without a checkpoint).
    """
    given = param_values.values(args, 'lingbot-ros-bench')
    if given.get('preset', 'auto') == 'auto' and not given.get('checkpoint'):
        given['preset'] = 'release'
    flags = {'preset': args.preset, 'checkpoint': args.checkpoint, 'device': args.device,
             'dtype': args.dtype,
             'attention_backend': args.backend, 'torch_compile': args.compile,
             'head_dtype': args.head_dtype}
    given.update({k: v for k, v in flags.items() if v is not None})
    if args.eager:
        given['cuda_graphs'] = False
    try:
        cfg = EngineConfig.from_parameters(parse(given), torch.cuda.is_available())
        return cfg.replace(seed=args.seed, attention_kv_splits=args.kv_splits)
    except ConfigError as exc:
        raise SystemExit(f'lingbot-ros-bench: {exc}') from exc


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the benchmark; print a table; optionally write JSON."""
    args = _parser().parse_args(argv)
    settings = engine_settings(args)
    stream = StreamConfig(scale_frames=args.scale_frames, sliding_window=args.sliding_window,
                          keyframe_interval=args.keyframe_interval,
                          camera_iterations=args.camera_iterations,
                          max_window_frames=max(args.frames, args.scale_frames + 1))
    images = synthetic_stack(args.frames, args.height, args.width, args.seed)
    results = {'args': {k: str(v) for k, v in vars(args).items()}}
    runs = {}
    dtypes = [settings.dtype] + (['float32'] if args.compare_fp32
                                 and settings.dtype != 'float32' else [])
    for dtype in dtypes:
        engine = Engine.load(settings.replace(dtype=dtype))
        t = time.perf_counter()   # the warm-up builds kernels, compiles and captures
        for _ in range(args.warmup):
            run_once(engine, stream, images[:args.scale_frames + 4])
        warmup_s = time.perf_counter() - t
        if engine.device.type == 'cuda':
            torch.cuda.reset_peak_memory_stats(engine.device)
        run = run_once(engine, stream, images)
        summary = summarise(run['calls'], steady_after=args.sliding_window)
        if engine.device.type == 'cuda':
            summary['peak_memory_gib'] = torch.cuda.max_memory_allocated(engine.device) / 2**30
            summary['gpu'] = torch.cuda.get_device_name(engine.device)
        summary.update(device=str(engine.device), backend=engine.backend.value, dtype=dtype,
                       backend_reason=engine.backend_reason,
                       cuda_graphs=engine.graph_status, torch_compile=engine.compile_status,
                       warmup_s=warmup_s, model=engine.description, stats=run['stats'].as_dict(),
                       kv_splits=_kv_splits(engine, args, settings),
                       head_dtype=settings.head_dtype.value,
                       heads_compute_in=_dtype_name(engine.model.head_autocast_dtype))
        runs[dtype] = run
        results[dtype] = summary
        if args.profile:
            summary['profile'] = profile_run(engine, stream, images,
                                             steady_from=args.scale_frames + args.sliding_window)
        del engine
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if len(runs) == 2:
        results['drift_vs_float32'] = pose_drift(runs[settings.dtype]['pose_enc'],
                                                 runs['float32']['pose_enc'])
    print(json.dumps(results, indent=2, default=str))
    for dtype in dtypes:
        r = results[dtype]
        print(f"{dtype:9s} {args.height}x{args.width} {r['frames']} frames: "
              f"{r['ms_per_frame_overall']:.1f} ms/frame overall, steady median "
              f"{r['steady_ms_median']:.1f} ms (p90 {r['steady_ms_p90']:.1f}), "
              f"{r['steady_fps']:.1f} FPS, backend {r['backend']}, graphs {r['cuda_graphs']}, "
              f"compile {r['torch_compile']}, key parts {r['kv_splits']}, "
              f"heads in {r['heads_compute_in']}, "
              f"warm-up {r['warmup_s']:.1f} s")
    if 'drift_vs_float32' in results:
        print('drift vs float32:', results['drift_vs_float32'])
    if args.out is not None:
        from lingbot_ros.streaming.atomic import atomic_file
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(args.out) as fh:
            fh.write(json.dumps(results, indent=2, default=str).encode())
    return 0


if __name__ == '__main__':
    sys.exit(main())
