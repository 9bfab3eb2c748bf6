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

"""Cutting a frame's keys into parts: how many, and the merge that makes them one softmax."""

import math

from hypothesis import given, settings, strategies as st
from lingbot_ros.cache.backends import auto_kv_splits, best_kv_splits
from lingbot_ros.cache.layout import StreamLayout
from lingbot_ros.cache.split_merge import merge_splits
from lingbot_ros.cache.stream import PagedStreamCache
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.config import EngineConfig
import pytest
import torch


def test_one_release_frame_on_an_h200_is_cut_in_four():
    # 978 queries / 192 rows per CTA -> 6 tiles x 16 heads = 96 CTAs on 132 SMs: a part
    # count of 4 makes 384 CTAs in 3 waves of a quarter each (0.75 of the unsplit time).
    assert best_kv_splits(96, 132) == 4
    # a scale call's 8 frames already make 656 CTAs: nothing to gain, so no split
    assert best_kv_splits(41 * 16, 132) == 1
    # a shape that fills the SMs exactly stays whole
    assert best_kv_splits(132, 132) == 1


def test_no_split_off_hopper():
    assert auto_kv_splits(978, 16, 64, torch.device('cpu')) == 1


@settings(max_examples=60, deadline=None)
@given(splits=st.integers(1, 6), queries=st.integers(1, 5), heads=st.integers(1, 3),
       keys=st.integers(6, 40), seed=st.integers(0, 2**16))
def test_merged_parts_equal_one_softmax_over_all_keys(splits, queries, heads, keys, seed):
    gen = torch.Generator().manual_seed(seed)
    d = 8
    q = torch.randn(queries, heads, d, generator=gen, dtype=torch.float64)
    k = torch.randn(keys, heads, d, generator=gen, dtype=torch.float64) * 3
    v = torch.randn(keys, heads, d, generator=gen, dtype=torch.float64)
    scores = torch.einsum('qhd,khd->hqk', q, k) / math.sqrt(d)
    full = torch.einsum('hqk,khd->qhd', scores.softmax(-1), v)
    bounds = [(keys * i + splits - 1) // splits for i in range(splits + 1)]   # as plan()
    parts, lse = [], []
    for lo, hi in zip(bounds, bounds[1:]):
        part = scores[..., lo:hi]
        parts.append(torch.einsum('hqk,khd->qhd', part.softmax(-1), v[lo:hi]))
        lse.append((torch.logsumexp(part, -1) / math.log(2)).transpose(0, 1))   # log2, [q, h]
    merged = merge_splits(torch.cat(parts), torch.cat(lse), splits)
    assert torch.allclose(merged, full, atol=1e-12)


def test_the_split_count_is_validated_where_it_is_set():
    with pytest.raises(ConfigError, match='attention_kv_splits'):
        EngineConfig(attention_kv_splits=-1).validate()
    with pytest.raises(ConfigError, match='attention_kv_splits'):
        EngineConfig(attention_kv_splits=17).validate()
    assert EngineConfig(attention_kv_splits=4).validate().attention_kv_splits == 4
    layout = StreamLayout(special_tokens=1, patch_tokens=4, scale_frames=1, sliding_window=2,
                          special_capacity=8)
    with pytest.raises(ValueError, match='kv_splits'):
        PagedStreamCache.allocate(layout, 1, 1, 8, kv_splits=99)
    cache = PagedStreamCache.allocate(layout, 1, 1, 8, kv_splits=3)
    assert cache.splits_for(5) == 3
    assert PagedStreamCache.allocate(layout, 1, 1, 8).splits_for(5) == 1   # auto on the CPU
