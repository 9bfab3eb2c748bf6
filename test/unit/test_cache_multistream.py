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

"""Several streams in one pool, each on its own region: equal to separate runs."""

from hypothesis import given, HealthCheck, settings, strategies as st
from lingbot_ros.cache.layout import StreamLayout
from lingbot_ros.cache.pool import KVPool
from lingbot_ros.cache.stream import PagedStreamCache
from oracles.dense_cache import DenseStreamCache
import pytest
import torch

HEADS, HEAD_DIM = 2, 4
SPECIAL, PATCH = 2, 3


def stream_layouts(count):
    """Streams may differ in scale frames, window and capacity; not in frame shape."""
    one = st.builds(StreamLayout, special_tokens=st.just(SPECIAL), patch_tokens=st.just(PATCH),
                    scale_frames=st.integers(0, 2), sliding_window=st.integers(1, 3),
                    special_capacity=st.integers(40, 60), max_call_frames=st.just(2))
    return st.lists(one, min_size=count, max_size=count)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts=st.integers(2, 3).flatmap(stream_layouts), layers=st.integers(1, 2),
       backend=st.sampled_from(['paged_sdpa', 'sdpa']), data=st.data())
def test_streams_sharing_a_pool_equal_separate_runs(layouts, layers, backend, data):
    pool = KVPool(layouts, layers, HEADS, HEAD_DIM)
    shared = [PagedStreamCache(pool, i, backend=backend) for i in range(len(layouts))]
    alone = [PagedStreamCache.allocate(lay, layers, HEADS, HEAD_DIM, backend='sdpa')
             for lay in layouts]
    dense = [DenseStreamCache(lay.special_tokens, lay.scale_frames, lay.sliding_window)
             for lay in layouts]
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label='seed'))
    steps = data.draw(st.integers(3, 14), label='steps')
    tokens = SPECIAL + PATCH
    for _ in range(steps):
        n = data.draw(st.integers(1, 2), label='frames')
        plans = [data.draw(st.tuples(st.booleans(), st.booleans()), label='defer, keep')
                 for _ in layouts]
        for caches in (shared, alone, dense):
            for cache, (defer, _) in zip(caches, plans):
                cache.begin(n, defer)
        for layer in range(layers):
            # streams take turns on one pool: a write into the wrong region shows later
            qkv = [[torch.randn(1, HEADS, n * tokens, HEAD_DIM, generator=gen)
                    for _ in range(3)] for _ in layouts]
            outs = [cache.attend(layer, *t) for cache, t in zip(shared, qkv)]
            for i, (q, k, v) in enumerate(qkv):
                torch.testing.assert_close(outs[i], alone[i].attend(layer, q, k, v),
                                           atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(outs[i], dense[i].attend(layer, q, k, v),
                                           atol=1e-5, rtol=1e-5)
        for caches in (shared, alone, dense):
            for cache, (_, keep) in zip(caches, plans):
                cache.commit() if keep else cache.rollback()
        for s, a, d in zip(shared, alone, dense):
            assert (s.frames, s.evictions, s.patch_frames_resident) == \
                (d.frames, d.evictions, d.patch_frames_resident)
            assert s.stats() == a.stats()
            s._slots.check()


def test_a_pool_has_one_page_size():
    lay = StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH, scale_frames=1,
                       sliding_window=2, special_capacity=10)
    other = StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH + 1, scale_frames=1,
                         sliding_window=2, special_capacity=10)
    with pytest.raises(ValueError, match='page size'):
        KVPool([lay, other], 1, HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match='at least one stream'):
        KVPool([], 1, HEADS, HEAD_DIM)


def test_float8_streams_sharing_a_pool_equal_float8_streams_alone():
    lays = [StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH, scale_frames=s,
                         sliding_window=w, special_capacity=40, max_call_frames=2)
            for s, w in ((1, 2), (0, 3))]
    fp8 = torch.float8_e4m3fn
    pool = KVPool(lays, 2, HEADS, HEAD_DIM, dtype=fp8)
    shared = [PagedStreamCache(pool, i, backend='paged_sdpa') for i in range(2)]
    alone = [PagedStreamCache.allocate(lay, 2, HEADS, HEAD_DIM, dtype=fp8, backend='sdpa')
             for lay in lays]
    gen = torch.Generator().manual_seed(5)
    for step in range(6):
        for cache in shared + alone:
            cache.begin(1, defer_eviction=step % 2 == 1)
        for layer in range(2):
            qkv = [[torch.randn(1, HEADS, SPECIAL + PATCH, HEAD_DIM, generator=gen)
                    for _ in range(3)] for _ in lays]
            outs = [cache.attend(layer, *t) for cache, t in zip(shared, qkv)]
            for i in range(2):
                torch.testing.assert_close(outs[i], alone[i].attend(layer, *qkv[i]),
                                           atol=1e-6, rtol=1e-6)
        for cache in shared + alone:
            cache.commit() if step % 3 else cache.rollback()
    assert pool.k.dtype == fp8
