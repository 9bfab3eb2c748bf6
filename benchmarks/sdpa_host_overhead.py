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
Host-side cost of one attention call per backend (does the call block the host?).

For each backend: time N back-to-back calls on the host without synchronising
(launch cost, plus any hidden sync), then the device time of the same calls.
A backend whose host time per call approaches its device time is synchronising.
"""

import argparse
import json
import time

import torch
from torch.nn.attention import sdpa_kernel, SDPBackend
import torch.nn.functional as F


def _host_and_device(fn, calls: int) -> tuple:
    fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    host = (time.perf_counter() - t0) / calls * 1e3
    end.record()
    torch.cuda.synchronize()
    return host, start.elapsed_time(end) / calls


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument('--keys', type=int, default=71784)
    p.add_argument('--queries', type=int, default=978)
    p.add_argument('--calls', type=int, default=48)
    p.add_argument('--out', default=None)
    args = p.parse_args()
    h, d = 16, 64
    q = torch.randn(1, h, args.queries, d, device='cuda', dtype=torch.bfloat16)
    pool = torch.randn(args.keys + 4096, h, d, device='cuda', dtype=torch.bfloat16)
    rows = {}
    for name, backend in (('cudnn', SDPBackend.CUDNN_ATTENTION),
                          ('flash', SDPBackend.FLASH_ATTENTION),
                          ('efficient', SDPBackend.EFFICIENT_ATTENTION)):
        def fixed():
            k = pool[:args.keys].permute(1, 0, 2).unsqueeze(0)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, k)
        counter = [0]

        def growing():  # a new key count every call, as while a window fills
            counter[0] += 1
            k = pool[:args.keys - 978 * (counter[0] % 4)].permute(1, 0, 2).unsqueeze(0)
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(q, k, k)
        try:
            rows[name] = {'fixed': _host_and_device(fixed, args.calls),
                          'changing_length': _host_and_device(growing, args.calls)}
        except RuntimeError as exc:
            rows[name] = {'error': str(exc)[:200]}
    try:
        import flashinfer
        ws = torch.empty(256 << 20, dtype=torch.uint8, device='cuda')
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, 'NHD', backend='fa3')
        qo = torch.tensor([0, args.queries], dtype=torch.int32, device='cuda')
        kv = torch.tensor([0, args.keys], dtype=torch.int32, device='cuda')
        wrapper.plan(qo, kv, h, h, d, causal=False, q_data_type=torch.bfloat16)
        qn = q[0].transpose(0, 1).contiguous()
        rows['flashinfer_ragged_fa3'] = {'fixed': _host_and_device(
            lambda: wrapper.run(qn, pool[:args.keys], pool[:args.keys]), args.calls)}
    except Exception as exc:  # noqa: BLE001 - report any failure as a row
        rows['flashinfer_ragged_fa3'] = {'error': str(exc)[:200]}
    print(json.dumps(rows, indent=1))
    print(f"{'backend':24s} {'case':16s} host ms/call  device ms/call")
    for name, row in rows.items():
        for case, val in row.items():
            if case != 'error':
                print(f'{name:24s} {case:16s} {val[0]:10.3f}  {val[1]:10.3f}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(rows, f, indent=1)


if __name__ == '__main__':
    main()
