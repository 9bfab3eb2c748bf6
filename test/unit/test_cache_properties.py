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

"""The paged stream cache against the dense reference, step by step (hypothesis)."""

import math

from hypothesis import given, HealthCheck, settings, strategies as st
from lingbot_ros.cache.backends import resolve_backend
from lingbot_ros.cache.layout import camera_head_layout, StreamLayout
from lingbot_ros.cache.overflow import CacheOverflow
from lingbot_ros.cache.pool import KVPool
from lingbot_ros.cache.stream import PagedStreamCache
from oracles.dense_cache import DenseStreamCache, FrameRole
import pytest
import torch

ATOL = 1e-5
HEADS, HEAD_DIM = 2, 4


def dense_visible_tokens(d: DenseStreamCache, layer: int, patch_tokens: int) -> int:
    """Keys the dense reference attended to for ``layer`` (its own visibility rule)."""
    everything = d._frames + d._pending
    scale = [f for f in everything if f.role is FrameRole.SCALE and layer in f.patch]
    window = [f for f in everything if f.role is FrameRole.WINDOW and layer in f.patch]
    if not d._defer:
        window = window[-d.sliding_window:]
    return len(everything) * d.special_tokens + (len(scale) + len(window)) * patch_tokens


def check_consistent(c: PagedStreamCache, d: DenseStreamCache) -> None:
    """Counters equal the reference's; slots, page table and stats add up."""
    assert c.frames == d.frames
    assert c.patch_frames_resident == d.patch_frames_resident
    assert c.evictions == d.evictions
    assert c.rollbacks == d.rollbacks
    c._slots.check()
    lay = c.layout
    s = c.stats()
    assert s.scale_pages + s.live_pages + s.free_pages + s.pending_pages == lay.patch_pages
    assert s.special_tokens == c.frames * lay.special_tokens
    assert s.special_pages == math.ceil(s.special_tokens / lay.page)
    assert 0 <= s.bytes_used <= s.bytes_reserved
    run = c.visible_run()
    first = c.first_page
    assert first <= run.first and run.first + run.count <= first + lay.pages
    assert 1 <= run.last_len <= lay.page


def layouts():
    return st.builds(
        StreamLayout,
        special_tokens=st.integers(0, 3), patch_tokens=st.integers(1, 4),
        scale_frames=st.integers(0, 3), sliding_window=st.integers(1, 4),
        special_capacity=st.integers(3, 30), max_call_frames=st.integers(1, 3))


def call_frame(c, d, layers, n, gen):
    """Run one call through every layer; outputs and visible counts must agree."""
    t = c.layout.tokens_per_frame
    for layer in range(layers):
        q, k, v = (torch.randn(1, HEADS, n * t, HEAD_DIM, generator=gen) for _ in range(3))
        out = c.attend(layer, q, k, v)
        ref = d.attend(layer, q, k, v)
        torch.testing.assert_close(out, ref, atol=ATOL, rtol=1e-5)
        start, end = c.visible_tokens()
        assert end - start == dense_visible_tokens(d, layer, c.layout.patch_tokens)
        c._slots.check()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), layers=st.integers(1, 3),
       backend=st.sampled_from(['sdpa', 'paged_sdpa']), data=st.data())
def test_matches_dense_reference_at_every_step(layout, layers, backend, data):
    c = PagedStreamCache.allocate(layout, layers, HEADS, HEAD_DIM, backend=backend)
    d = DenseStreamCache(layout.special_tokens, layout.scale_frames, layout.sliding_window)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label='seed'))
    steps = data.draw(st.lists(st.tuples(
        st.sampled_from(['commit', 'commit', 'rollback', 'abandon', 'reset']),
        st.integers(1, 3), st.booleans()), min_size=1, max_size=25), label='steps')
    for op, n, defer in steps:
        if op == 'reset':
            c.reset()
            d.reset()
            check_consistent(c, d)
            continue
        event = c.check(n, defer)
        if event is not None:
            before = c.stats()
            with pytest.raises(CacheOverflow) as raised:
                c.begin(n, defer)
            assert raised.value == event and event.needed > event.capacity
            after = c.stats()
            assert after.overflow_events == before.overflow_events + 1
            assert after.__class__(**{**after.as_dict(), 'overflow_events': 0}) == \
                before.__class__(**{**before.as_dict(), 'overflow_events': 0})
            check_consistent(c, d)
            continue
        c.begin(n, defer)
        d.begin(n, defer)
        if op != 'abandon':
            call_frame(c, d, layers, n, gen)
        if op == 'commit':
            assert c.commit() == d.commit()
        else:
            c.rollback()
            d.rollback()
        check_consistent(c, d)


def test_special_overflow_is_typed_and_changes_nothing():
    lay = StreamLayout(special_tokens=2, patch_tokens=3, scale_frames=1, sliding_window=2,
                       special_capacity=3)
    c = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM)
    d = DenseStreamCache(2, 1, 2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(3):
        c.begin(1)
        d.begin(1)
        call_frame(c, d, 1, 1, gen)
        c.commit()
        d.commit()
    before = c.stats()
    with pytest.raises(CacheOverflow) as raised:
        c.begin(1)
    event = raised.value
    assert (event.region, event.needed, event.capacity, event.unit) == ('special', 8, 6, 'tokens')
    assert event.frames == 3 and c.stats().overflow_events == 1
    assert c.stats().frames == before.frames and c.pending_frames == 0
    c.reset()      # what the session does: open a new window
    d.reset()
    c.begin(1)
    d.begin(1)
    call_frame(c, d, 1, 1, gen)
    c.commit()
    assert c.stats().overflow_events == 1


def test_patch_overflow_when_a_call_exceeds_its_headroom():
    lay = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=1, sliding_window=2,
                       special_capacity=100, max_call_frames=1)
    c = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM)
    for _ in range(3):
        c.begin(1)
        c.attend(0, *(torch.randn(1, HEADS, 3, HEAD_DIM) for _ in range(3)))
        c.commit()
    assert c.check(1, defer_eviction=False) is None
    assert c.check(1, defer_eviction=True) is None
    assert c.check(2, defer_eviction=False) is not None  # hidden frames stay parked
    event = c.check(2, defer_eviction=True)
    assert event is not None and event.region == 'patch' and event.unit == 'pages'
    assert (event.needed, event.capacity) == (5, 4)
    with pytest.raises(CacheOverflow):
        c.begin(2, defer_eviction=True)


def one_frame(c, d, gen, defer, keep):
    """Run one single-frame call of 2 layers on both caches, keep or drop it, compare."""
    c.begin(1, defer)
    d.begin(1, defer)
    call_frame(c, d, 2, 1, gen)
    if keep:
        c.commit()
        d.commit()
    else:
        c.rollback()
        d.rollback()
    check_consistent(c, d)


def test_camera_head_cache_is_bounded_and_rollback_leaves_no_trace():
    lay = camera_head_layout(capacity=5, page_size=2)
    c = PagedStreamCache.allocate(lay, 2, HEADS, HEAD_DIM)
    d = DenseStreamCache(special_tokens=1, scale_frames=0, sliding_window=1)
    gen = torch.Generator().manual_seed(1)
    for i in range(8):
        keyframe = i % 2 == 0
        if c.check(1, defer_eviction=not keyframe) is not None:
            with pytest.raises(CacheOverflow) as raised:
                c.begin(1, defer_eviction=not keyframe)
            assert raised.value.region == 'special' and c.frames == 5
            break
        one_frame(c, d, gen, defer=not keyframe, keep=keyframe)
    assert c.frames == 4 and c.stats().rollbacks == 4


def test_keyframe_moves_one_page_nonkeyframe_none():
    lay = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=2, sliding_window=3,
                       special_capacity=200)
    c = PagedStreamCache.allocate(lay, 2, HEADS, HEAD_DIM)
    d = DenseStreamCache(1, 2, 3)
    gen = torch.Generator().manual_seed(2)

    def step(defer, keep):
        one_frame(c, d, gen, defer, keep)

    for _ in range(6):                   # fill scale frames and window
        step(False, True)
    for defer, keep, moves in [(False, True, 1),    # interval keyframe: park the oldest
                               (True, False, 0),    # non-keyframe: nothing moves
                               (True, True, 1),     # flow keyframe: newest fills the hole
                               (False, False, 2)]:  # keyframe rolled back: park and return
        before = c.page_moves
        step(defer, keep)
        assert c.page_moves - before == moves


def test_dense_reference_pins_the_first_scale_frames_and_windows_the_rest():
    d = DenseStreamCache(special_tokens=1, scale_frames=2, sliding_window=2)
    d.begin(3)
    assert [f.role for f in d._pending] == [FrameRole.SCALE, FrameRole.SCALE, FrameRole.WINDOW]
    d.rollback()
    d.begin(1)
    assert [f.role for f in d._pending] == [FrameRole.SCALE]  # a rollback pinned nothing
    d.commit()
    d.begin(2)
    assert [f.role for f in d._pending] == [FrameRole.SCALE, FrameRole.WINDOW]


def test_protocol_errors_are_clear():
    lay = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=0, sliding_window=2,
                       special_capacity=10)
    c = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM)
    q = torch.randn(1, HEADS, 3, HEAD_DIM)
    with pytest.raises(RuntimeError):
        c.attend(0, q, q, q)
    with pytest.raises(RuntimeError):
        c.commit()
    c.begin(1)
    with pytest.raises(RuntimeError):
        c.begin(1)
    with pytest.raises(ValueError, match='k shape'):
        c.attend(0, q, torch.randn(1, HEADS, 4, HEAD_DIM), q)
    with pytest.raises(ValueError, match='num_frames'):
        c.check(0)
    with pytest.raises(ValueError, match='sliding_window=0'):
        StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=0, sliding_window=0,
                     special_capacity=10)
    with pytest.raises(ValueError, match='page_size'):
        StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=0, sliding_window=1,
                     special_capacity=10, page_size=4)


def test_pool_size_follows_the_stated_formula():
    lay = StreamLayout(special_tokens=6, patch_tokens=972, scale_frames=8, sliding_window=64,
                       special_capacity=2048)
    assert lay.patch_pages == 73 and lay.special_pages == math.ceil(2048 * 6 / 972) == 13
    expected = 2 * 24 * 86 * 972 * 16 * 64 * 2
    assert lay.nbytes(24, 16, 64, torch.bfloat16) == expected
    assert KVPool.size_bytes([lay, lay], 24, 16, 64, torch.bfloat16) == 2 * expected
    small = StreamLayout(special_tokens=2, patch_tokens=3, scale_frames=1, sliding_window=2,
                         special_capacity=5)
    pool = KVPool([small, small], 2, HEADS, HEAD_DIM)
    assert pool.nbytes == KVPool.size_bytes([small, small], 2, HEADS, HEAD_DIM, torch.float32)
    assert pool.k.shape == (2, 2 * (4 + 4), 3, HEADS, HEAD_DIM)
    stats = PagedStreamCache(pool, 1).stats()
    assert stats.bytes_reserved == small.nbytes(2, HEADS, HEAD_DIM, torch.float32)


def test_backend_resolution_reports_why():
    assert resolve_backend('auto', torch.device('cpu'))[0] == 'sdpa'
    name, reason = resolve_backend('auto', torch.device('cpu'), torch.bfloat16)
    assert name == 'sdpa' and 'not CUDA' in reason
    with pytest.raises(ValueError, match='backend'):
        resolve_backend('flash', torch.device('cpu'))
    with pytest.raises(ValueError, match='CUDA'):
        resolve_backend('flashinfer', torch.device('cpu'))


# --- float8 storage -----------------------------------------------------------------------

FP8 = torch.float8_e4m3fn


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), layers=st.integers(1, 2),
       backend=st.sampled_from(['sdpa', 'paged_sdpa']), data=st.data())
def test_float8_pool_equals_the_reference_on_fp8_values(layout, layers, backend, data):
    c = PagedStreamCache.allocate(layout, layers, HEADS, HEAD_DIM, dtype=FP8, backend=backend)
    d = DenseStreamCache(layout.special_tokens, layout.scale_frames, layout.sliding_window)
    assert c.pool.dtype == FP8 and c.pool.token_bytes == 2 * layers * HEADS * HEAD_DIM
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16), label='seed'))
    t = layout.tokens_per_frame
    for n, keep, defer in data.draw(st.lists(st.tuples(st.integers(1, 2), st.booleans(),
                                                       st.booleans()), min_size=1,
                                             max_size=12), label='steps'):
        if c.check(n, defer) is not None:
            continue
        c.begin(n, defer)
        d.begin(n, defer)
        for layer in range(layers):
            q, k, v = (torch.randn(1, HEADS, n * t, HEAD_DIM, generator=gen) for _ in range(3))
            k, v = k.to(FP8).float(), v.to(FP8).float()  # exactly representable
            out = c.attend(layer, q, k, v)
            assert out.dtype == torch.float32  # attention ran in the queries' dtype
            torch.testing.assert_close(out, d.attend(layer, q, k, v), atol=ATOL, rtol=1e-5)
        if keep:
            assert c.commit() == d.commit()
        else:
            c.rollback()
            d.rollback()
        check_consistent(c, d)


def test_float8_pool_clamps_instead_of_making_nan():
    lay = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=1, sliding_window=1,
                       special_capacity=4)
    c = PagedStreamCache.allocate(lay, 1, HEADS, HEAD_DIM, dtype=FP8, backend='sdpa')
    c.begin(1)
    big = torch.full((1, HEADS, 3, HEAD_DIM), 1000.0)
    out = c.attend(0, torch.zeros(1, HEADS, 3, HEAD_DIM), big, -big)
    start, end = c.visible_tokens()
    k, v = (t[start:end].float() for t in c.pool.flat(0))
    assert torch.all(k == 448) and torch.all(v == -448) and torch.all(out == -448)


def test_pool_refuses_storage_it_cannot_attend_over():
    lay = StreamLayout(special_tokens=1, patch_tokens=2, scale_frames=1, sliding_window=1,
                       special_capacity=4)
    with pytest.raises(ValueError, match='dtype=torch.int8 is not allowed'):
        KVPool([lay], 1, HEADS, HEAD_DIM, dtype=torch.int8)
    assert resolve_backend('auto', torch.device('cpu'), dtype=FP8)[0] == 'sdpa'


def test_one_flashinfer_workspace_per_device():
    from lingbot_ros.cache import backends
    backends.release_workspaces()
    try:
        a = backends.shared_workspace(torch.device('cpu'))
        assert backends.shared_workspace('cpu') is a
        assert a.numel() == backends.WORKSPACE_BYTES and a.dtype == torch.uint8
    finally:
        backends.release_workspaces()


class _FakeWrapper:
    """Records what a FlashInfer wrapper is asked to plan and run."""

    def __init__(self) -> None:
        self.plans, self.runs = [], []

    def plan(self, *args, **kwargs) -> None:
        self.plans.append(kwargs)

    def run(self, q, *args):
        self.runs.append(q.dtype)
        return torch.zeros_like(q)


def test_flashinfer_float8_plans_keep_the_queries_in_half_precision():
    from lingbot_ros.cache.backends import FlashInferRagged
    pages = torch.zeros(4, 2, HEADS, HEAD_DIM, dtype=FP8)  # the pool's dtype
    q = torch.randn(1, HEADS, 3, HEAD_DIM, dtype=torch.bfloat16)
    ragged = FlashInferRagged.__new__(FlashInferRagged)
    ragged.wrapper, ragged.splits = _FakeWrapper(), 1
    ragged._qo = torch.zeros(2, dtype=torch.int32)
    ragged._kv = torch.zeros(2, dtype=torch.int32)
    ragged._copied = None
    ragged.plan(3, 8, HEADS, HEAD_DIM, torch.bfloat16, FP8)
    ragged.run(q, pages.view(-1, HEADS, HEAD_DIM), pages.view(-1, HEADS, HEAD_DIM))
    assert ragged.wrapper.plans[0]['kv_data_type'] == FP8
    assert ragged.wrapper.runs == [torch.bfloat16]
