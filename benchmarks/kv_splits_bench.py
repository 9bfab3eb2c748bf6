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
One frame's cached attention with its keys cut into 1..8 parts: device time and error.

FlashInfer's Hopper prefill gives each CTA 192 query rows of one head, so a streaming
frame of the release model (978 queries, 16 heads) makes 96 CTAs on an H200's 132 SMs.
``FlashInferRagged(splits=s)`` plans s requests over consecutive key parts and merges
them (``merge_splits``). This times it as the graphs run it (FlashInfer's graph mode,
captured, replayed), for key counts of a filling and a full window at 378x504, and
prints the maximum difference from the unsplit output, with the split that
``auto_kv_splits`` picks for the shape.

Usage (GPU machine): python3 benchmarks/kv_splits_bench.py --out $OUT/kv_splits_h200.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingbot_ros.cache.backends import auto_kv_splits, FlashInferRagged  # noqa: E402
from lingbot_ros.cache.split_merge import merge_splits, merge_splits_torch  # noqa: E402
import torch  # noqa: E402

TOKENS_PER_FRAME = 978   # 6 special + 27 x 36 patches (378x504)
HEADS, HEAD_DIM = 16, 64


def _time_graph(run, reps: int) -> tuple:
    """Capture ``run`` once; return (mean replay ms by CUDA events, its output)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()   # warm-up outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = run()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps, out


def main(argv=None) -> int:
    """Time each split count; print a table; optionally write JSON."""
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--frames', default='9,24,40,72', help='visible frames of keys, comma list')
    p.add_argument('--splits', default='1,2,3,4,5,6,8')
    p.add_argument('--reps', type=int, default=50)
    p.add_argument('--out', type=Path, default=None)
    args = p.parse_args(argv)
    device = torch.device('cuda')
    torch.manual_seed(0)
    n = TOKENS_PER_FRAME
    q = torch.randn(1, HEADS, n, HEAD_DIM, device=device, dtype=torch.bfloat16)
    rows = []
    auto = auto_kv_splits(n, HEADS, HEAD_DIM, device)
    print(f'{torch.cuda.get_device_name(device)}: {n} queries x {HEADS} heads x {HEAD_DIM}, '
          f'bf16; auto_kv_splits -> {auto}')
    print(f"{'keys':>8} {'splits':>6} {'ms/layer':>9} {'x24 ms':>8} {'max |diff|':>11}")
    for frames in (int(f) for f in args.frames.split(',')):
        keys = frames * n
        kv = torch.randn(2, keys + 4096, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
        ref = None
        for s in (int(x) for x in args.splits.split(',')):
            wrapper = FlashInferRagged(device, graph=True, splits=s)
            wrapper.plan(n, keys, HEADS, HEAD_DIM, torch.bfloat16, kv_offset=1024)
            ms, out = _time_graph(lambda w=wrapper: w.run(q, kv[0], kv[1]), args.reps)
            out = out.float()
            if ref is None:
                ref = out
            diff = float((out - ref).abs().max())
            rows.append({'frames': frames, 'keys': keys, 'splits': s, 'ms_per_layer': ms,
                         'ms_24_layers': 24 * ms, 'max_abs_diff_vs_1': diff})
            print(f'{keys:>8} {s:>6} {ms:>9.4f} {24 * ms:>8.2f} {diff:>11.2e}')
    merges = {}
    for name, merge in (('triton', merge_splits), ('pytorch', merge_splits_torch)):
        parts = torch.randn(4 * n, HEADS, HEAD_DIM, device=device, dtype=torch.bfloat16)
        lse = torch.randn(4 * n, HEADS, device=device)
        merges[name], _ = _time_graph(lambda m=merge: m(parts, lse, 4), args.reps)
        print(f'merge of 4 parts, {name}: {merges[name] * 1e3:.1f} us/layer')
    if args.out:
        args.out.write_text(json.dumps({'gpu': torch.cuda.get_device_name(device),
                                        'queries': n, 'heads': HEADS, 'head_dim': HEAD_DIM,
                                        'auto_kv_splits': auto, 'rows': rows,
                                        'merge_ms_per_layer': merges}, indent=1))
    return 0


if __name__ == '__main__':
    sys.exit(main())
