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
Where a steady frame's wall time goes that is not the device's: a timeline of the benchmark.

`lingbot-ros-bench --profile` sums kernel time; when the steady wall time is above it, this
says why. It streams the bench's synthetic frames (release structure, 378x504, window 64,
compiled, CUDA graphs, heads in float16), profiles frames 80-88 once the window is full, and
prints: the device's busy time and its idle gaps per frame, the longest gaps with the
kernel that ends each, and the host calls that block longest (a pageable upload that waits
for the frame queued ahead shows here as a ``cudaMemcpyAsync`` lasting most of a frame).
With ``--ops`` it also profiles the same frames without graphs and prints the aten ops by
device time and input shape (which op a kernel belongs to). GPU only; needs FlashInfer.

    python3 benchmarks/steady_trace.py --out $OUT [--ops]    # -> trace_graphs.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

from lingbot_ros.streaming.config import EngineConfig, HeadDtype, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.tools.bench import profile_landed, run_once, synthetic_stack
import torch

FRAMES, FIRST, LAST = 96, 80, 88


def timeline(trace: dict, frames: int, top: int = 12) -> None:
    """Print the device's busy time and idle gaps, and the host calls that block longest."""
    events = trace['traceEvents']
    gpu = sorted((e for e in events if e.get('cat') in ('kernel', 'gpu_memcpy', 'gpu_memset')),
                 key=lambda e: e['ts'])
    if not gpu:
        print('no device events')
        return
    t0, end, gaps = gpu[0]['ts'], gpu[0]['ts'] + gpu[0]['dur'], []
    for e in gpu[1:]:
        if e['ts'] > end:
            gaps.append((e['ts'] - end, end - t0, e['name']))
        end = max(end, e['ts'] + e['dur'])
    span = end - t0
    busy = span - sum(g for g, _, _ in gaps)
    wide = [g for g in gaps if g[0] > 30]
    print(f'{frames} frames: span {span / 1e3 / frames:.2f} ms/frame, device busy '
          f'{busy / 1e3 / frames:.2f}, idle {(span - busy) / 1e3 / frames:.2f} '
          f'(gaps over 30 us: {sum(g for g, _, _ in wide) / 1e3 / frames:.2f} ms/frame in '
          f'{len(wide) / frames:.1f})')
    for g, at, name in sorted(wide, reverse=True)[:top]:
        print(f'  gap {g / 1e3:6.3f} ms at {at / 1e3:8.2f} ms, then {name[:70]}')
    host = sorted((e for e in events if e.get('cat') == 'cuda_runtime'),
                  key=lambda e: e['dur'], reverse=True)[:top]
    for e in host:
        print(f"  host {e['name'][:30]:30s} {e['dur'] / 1e3:7.3f} ms at "
              f"{(e['ts'] - t0) / 1e3:8.2f} ms")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', type=Path, default=Path(os.environ.get('OUT', '/tmp')))
    p.add_argument('--ops', action='store_true', help='also the op table without graphs')
    args = p.parse_args()
    stream = StreamConfig(scale_frames=8, sliding_window=64, keyframe_interval=1,
                          camera_iterations=4, max_window_frames=FRAMES)
    images = synthetic_stack(FRAMES, 378, 504, 0)
    for graphs in (True, False) if args.ops else (True,):
        engine = Engine.load(EngineConfig(preset='release', device='cuda', dtype='bfloat16',
                                          cuda_graphs=graphs, torch_compile=True,
                                          head_dtype=HeadDtype.FLOAT16))
        run_once(engine, stream, images[:12])   # compile, capture
        run_once(engine, stream, images)
        prof, started, n = profile_landed(engine, stream, images, FIRST, LAST,
                                          record_shapes=not graphs)
        if prof is None:
            print(f'=== graphs {"on" if graphs else "off"}: the run never reached frame {FIRST}')
            continue
        print(f'=== graphs {"on" if graphs else "off"}: frames {started}-{started + n}')
        if graphs:
            args.out.mkdir(parents=True, exist_ok=True)
            path = args.out / 'trace_graphs.json'
            prof.export_chrome_trace(str(path))
            trace = json.loads(path.read_text())
            with gzip.open(str(path) + '.gz', 'wt') as f:
                json.dump(trace, f)
            path.unlink()
            timeline(trace, n)
        else:
            rows = sorted((e for e in prof.key_averages(group_by_input_shape=True)
                           if e.device_type.name == 'CPU' and e.self_device_time_total > 0),
                          key=lambda e: e.self_device_time_total, reverse=True)[:45]
            for e in rows:
                print(f'  {e.self_device_time_total / 1e3 / n:7.3f} ms/frame {e.count / n:6.1f}x '
                      f'{e.key[:40]:40s} {str(e.input_shapes)[:120]}')
        del engine
        torch.cuda.empty_cache()
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
