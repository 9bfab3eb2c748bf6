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

r"""
Peak device memory by window size and input size, measured beside the estimate.

Each configuration runs in a fresh subprocess (one out-of-memory must not poison the
next, and every peak starts from an empty device): release structure, random weights,
live uint8 frames through ``Session.step``, ``scale + window + 4`` frames, with
``max_window_frames`` set so one window re-seed (the worst moment) happens among them
unless ``--max-window-frames`` says otherwise. Prints a table and writes every number,
per-frame peaks included, to ``--out`` (JSON). Needs CUDA; asserts nothing.

    python3 benchmarks/memory_table.py --out mem.json                    # default engine
    python3 benchmarks/memory_table.py --out mem8.json --cap-gib 8 \\
        --weights-dtype compute --depth-chunk-frames 1 --expandable-segments  # 8 GB profile
"""

import argparse
import json
import os
from pathlib import Path
import subprocess
import sys
import time

GIB = 1024 ** 3
# Model grid -> (camera image size that maps onto it, image_size).
SIZES = {'294x518': ((720, 1280), 518), '378x504': ((480, 640), 504)}


def run_one(spec: dict) -> dict:
    """Run one configuration in this process; return its measurements."""
    import numpy as np
    import torch
    from lingbot_ros.streaming.config import EngineConfig, StreamConfig
    from lingbot_ros.streaming.engine import Engine
    from lingbot_ros.streaming.memory import estimate

    total = torch.cuda.get_device_properties(0).total_memory
    if spec['cap_gib']:
        torch.cuda.set_per_process_memory_fraction(spec['cap_gib'] * GIB / total)
    camera_hw, image_size = SIZES[spec['size']]
    window, scale = spec['window'], spec['scale_frames']
    mwf = spec['max_window_frames'] or scale + window + 2
    ecfg = EngineConfig(preset='release', device='cuda', dtype='bfloat16',
                        attention_backend=spec['backend'], cuda_graphs=spec['cuda_graphs'],
                        weights_dtype=spec['weights_dtype'],
                        kv_cache_dtype=spec['kv_cache_dtype'],
                        depth_chunk_frames=spec['depth_chunk_frames'],
                        expandable_segments=spec['expandable_segments'])
    scfg = StreamConfig(scale_frames=scale, sliding_window=window, image_size=image_size,
                        max_window_frames=mwf, with_depth=spec['with_depth'])
    before = estimate(ecfg, scfg, camera_hw)  # what a node computes before loading
    out = {'spec': spec, 'max_window_frames': mwf, 'estimate_before_load': before.as_dict()}
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    engine = Engine.load(ecfg)
    torch.cuda.synchronize()
    out['load_s'] = time.perf_counter() - t0
    out['backend'] = engine.backend.value
    out['after_load'] = {'allocated': torch.cuda.memory_allocated(),
                         'peak': torch.cuda.max_memory_allocated()}
    est = engine.memory_estimate(scfg, camera_hw)
    out['estimate'] = est.as_dict()
    session = engine.new_session('cam', scfg)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (camera_hw[0], camera_hw[1], 3), dtype=np.uint8)
    frames = spec['frames'] or scale + window + 4
    per_frame = []
    peak_alloc = out['after_load']['peak']
    peak_reserved = torch.cuda.max_memory_reserved()
    status = 'ok'
    t0 = time.perf_counter()
    for i in range(frames):
        torch.cuda.reset_peak_memory_stats()
        image = np.roll(base, 3 * i, axis=1)
        try:
            session.step(image, i + 1)
        except torch.cuda.OutOfMemoryError as exc:
            status = f'oom at frame {i}: {str(exc).splitlines()[0][:160]}'
            break
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
        peak_alloc = max(peak_alloc, peak)
        peak_reserved = max(peak_reserved, torch.cuda.max_memory_reserved())
        per_frame.append([i, session.window_index, peak, torch.cuda.memory_allocated()])
    out['stream_s'] = time.perf_counter() - t0
    stats = session.stats()
    out.update(status=status, frames=frames, per_frame=per_frame,
               peak_allocated=peak_alloc, peak_reserved=peak_reserved,
               sliding_window_in_effect=stats.sliding_window,
               windows_opened=session.window_index, memory_shrinks=session.memory_shrinks,
               graph_status=engine.graph_status,
               ratio=peak_alloc / est.peak_allocated if est.peak_allocated else None)
    return out


def main() -> int:
    """Run every configuration in its own subprocess; print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--out', required=True, help='JSON file to write')
    ap.add_argument('--windows', type=int, nargs='+', default=[16, 32, 48, 64])
    ap.add_argument('--sizes', nargs='+', default=list(SIZES), choices=list(SIZES))
    ap.add_argument('--scale-frames', type=int, default=8)
    ap.add_argument('--frames', type=int, default=0,
                    help='frames per configuration (0: scale + window + 4)')
    ap.add_argument('--max-window-frames', type=int, default=0,
                    help='0: scale + window + 2, so one window re-seed happens')
    ap.add_argument('--cap-gib', type=float, default=0.0,
                    help='cap the process with set_per_process_memory_fraction (0: none)')
    ap.add_argument('--weights-dtype', default='auto', choices=['auto', 'compute'])
    ap.add_argument('--kv-cache-dtype', default='auto', choices=['auto', 'float8_e4m3'])
    ap.add_argument('--depth-chunk-frames', type=int, default=0)
    ap.add_argument('--backend', default='auto', choices=['auto', 'sdpa', 'flashinfer'])
    ap.add_argument('--no-cuda-graphs', action='store_true')
    ap.add_argument('--no-depth', action='store_true', help='with_depth off')
    ap.add_argument('--expandable-segments', action='store_true',
                    help="the allocator's expandable segments (EngineConfig)")
    ap.add_argument('--timeout', type=float, default=150.0, help='seconds per configuration')
    ap.add_argument('--one', help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print('RESULT ' + json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0
    rows = []
    t_all = time.perf_counter()
    for size in args.sizes:
        for window in args.windows:
            spec = {'size': size, 'window': window, 'scale_frames': args.scale_frames,
                    'frames': args.frames, 'max_window_frames': args.max_window_frames,
                    'cap_gib': args.cap_gib, 'weights_dtype': args.weights_dtype,
                    'kv_cache_dtype': args.kv_cache_dtype,
                    'depth_chunk_frames': args.depth_chunk_frames, 'backend': args.backend,
                    'cuda_graphs': not args.no_cuda_graphs, 'with_depth': not args.no_depth,
                    'expandable_segments': args.expandable_segments}
            cmd = [sys.executable, os.path.abspath(__file__), '--out', args.out,
                   '--one', json.dumps(spec)]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True,
                                      timeout=args.timeout)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith('RESULT ')]
                if lines:
                    row = json.loads(lines[-1][len('RESULT '):])
                else:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    row = {'spec': spec, 'status': f'failed (rc {proc.returncode}): '
                           + ' | '.join(tail)}
            except subprocess.TimeoutExpired:
                row = {'spec': spec, 'status': f'timeout after {args.timeout:.0f} s'}
            rows.append(row)
            print(_line(row), flush=True)
    Path(args.out).write_text(json.dumps({'rows': rows, 'argv': sys.argv[1:],
                                          'seconds': time.perf_counter() - t_all}, indent=1))
    return 0


def _line(row: dict) -> str:
    spec = row['spec']
    head = f"{spec['size']:>8} window {spec['window']:>3}"
    if 'estimate' not in row:
        return f'{head}  {row["status"]}'
    est = row['estimate']

    def gib(x):
        return f'{x / GIB:6.2f}'
    ratio = row['ratio']
    return (f"{head}  est total {gib(est['total'])} peak-alloc {gib(est['peak_allocated'])}"
            f"  measured alloc {gib(row['peak_allocated'])} reserved {gib(row['peak_reserved'])}"
            f"  ratio {ratio:5.3f}  window in effect {row['sliding_window_in_effect']}"
            f"  {row['status']}  ({row['backend']}, graphs {row['graph_status']})")


if __name__ == '__main__':
    sys.exit(main())
