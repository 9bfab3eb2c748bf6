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
Cache rows seen as 8-byte words, for copies that only move bits.

PyTorch's copy and ``index_copy_`` kernels take one element per step when they cannot
vectorize: a page of every layer at once (strided), queries repeated for each key part
(expanded), rows scattered into the pool. For 2-byte elements that moves a quarter of what
the memory could. A copy does not look at the values, so the same bytes seen as int64 give
the same result with a quarter of the steps, in every storage dtype (float8 included,
which has no ``index_copy_`` of its own).
"""

from __future__ import annotations

import torch

WORD = torch.int64
WORD_BYTES = torch.iinfo(WORD).bits // 8


def as_words(t: torch.Tensor) -> torch.Tensor:
    """
    Return ``t``'s bytes as int64 words along its last dimension, or ``t`` if they do not fit.

    They fit when the last dimension is contiguous and every offset and stride, in bytes,
    is a whole number of words. The result is a view: writing it writes ``t``.
    """
    size, word = t.element_size(), WORD_BYTES
    if size >= word or t.dim() == 0 or t.stride(-1) != 1 or (t.shape[-1] * size) % word:
        return t
    if (t.storage_offset() * size) % word or \
            any((stride * size) % word for n, stride in zip(t.shape[:-1], t.stride()[:-1])
                if n > 1):
        return t
    return t.view(WORD)


def pair_as_words(dst: torch.Tensor,
                  src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """Return both tensors as words (:func:`as_words`) if both fit, else None."""
    wd, ws = as_words(dst), as_words(src)
    return (wd, ws) if wd.dtype == ws.dtype == WORD else None


def copy_words(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst.copy_(src)`` for two tensors of one dtype and shape, moved as words where both fit."""
    if dst.dtype != src.dtype or dst.shape != src.shape:
        raise ValueError(f'copy_words needs one dtype and shape: {dst.dtype} {tuple(dst.shape)} '
                         f'<- {src.dtype} {tuple(src.shape)}')
    dst, src = pair_as_words(dst, src) or (dst, src)
    dst.copy_(src)
