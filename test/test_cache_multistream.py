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

"""Several streams in one pool, one attention call per layer == separate runs."""

from hypothesis import given, HealthCheck, settings, strategies as st
from lingbot_ros.cache.batch import StreamBatch
from lingbot_ros.cache.dense import DenseStreamCache
from lingbot_ros.cache.layout import StreamLayout
from lingbot_ros.cache.pool import KVPool
from lingbot_ros.cache.stream import PagedStreamCache
import numpy as np
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


def check_table(batch: StreamBatch) -> None:
    """Check that the batch's CSR table lists exactly each stream's visible run."""
    table = batch.table
    indptr = table.kv_indptr_host.numpy()
    indices = table.kv_indices[:table.total_pages].numpy()
    for i, cache in enumerate(batch.caches):
        run = cache.visible_run()
        assert indptr[i + 1] - indptr[i] == run.count
        assert np.array_equal(indices[indptr[i]:indptr[i + 1]],
                              np.arange(run.first, run.first + run.count))
        assert table.last_page_len_host[i] == run.last_len
    assert np.array_equal(table.kv_indptr.numpy(), indptr)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts=st.integers(2, 3).flatmap(stream_layouts), layers=st.integers(1, 2),
       backend=st.sampled_from(['paged_sdpa', 'sdpa']), data=st.data())
def test_batched_streams_equal_separate_runs(layouts, layers, backend, data):
    pool = KVPool(layouts, layers, HEADS, HEAD_DIM)
    shared = [PagedStreamCache(pool, i, backend='sdpa') for i in range(len(layouts))]
    batch = StreamBatch(shared, backend=backend)
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
            q, k, v = (torch.randn(len(layouts), HEADS, n * tokens, HEAD_DIM, generator=gen)
                       for _ in range(3))
            out = batch.attend(layer, q, k, v)
            for i in range(len(layouts)):
                sl = slice(i, i + 1)
                one = alone[i].attend(layer, q[sl], k[sl], v[sl])
                ref = dense[i].attend(layer, q[sl], k[sl], v[sl])
                torch.testing.assert_close(out[sl], one, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(out[sl], ref, atol=1e-5, rtol=1e-5)
            if backend == 'paged_sdpa':
                check_table(batch)
        for caches in (shared, alone, dense):
            for cache, (_, keep) in zip(caches, plans):
                cache.commit() if keep else cache.rollback()
        for s, a, d in zip(shared, alone, dense):
            assert (s.frames, s.evictions, s.patch_frames_resident) == \
                (d.frames, d.evictions, d.patch_frames_resident)
            assert s.stats() == a.stats()
            s._slots.check()


def test_batch_rejects_mixed_pools_and_shapes():
    lay = StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH, scale_frames=1,
                       sliding_window=2, special_capacity=10)
    a = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM)
    b = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM)
    with pytest.raises(ValueError, match='one pool'):
        StreamBatch([a, b])
    with pytest.raises(ValueError, match='twice'):
        StreamBatch([a, a])
    other = StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH + 1, scale_frames=1,
                         sliding_window=2, special_capacity=10)
    with pytest.raises(ValueError, match='page size'):
        KVPool([lay, other], 1, HEADS, HEAD_DIM)
    batch = StreamBatch([a])
    a.begin(1)
    q = torch.randn(2, HEADS, SPECIAL + PATCH, HEAD_DIM)
    with pytest.raises(ValueError, match='streams'):
        batch.attend(0, q, q, q)


def test_float8_batch_equals_float8_streams_alone():
    lays = [StreamLayout(special_tokens=SPECIAL, patch_tokens=PATCH, scale_frames=s,
                         sliding_window=w, special_capacity=40, max_call_frames=2)
            for s, w in ((1, 2), (0, 3))]
    fp8 = torch.float8_e4m3fn
    pool = KVPool(lays, 2, HEADS, HEAD_DIM, dtype=fp8)
    shared = [PagedStreamCache(pool, i, backend='sdpa') for i in range(2)]
    batch = StreamBatch(shared, backend='paged_sdpa')
    alone = [PagedStreamCache.allocate(lay, 2, HEADS, HEAD_DIM, dtype=fp8, backend='sdpa')
             for lay in lays]
    gen = torch.Generator().manual_seed(5)
    for step in range(6):
        for cache in shared + alone:
            cache.begin(1, defer_eviction=step % 2 == 1)
        for layer in range(2):
            q, k, v = (torch.randn(2, HEADS, SPECIAL + PATCH, HEAD_DIM, generator=gen)
                       for _ in range(3))
            out = batch.attend(layer, q, k, v)
            for i in range(2):
                sl = slice(i, i + 1)
                torch.testing.assert_close(out[sl], alone[i].attend(layer, q[sl], k[sl], v[sl]),
                                           atol=1e-6, rtol=1e-6)
        for cache in shared + alone:
            cache.commit() if step % 3 else cache.rollback()
    assert pool.k.dtype == fp8 and batch.backend == 'paged_sdpa'
