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
Would FP8 attention pay? FlashInfer's ragged Hopper (FA3) prefill in bf16 and in float8 e4m3.

One layer at a steady frame's shape (978 queries over 72,084 keys, 16 heads of 64), with 1,
2, 4 and 8 key parts merged by log-sum-exp, timed with CUDA events, each against float32
SDPA on the same data. Random data: the error is the rounding's, not a real layer's. GPU
only; needs FlashInfer (the float8 kernel builds at its first call, about 75 s).

    python3 benchmarks/attention_fp8.py     # -> results/attention_fp8_*.txt
"""

from __future__ import annotations

import time

from device_timing import device_ms
import flashinfer
import torch
import torch.nn.functional as F  # noqa: N812

HEADS, DIM, QUERIES, KEYS = 16, 64, 978, 72084
FP8 = torch.float8_e4m3fn
SPLITS = (1, 2, 4, 8)


def _data(device: torch.device) -> tuple:
    """Unit-scale queries and keys with a few larger channels and some near matches."""
    torch.manual_seed(0)
    q = torch.randn(QUERIES, HEADS, DIM, device=device) * 1.5
    k = torch.randn(KEYS, HEADS, DIM, device=device) * 1.5
    k[:, :, :4] *= 4.0
    k[:QUERIES] += q * 0.8          # peaks in the softmax
    v = torch.randn(KEYS, HEADS, DIM, device=device)
    return q, k, v


def _wrapper(workspace: torch.Tensor, dtype: torch.dtype, splits: int):
    """Plan a ragged FA3 wrapper for one frame's queries over ``splits`` key parts."""
    w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, 'NHD', backend='fa3')
    qo = torch.tensor([i * QUERIES for i in range(splits + 1)], dtype=torch.int32)
    kv = torch.tensor([(KEYS * i + splits - 1) // splits for i in range(splits + 1)],
                      dtype=torch.int32)
    extra = {'o_data_type': torch.bfloat16} if dtype == FP8 else {}
    w.plan(qo, kv, HEADS, HEADS, DIM, causal=False, q_data_type=dtype, kv_data_type=dtype,
           **extra)
    return w


def _merge(parts: torch.Tensor, lse: torch.Tensor, splits: int) -> torch.Tensor:
    """Combine key parts by their log2-sum-exp (FlashInfer's base)."""
    parts = parts.view(splits, QUERIES, HEADS, DIM).float()
    lse = lse.view(splits, QUERIES, HEADS).float()
    w = torch.exp2(lse - lse.max(0).values)
    return (parts * w[..., None]).sum(0) / w.sum(0)[..., None]


def _error(out: torch.Tensor, ref: torch.Tensor) -> str:
    out = out.float()
    return (f'err rel {((out - ref).norm() / ref.norm()).item():.4f}, '
            f'max {(out - ref).abs().max().item():.4f}')


def _run(workspace, q, k, v, dtype: torch.dtype, splits: int, *scales) -> tuple:
    """Return (a call that runs the layer, its merged output)."""
    w = _wrapper(workspace, dtype, splits)
    if splits == 1:
        def call():
            return w.run(q, k, v, *scales)
        return call, call()
    rows = q.view(torch.uint8) if dtype == FP8 else q    # repeat has no float8 kernel
    qr = rows.repeat(splits, 1, 1).view(dtype)

    def call_parts():
        return w.run(qr, k, v, *scales, return_lse=True)
    return call_parts, _merge(*call_parts(), splits)


def main() -> int:
    device = torch.device('cuda')
    q, k, v = _data(device)
    ref = F.scaled_dot_product_attention(q.permute(1, 0, 2)[None], k.permute(1, 0, 2)[None],
                                         v.permute(1, 0, 2)[None])[0].permute(1, 0, 2)
    workspace = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    print(torch.cuda.get_device_name(device))
    half = [x.bfloat16() for x in (q, k, v)]
    for splits in SPLITS:
        call, out = _run(workspace, *half, torch.bfloat16, splits)
        print(f'bf16 fa3, {splits} key parts: {device_ms(call):.3f} ms/layer, {_error(out, ref)}')
    eight = [x.clamp(-448, 448).to(FP8) for x in (q, k, v)]
    ones = torch.ones(HEADS, dtype=torch.float32, device=device)   # per-head scales
    for splits in SPLITS:
        t = time.perf_counter()
        call, out = _run(workspace, *eight, FP8, splits, ones, ones, ones)
        print(f'fp8 fa3, {splits} key parts (first call {time.perf_counter() - t:.1f} s): '
              f'{device_ms(call):.3f} ms/layer, {_error(out, ref)}')
    call, out = _run(workspace, *[x.bfloat16() for x in eight], torch.bfloat16, 1)
    print(f'bf16 kernel on fp8-rounded q, k, v: {_error(out, ref)} (the rounding alone)')

    def quantise():
        return q.bfloat16().clamp(-448, 448).to(FP8)
    print(f'quantising the queries of one layer: {device_ms(quantise) * 1e3:.1f} us')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
