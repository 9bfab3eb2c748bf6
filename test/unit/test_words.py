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

"""Cache copies moved as 8-byte words give the bytes the element copies give."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.cache.pool import KVPool
from lingbot_ros.cache.stream import _scatter_rows
from lingbot_ros.cache.words import as_words, copy_words, WORD
import pytest
import torch

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn]


def _random(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * 3).to(dtype)


def test_words_are_a_view_only_where_every_offset_and_stride_is_whole_words():
    t = torch.zeros(3, 5, 8, dtype=torch.bfloat16)
    assert as_words(t).dtype == WORD and as_words(t).shape == (3, 5, 2)
    assert as_words(t[:, 1]).dtype == WORD                     # strided rows, whole words
    assert as_words(t[..., 1:5]).dtype == torch.bfloat16        # an offset of 2 bytes
    assert as_words(t[..., ::2]).dtype == torch.bfloat16        # last dim not contiguous
    assert as_words(torch.zeros(4, 6, dtype=torch.float16)).dtype == torch.float16  # 12 bytes
    assert as_words(torch.zeros(4, 2)).dtype == WORD
    assert as_words(torch.zeros(4, 2, dtype=torch.float64)).dtype == torch.float64
    words = as_words(t)
    words.fill_(-1)                                             # a view: writes reach t
    assert torch.isnan(t).all()


@pytest.mark.parametrize('dtype', DTYPES)
def test_move_pages_copies_every_layer_bit_for_bit(dtype):
    pool = KVPool.__new__(KVPool)
    pool.k = _random((3, 6, 4, 2, 8), dtype, 1)
    pool.v = _random((3, 6, 4, 2, 8), dtype, 2)
    want_k, want_v = pool.k.clone(), pool.v.clone()
    want_k[:, 4], want_v[:, 4] = want_k[:, 1], want_v[:, 1]
    pool.move_pages(1, 4)
    assert torch.equal(pool.k.view(torch.uint8), want_k.view(torch.uint8))
    assert torch.equal(pool.v.view(torch.uint8), want_v.view(torch.uint8))


@settings(max_examples=40, deadline=None)
@given(dtype=st.sampled_from(DTYPES), head_dim=st.sampled_from([2, 4, 6, 8, 16]),
       heads=st.integers(1, 3), rows=st.integers(1, 6), head_major=st.booleans(),
       seed=st.integers(0, 2**16))
def test_scattered_rows_equal_an_element_index_copy(dtype, head_dim, heads, rows, head_major,
                                                    seed):
    dst = _random((10, heads, head_dim), dtype, seed)
    src = _random((heads, rows, head_dim), dtype, seed + 1).transpose(0, 1) if head_major \
        else _random((rows, heads, head_dim), dtype, seed + 1)
    where = torch.randperm(10, generator=torch.Generator().manual_seed(seed))[:rows]
    want = dst.view(torch.uint8).clone()
    want.index_copy_(0, where, src.contiguous().view(torch.uint8))
    _scatter_rows(dst, where, src)
    assert torch.equal(dst.view(torch.uint8), want)


def test_copy_words_refuses_two_dtypes_and_copies_odd_shapes_element_wise():
    a, b = torch.zeros(3, 3, dtype=torch.float16), torch.ones(3, 3, dtype=torch.float16)
    copy_words(a, b)
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match='one dtype and shape'):
        copy_words(a, b.float())
