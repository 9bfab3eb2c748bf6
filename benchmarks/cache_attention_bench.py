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
Attention cost of one streaming frame over the full window: our cache paths vs FlashInfer.

The shape is the release model's at 378x504 (see ../shared/device/README.md): 978
query tokens (6 special + 972 patch) over 8 scale + 64 window frames plus the special
tokens of 300 frames = 71,784 keys, 16 heads x 64, 24 layers, bf16. Rows:

- ``cache sdpa, attention only``: 24 layers of the contiguous-run SDPA path (the target).
- ``cache sdpa, keyframe step``: begin + 24 x (write + attend) + rollback, page moves included.
- ``cache sdpa [kernel only]``: the same run with one SDPA kernel allowed.
- ``flashinfer paged <kernel>``: plan + 24 x run over the same pool and page table.
- ``raw sdpa <kernel>``: a plain contiguous [1, H, L, D] tensor (the README's baseline).
- ``batch of S streams``: one step of S cameras, FlashInfer batched vs SDPA per stream.

Usage (GPU machine): python benchmarks/cache_attention_bench.py --out benchmarks/results/x.json
CPU smoke test: python benchmarks/cache_attention_bench.py --device cpu --small
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import platform
import statistics
import sys
import time

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lingbot_ros.cache import backends  # noqa: E402
from lingbot_ros.cache.backends import flashinfer_module, FlashInferPaged  # noqa: E402
from lingbot_ros.cache.batch import StreamBatch  # noqa: E402
from lingbot_ros.cache.layout import StreamLayout  # noqa: E402
from lingbot_ros.cache.pool import KVPool  # noqa: E402
from lingbot_ros.cache.stream import PagedStreamCache  # noqa: E402
import torch  # noqa: E402

TARGET_MS = 19.0


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--out', type=Path, default=None, help='JSON file for the results')
    p.add_argument('--device', default='cuda')
    p.add_argument('--layers', type=int, default=24)
    p.add_argument('--heads', type=int, default=16)
    p.add_argument('--head-dim', type=int, default=64)
    p.add_argument('--patch', type=int, default=972)
    p.add_argument('--special', type=int, default=6)
    p.add_argument('--scale', type=int, default=8)
    p.add_argument('--window', type=int, default=64)
    p.add_argument('--frame', type=int, default=300, help='index+1 of the timed frame')
    p.add_argument('--iters', type=int, default=30)
    p.add_argument('--warmup', type=int, default=5)
    p.add_argument('--streams', default='2,4', help='batch sizes for the multi-stream rows')
    p.add_argument('--kernels', default='fa2,fa3', help='FlashInfer paged kernels to try')
    p.add_argument('--small', action='store_true', help='tiny shapes (CPU smoke test)')
    args = p.parse_args(argv)
    if args.small:
        args.layers, args.heads, args.patch, args.window, args.scale = 2, 2, 12, 4, 2
        args.frame, args.iters, args.warmup = 10, 3, 1
    return args


class Bench:
    """Shared state: shapes, random frames, a timer."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.device = torch.device(args.device)
        self.dtype = torch.bfloat16 if self.device.type == 'cuda' else torch.float32
        self.tokens = args.special + args.patch
        self.layout = StreamLayout(special_tokens=args.special, patch_tokens=args.patch,
                                   scale_frames=args.scale, sliding_window=args.window,
                                   special_capacity=max(2048, args.frame + 64))
        gen = torch.Generator(device=self.device).manual_seed(0)
        self.kv = [torch.randn(1, args.heads, self.tokens, args.head_dim, device=self.device,
                               dtype=self.dtype, generator=gen) for _ in range(4)]
        self.q = self.kv[0] * 0.5

    def sync(self) -> None:
        if self.device.type == 'cuda':
            torch.cuda.synchronize()

    def time_ms(self, fn) -> float:
        """Median milliseconds of ``fn`` (one frame) over the iterations."""
        for _ in range(self.a.warmup):
            fn()
        self.sync()
        times = []
        for _ in range(self.a.iters):
            if self.device.type == 'cuda':
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end))
            else:
                t0 = time.perf_counter()
                fn()
                times.append(1e3 * (time.perf_counter() - t0))
        return statistics.median(times)

    def fill(self, caches) -> None:
        """Commit ``frame - 1`` frames into every cache (writes only, no attention)."""
        for f in range(self.a.frame - 1):
            for c in caches:
                c.begin(1)
                kv = self.kv[f % len(self.kv)]
                for layer in range(self.a.layers):
                    c._write(layer, kv, kv)
                c.commit()

    def flops(self, keys: int) -> float:
        return 4.0 * self.tokens * keys * self.a.head_dim * self.a.heads * self.a.layers


def single_stream(b: Bench, rows: list) -> None:
    a = b.a
    cache = PagedStreamCache.allocate(b.layout, a.layers, a.heads, a.head_dim, b.dtype,
                                      b.device, backend='sdpa')
    b.fill([cache])
    cache.begin(1)
    for layer in range(a.layers):
        cache._write(layer, b.kv[1], b.kv[2])
    start, end = cache.visible_tokens()
    keys = end - start
    print(f'visible keys per layer: {keys} (frame {a.frame}, run of {cache.visible_run().count}'
          f' pages), pool {cache.pool.nbytes / 2**30:.2f} GiB')

    def attention_only():
        for layer in range(a.layers):
            cache.attend_cached(layer, b.q)

    reference = [cache.attend_cached(layer, b.q).float() for layer in (0, a.layers - 1)]
    add(rows, b, 'cache sdpa, attention only', keys, lambda: b.time_ms(attention_only))
    default_order = backends.SDPA_ORDER
    for kernel in ('cudnn_attention', 'flash_attention', 'efficient_attention'):
        if b.device.type != 'cuda':
            break
        backends.SDPA_ORDER = (kernel,)
        add(rows, b, f'cache sdpa [{kernel} only]', keys, lambda: b.time_ms(attention_only))
    backends.SDPA_ORDER = default_order
    cache.rollback()

    def keyframe_step():
        cache.begin(1)
        for layer in range(a.layers):
            cache.attend(layer, b.q, b.kv[1], b.kv[2])
        cache.rollback()

    moves = cache.page_moves
    add(rows, b, 'cache sdpa, keyframe step (write+attend+moves)', keys,
        lambda: b.time_ms(keyframe_step))
    runs = a.warmup + a.iters
    print(f'page moves per keyframe step: {(cache.page_moves - moves) / max(1, runs):.1f}')

    cache.begin(1)
    for layer in range(a.layers):
        cache._write(layer, b.kv[1], b.kv[2])
    if b.device.type == 'cuda' and flashinfer_module()[0] is not None:
        for kernel in a.kernels.split(','):
            def flashinfer_frame(kernel=kernel, state={}):
                if 'fi' not in state:
                    state['fi'] = FlashInferPaged(b.device, kernel)
                cache.table.update([cache.visible_run()._replace(queries=b.tokens)])
                state['fi'].plan(cache.table, a.heads, a.head_dim, b.dtype, b.dtype)
                outs = []
                for layer in range(a.layers):
                    outs.append(state['fi'].run(b.q, cache.pool.k[layer], cache.pool.v[layer]))
                state['outs'] = outs
                return state

            def timed(fn=flashinfer_frame):
                ms = b.time_ms(fn)
                outs = fn()['outs']
                err = max((outs[i].float() - ref).abs().max().item()
                          for i, ref in zip((0, a.layers - 1), reference))
                return ms, err
            add(rows, b, f'flashinfer paged {kernel} (plan + run)', keys, timed)
    else:
        rows.append({'name': 'flashinfer paged', 'error': flashinfer_module()[1]
                     if b.device.type == 'cuda' else 'not CUDA'})
    cache.rollback()

    k = torch.randn(1, a.heads, keys, a.head_dim, device=b.device, dtype=b.dtype)
    v = torch.randn_like(k)
    for kernel in (('cudnn_attention', 'flash_attention') if b.device.type == 'cuda'
                   else ('math',)):
        def raw(kernel=kernel):
            from torch.nn.attention import sdpa_kernel, SDPBackend
            with sdpa_kernel([getattr(SDPBackend, kernel.upper())]):
                for _ in range(a.layers):
                    torch.nn.functional.scaled_dot_product_attention(b.q, k, v)
        add(rows, b, f'raw sdpa {kernel}, contiguous [1,H,L,D]', keys, lambda: b.time_ms(raw))


def multi_stream(b: Bench, rows: list, streams: int) -> None:
    a = b.a
    bytes_needed = KVPool.size_bytes([b.layout] * streams, a.layers, a.heads, a.head_dim,
                                     b.dtype)
    if b.device.type == 'cuda':
        free = torch.cuda.mem_get_info()[0]
        if bytes_needed > 0.8 * free:
            rows.append({'name': f'batch of {streams} streams',
                         'error': f'pool {bytes_needed / 2**30:.1f} GiB > 80% of free memory'})
            return
    pool = KVPool([b.layout] * streams, a.layers, a.heads, a.head_dim, b.dtype, b.device)
    caches = [PagedStreamCache(pool, i, backend='sdpa') for i in range(streams)]
    b.fill(caches)
    q = b.q.expand(streams, -1, -1, -1).contiguous()
    k = b.kv[1].expand_as(q).contiguous()
    v = b.kv[2].expand_as(q).contiguous()
    start, end = caches[0].visible_tokens()
    keys = end - start + b.tokens   # the step's own frame is added at begin
    names = ['sdpa']
    if b.device.type == 'cuda' and flashinfer_module()[0] is not None:
        names.append('flashinfer')
    for name in names:
        batch = StreamBatch(caches, backend=name)

        def step(batch=batch):
            for c in caches:
                c.begin(1)
            for layer in range(a.layers):
                batch.attend(layer, q, k, v)
            for c in caches:
                c.rollback()
        add(rows, b, f'batch of {streams} streams, {name} (per step)', keys * streams,
            lambda: b.time_ms(step))


def add(rows: list, b: Bench, name: str, keys: int, measure) -> None:
    """Run ``measure`` (-> ms or (ms, err)); record ms, TFLOP/s, or the error."""
    try:
        got = measure()
    except Exception as exc:  # a kernel that refuses this shape is a result, not a crash
        rows.append({'name': name, 'error': f'{type(exc).__name__}: {exc}'[:300]})
        print(f'{name:55s} ERROR {rows[-1]["error"]}')
        return
    ms, err = got if isinstance(got, tuple) else (got, None)
    row = {'name': name, 'ms_per_frame': round(ms, 3), 'keys': keys,
           'tflops': round(b.flops(keys) / ms / 1e9, 1)}
    if err is not None:
        row['max_abs_diff_vs_cache_sdpa'] = err
    rows.append(row)
    extra = f'  |diff| {err:.2e}' if err is not None else ''
    print(f'{name:55s} {ms:8.3f} ms  {row["tflops"]:6.1f} TFLOP/s{extra}')


def main(argv=None) -> int:
    args = parse_args(argv)
    b = Bench(args)
    rows: list = []
    with torch.inference_mode():
        single_stream(b, rows)
        for s in (int(x) for x in args.streams.split(',') if x):
            multi_stream(b, rows, s)
    headline = next((r for r in rows if r['name'] == 'cache sdpa, attention only'), {})
    mod = flashinfer_module()[0]
    result = {
        'config': {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        'environment': {
            'device': (torch.cuda.get_device_name(b.device) if b.device.type == 'cuda'
                       else platform.processor() or 'cpu'),
            'torch': torch.__version__,
            'flashinfer': getattr(mod, '__version__', None) if mod else None,
            'sdpa_order': list(backends.SDPA_ORDER)},
        'target_ms': TARGET_MS,
        'target_met': bool(headline.get('ms_per_frame', 1e9) <= TARGET_MS),
        'rows': rows}
    print(f'target {TARGET_MS} ms per frame (24 layers): '
          f'{"met" if result["target_met"] else "NOT met"} by cache sdpa attention')
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + '\n')
        print(f'wrote {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
