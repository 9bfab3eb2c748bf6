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
Merging attention computed over consecutive parts of the keys into attention over all.

Part i of a query's keys gives o_i (its softmax-weighted values) and lse_i (log2 of the
sum of 2^score over the part, FlashInfer's convention). Over all parts the result is
sum_i w_i o_i with w_i = 2^lse_i / sum_j 2^lse_j. On a GPU with Triton one kernel does it
(reads each part once, writes the result in the parts' dtype); elsewhere a few PyTorch
ops do the same in float32 (the kernel is about ten times faster than the ops).
"""

from __future__ import annotations

import torch

try:  # Triton ships with CUDA builds of PyTorch; the CPU build has none
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the PyTorch build
    triton = None


def merge_splits(parts: torch.Tensor, lse: torch.Tensor, splits: int) -> torch.Tensor:
    """
    Merge ``splits`` parts: ``parts`` [splits * N, H, D], ``lse`` [splits * N, H] -> [N, H, D].

    Part i holds rows i * N .. (i + 1) * N - 1 (the order FlashInfer's requests have).
    """
    if splits == 1:
        return parts
    if _triton_fits(parts, lse):
        return _merge_triton(parts, lse, splits)
    return merge_splits_torch(parts, lse, splits)


def merge_splits_torch(parts: torch.Tensor, lse: torch.Tensor, splits: int) -> torch.Tensor:
    """Merge in PyTorch ops (any device; the reference for the kernel)."""
    n = parts.shape[0] // splits
    wide = torch.promote_types(parts.dtype, torch.float32)   # float32, or float64 if given
    lse = lse.view(splits, n, -1).to(wide)
    weight = torch.exp2(lse - lse.amax(0))
    weight = weight / weight.sum(0)
    merged = (parts.view(splits, n, *parts.shape[1:]).to(wide) * weight.unsqueeze(-1)).sum(0)
    return merged.to(parts.dtype)


def _triton_fits(parts: torch.Tensor, lse: torch.Tensor) -> bool:
    d = parts.shape[-1]
    return (triton is not None and parts.is_cuda and parts.is_contiguous()
            and lse.is_contiguous() and lse.dtype == torch.float32
            and d >= 16 and d & (d - 1) == 0)


def _merge_triton(parts: torch.Tensor, lse: torch.Tensor, splits: int) -> torch.Tensor:
    n, h, d = parts.shape[0] // splits, parts.shape[1], parts.shape[2]
    rows = n * h
    out = torch.empty((n, h, d), dtype=parts.dtype, device=parts.device)
    block = 32
    _merge_kernel[(triton.cdiv(rows, block),)](parts, lse, out, rows, SPLITS=splits, D=d,
                                               BLOCK=block)
    return out


if triton is not None:
    @triton.jit
    def _merge_kernel(parts, lse, out, rows, SPLITS: tl.constexpr, D: tl.constexpr,
                      BLOCK: tl.constexpr):
        # one program: BLOCK (query, head) rows of D values; row r of part i is i * rows + r
        row = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        live = row < rows
        col = tl.arange(0, D)
        top = tl.full([BLOCK], float('-inf'), tl.float32)
        for i in tl.static_range(SPLITS):
            top = tl.maximum(top, tl.load(lse + i * rows + row, mask=live, other=0.0))
        acc = tl.zeros([BLOCK, D], tl.float32)
        total = tl.zeros([BLOCK], tl.float32)
        for i in tl.static_range(SPLITS):
            w = tl.exp2(tl.load(lse + i * rows + row, mask=live, other=0.0) - top)
            v = tl.load(parts + (i * rows + row)[:, None] * D + col[None, :],
                        mask=live[:, None], other=0.0)
            acc += w[:, None] * v.to(tl.float32)
            total += w
        tl.store(out + row[:, None] * D + col[None, :],
                 (acc / total[:, None]).to(out.dtype.element_ty), mask=live[:, None])
