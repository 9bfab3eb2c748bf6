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
The per-layer copies around FlashInfer of a steady frame, in the forms they could take.

With key parts (``attention_kv_splits``), every layer hands FlashInfer one copy of its
queries per part, end to end; every layer also writes its keys and values into the page
pool with ``index_copy_``. This times those copies at the release grid (16 heads of 64,
978 tokens, 4 parts), each form alone, CUDA events around 200 calls: which form is
cheapest. Example: ``python benchmarks/copy_variants.py`` (CUDA only).
"""

from __future__ import annotations

from device_timing import device_ms
import torch

HEADS, HEAD_DIM, TOKENS, PARTS = 16, 64, 978, 4


def main() -> int:
    """Print each form's time per call."""
    if not torch.cuda.is_available():
        raise SystemExit('copy_variants.py times device copies: it needs CUDA')
    dev = torch.device('cuda')
    h, d, n, s = HEADS, HEAD_DIM, TOKENS, PARTS
    q = torch.randn(1, h, n, d, device=dev, dtype=torch.bfloat16)  # BHND, as the blocks make it
    q_tok = torch.randn(1, n, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    pool = torch.zeros(72 * 1024 + 4096, h, d, device=dev, dtype=torch.bfloat16)
    rows = torch.randperm(pool.shape[0], device=dev)[:n]
    nhd = q[0].transpose(0, 1)
    cases = {
        'repeat of the BHND->NHD view (before 1205s10)': lambda: nhd.repeat(s, 1, 1),
        'contiguous, then repeat': lambda: nhd.contiguous().repeat(s, 1, 1),
        'expand + reshape (since)': lambda: nhd.unsqueeze(0).expand(s, n, h, d)
        .reshape(s * n, h, d),
        'cat of views': lambda: torch.cat([nhd] * s),
        'repeat of a token-major q': lambda: q_tok[0].transpose(0, 1).repeat(s, 1, 1),
        'index_copy from the BHND view': lambda: pool.index_copy_(0, rows, nhd),
        'index_copy from a token-major k': lambda: pool.index_copy_(0, rows,
                                                                    q_tok[0].transpose(0, 1)),
    }
    print(torch.cuda.get_device_name(dev))
    for name, fn in cases.items():
        print(f'{device_ms(fn, 200, 5) * 1e3:8.2f} us  {name}')
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
