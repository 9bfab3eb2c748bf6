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
The physical KV pool: keys and values of every layer of several streams, allocated once.

``k`` and ``v`` are ``[layers, pages, page_size, heads, head_dim]`` (FlashInfer's NHD
page layout per layer), so a run of consecutive pages is also one contiguous
``[tokens, heads, head_dim]`` block that a dense kernel reads without a gather. Each
stream owns a fixed region of pages (``first_page[i] .. first_page[i] + pages``); the
size is the sum of the regions' sizes (``StreamLayout`` states the formula). Storage may
be float32, a half type or float8 e4m3 (half the bytes of bf16; attention upcasts it).
"""

from __future__ import annotations

from typing import Sequence, Union

import torch

from .backends import KV_STORAGE
from .layout import StreamLayout
from .words import copy_words


class KVPool:
    """Pages for a fixed set of stream layouts; never grows, never reallocates."""

    def __init__(self, layouts: Sequence[StreamLayout], layers: int, heads: int,
                 head_dim: int, dtype: torch.dtype = torch.float32,
                 device: Union[str, torch.device] = 'cpu') -> None:
        if not layouts:
            raise ValueError('layouts=[] is not allowed: at least one stream')
        pages = {lay.page for lay in layouts}
        if len(pages) != 1:
            raise ValueError(f'page sizes={sorted(pages)} are not allowed: '
                             'one pool, one page size')
        for name, value in (('layers', layers), ('heads', heads), ('head_dim', head_dim)):
            if value < 1:
                raise ValueError(f'{name}={value!r} is not allowed: >= 1')
        if dtype not in KV_STORAGE:
            raise ValueError(f'dtype={dtype} is not allowed: one of '
                             f'{[str(d) for d in KV_STORAGE]}')
        self.layouts = tuple(layouts)
        self.layers, self.heads, self.head_dim = layers, heads, head_dim
        self.page_size = pages.pop()
        self.first_page = []
        total = 0
        for lay in self.layouts:
            self.first_page.append(total)
            total += lay.pages
        self.pages = total
        self.device = torch.device(device)
        shape = (layers, total, self.page_size, heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v = torch.zeros(shape, dtype=dtype, device=self.device)
        # page numbers 0..pages-1 once, on the device: page tables copy slices of it
        self.page_ids = torch.arange(total, dtype=torch.int32, device=self.device)

    @property
    def dtype(self) -> torch.dtype:
        """Storage dtype of keys and values."""
        return self.k.dtype

    @property
    def token_bytes(self) -> int:
        """Bytes of one cached token over all layers, keys and values."""
        return 2 * self.layers * self.heads * self.head_dim * self.k.element_size()

    @property
    def nbytes(self) -> int:
        """Bytes allocated (keys and values, all layers)."""
        return self.pages * self.page_size * self.token_bytes

    @staticmethod
    def size_bytes(layouts: Sequence[StreamLayout], layers: int, heads: int, head_dim: int,
                   dtype: torch.dtype) -> int:
        """Bytes a pool for ``layouts`` would allocate, without allocating it."""
        return sum(lay.nbytes(layers, heads, head_dim, dtype) for lay in layouts)

    def flat(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One layer's keys and values as ``[pages * page_size, heads, head_dim]`` views."""
        shape = (self.pages * self.page_size, self.heads, self.head_dim)
        return self.k[layer].view(shape), self.v[layer].view(shape)

    def tokens(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Return tokens ``start .. end-1`` of every layer's flat view (``[layers, n, H, D]``)."""
        shape = (self.layers, self.pages * self.page_size, self.heads, self.head_dim)
        return self.k.view(shape)[:, start:end], self.v.view(shape)[:, start:end]

    def move_pages(self, src: int, dst: int) -> None:
        """Copy page ``src`` onto page ``dst`` in every layer (keys and values), as words."""
        for pool in (self.k, self.v):
            copy_words(pool[:, dst], pool[:, src])
