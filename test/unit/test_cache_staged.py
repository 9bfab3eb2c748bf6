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
The staged attention a whole-frame CUDA graph captures, against the plain one (hypothesis).

Two paged caches see the same calls: one through ``attend``, one through ``stage`` +
``attend_staged`` wherever it stages (calls it refuses go through ``attend``, as the
runner would run them eagerly); a dense reference beside them. Outputs agree within
float32 rounding: the staged SDPA attends over the stream's whole region with a mask
instead of over the visible run, so its sums run over a different number of (zero)
terms in another order. The stored keys and values are compared exactly: both paths
copy the same numbers into the same places.
"""

from hypothesis import given, HealthCheck, settings, strategies as st
from lingbot_ros.cache.layout import camera_head_layout, StreamLayout
from lingbot_ros.cache.stream import PagedStreamCache
from lingbot_ros.model.graphs import GraphedStep, stageable, StagingRefused
from oracles.dense_cache import DenseStreamCache
import pytest
import torch

HEADS, HEAD_DIM = 2, 4
ATOL, RTOL = 1e-5, 1e-5   # float32; see the module docstring


def layouts():
    return st.builds(
        StreamLayout,
        special_tokens=st.integers(0, 3), patch_tokens=st.integers(1, 4),
        scale_frames=st.integers(0, 3), sliding_window=st.integers(1, 4),
        special_capacity=st.integers(8, 30), max_call_frames=st.integers(1, 3))


def _pair(layout, layers):
    plain = PagedStreamCache.allocate(layout, layers, HEADS, HEAD_DIM, backend='sdpa')
    staged = PagedStreamCache.allocate(layout, layers, HEADS, HEAD_DIM, backend='sdpa')
    dense = DenseStreamCache(layout.special_tokens, layout.scale_frames, layout.sliding_window)
    return plain, staged, dense


def _call(plain, staged, dense, layers, n, gen) -> bool:
    """One call through every layer of the three caches; True when it ran staged."""
    ran_staged = staged.stage()
    t = plain.layout.tokens_per_frame
    for layer in range(layers):
        q, k, v = (torch.randn(1, HEADS, n * t, HEAD_DIM, generator=gen) for _ in range(3))
        ref = dense.attend(layer, q, k, v)
        out_plain = plain.attend(layer, q, k, v)
        out = (staged.attend_staged if ran_staged else staged.attend)(layer, q, k, v)
        torch.testing.assert_close(out_plain, ref, atol=ATOL, rtol=RTOL)
        torch.testing.assert_close(out, out_plain, atol=ATOL, rtol=RTOL)
    return ran_staged


def _same_visible_keys(plain, staged, layers):
    start, end = plain.visible_tokens()
    assert staged.visible_tokens() == (start, end)
    for layer in range(layers):
        for a, b in zip(plain.pool.flat(layer), staged.pool.flat(layer)):
            assert torch.equal(a[start:end], b[start:end])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), layers=st.integers(1, 3), data=st.data())
def test_staged_attention_equals_plain_attention_at_every_step(layout, layers, data):
    plain, staged, dense = _pair(layout, layers)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label='seed'))
    steps = data.draw(st.lists(st.tuples(
        st.sampled_from(['commit', 'commit', 'commit', 'rollback', 'reset']),
        st.integers(1, 2), st.booleans()), min_size=1, max_size=30), label='steps')
    # the first call sizes the staging for one frame: every later one-frame call stages
    # (a single frame is always stored), every two-frame call is refused
    for op, n, defer in [('commit', 1, False)] + steps:
        if op == 'reset':
            for c in (plain, staged, dense):
                c.reset()
            continue
        if plain.check(n, defer) is not None:
            continue
        for c in (plain, staged, dense):
            c.begin(n, defer)
        assert _call(plain, staged, dense, layers, n, gen) == (n == 1)
        _same_visible_keys(plain, staged, layers)
        if op == 'commit':
            assert plain.commit() == staged.commit() == dense.commit()
        else:
            for c in (plain, staged, dense):
                c.rollback()
        _same_visible_keys(plain, staged, layers)


def test_the_camera_head_layout_stages_every_single_frame_call():
    layout = camera_head_layout(capacity=12, page_size=4)
    plain = PagedStreamCache.allocate(layout, 2, HEADS, HEAD_DIM, backend='sdpa')
    staged = PagedStreamCache.allocate(layout, 2, HEADS, HEAD_DIM, backend='sdpa')
    dense = DenseStreamCache(1, 0, 1)
    gen = torch.Generator().manual_seed(5)
    for _ in range(12):
        for c in (plain, staged, dense):
            c.begin(1)
        assert _call(plain, staged, dense, 2, 1, gen)
        for c in (plain, staged, dense):
            c.commit()
        _same_visible_keys(plain, staged, 2)


def test_a_call_of_another_size_or_with_an_unstored_frame_is_not_staged():
    layout = StreamLayout(special_tokens=2, patch_tokens=3, scale_frames=0, sliding_window=1,
                          special_capacity=10, max_call_frames=2)
    cache = PagedStreamCache.allocate(layout, 1, HEADS, HEAD_DIM, backend='sdpa')
    assert not cache.stage()            # no call open
    cache.begin(2)                      # two window frames, window 1: one is not stored
    assert not cache.stage()
    cache.rollback()
    cache.begin(1)
    assert cache.stage()                # the staging buffers are now sized for one frame
    cache.commit()
    cache.begin(2, defer_eviction=True)  # every frame stored, but another size
    assert not cache.stage()
    cache.rollback()


def test_attend_staged_needs_a_stage_and_the_paged_stand_in_never_stages():
    layout = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=0, sliding_window=2,
                          special_capacity=4)
    cache = PagedStreamCache.allocate(layout, 1, HEADS, HEAD_DIM, backend='sdpa')
    cache.begin(1)
    q = torch.zeros(1, HEADS, 3, HEAD_DIM)
    with pytest.raises(RuntimeError, match='before stage'):
        cache.attend_staged(0, q, q, q)
    paged = PagedStreamCache.allocate(layout, 1, HEADS, HEAD_DIM, backend='paged_sdpa')
    paged.begin(1)
    assert not paged.capturable and not paged.stage()


def test_a_frame_graph_takes_only_caches_that_attend_staged():
    """A cache that cannot attend inside a graph sends the frame to the eager forward."""
    layout = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=0, sliding_window=2,
                          special_capacity=4)
    staged = PagedStreamCache.allocate(layout, 1, HEADS, HEAD_DIM, backend='sdpa')
    paged = PagedStreamCache.allocate(layout, 1, HEADS, HEAD_DIM, backend='paged_sdpa')
    dense = DenseStreamCache(1, 0, 2)
    assert stageable(staged) and not stageable(paged) and not stageable(dense)
    model = torch.nn.Linear(1, 1)
    for caches, refused in (((dense, staged), 'global'), ((staged, paged), 'camera')):
        with pytest.raises(StagingRefused, match=f'the {refused} cache cannot attend'):
            GraphedStep(model, 14, 14, with_depth=False, caches=caches)


def test_a_float8_pool_is_written_the_same_staged_as_plain():
    # PyTorch has no index_copy_ for float8: the staged write goes through the bytes. Both
    # paths must store the same float8 values (the CUDA-graph capture of the 8 GB profile
    # failed on exactly this write before).
    layout = StreamLayout(special_tokens=2, patch_tokens=3, scale_frames=1, sliding_window=2,
                          special_capacity=10, max_call_frames=1)
    caches = [PagedStreamCache.allocate(layout, 2, HEADS, HEAD_DIM, dtype=torch.float8_e4m3fn,
                                        backend='sdpa') for _ in range(2)]
    plain, staged = caches
    gen = torch.Generator().manual_seed(3)
    t = layout.tokens_per_frame
    for step in range(6):
        for c in caches:
            c.begin(1, False)
        assert staged.stage()
        for layer in range(2):
            q, k, v = (600 * torch.randn(1, HEADS, t, HEAD_DIM, generator=gen)
                       for _ in range(3))  # beyond float8's +-448: clamped, never NaN
            out = staged.attend_staged(layer, q, k, v)
            torch.testing.assert_close(out, plain.attend(layer, q, k, v), atol=1e-4, rtol=1e-4)
            assert torch.isfinite(out).all()
        for c in caches:
            c.commit()
        _same_visible_keys(plain, staged, 2)
