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

"""Frames launched ahead (submit / drain, run's pipelining): the same as stepped ones."""

from lingbot_ros.streaming.caches import paged_cache_factory
from lingbot_ros.streaming.session import FrameRejected
import numpy as np
from oracles.dense_cache import dense_cache_factory
import pytest
from session_doubles import (FakeModel, feed as _feed, frame as _frame, session as _session,
                             world as _world)


def _submit(session, ids, stamp0=0):
    out = []
    for i in ids:
        out += session.submit(_frame(i), stamp0 + i * 1000)
    return out


@pytest.mark.parametrize('factory', [dense_cache_factory, paged_cache_factory])
def test_submitted_frames_equal_stepped_ones_across_windows_and_rollbacks(factory):
    """Same calls, same outputs, same counters; only when each result is handed out differs."""
    world = _world(30)
    kw = {'max_frame_num': 9, 'factory': factory, 'scale_frames': 3, 'keyframe_interval': 2,
          'sliding_window': 2}
    stepped_model, ahead_model = FakeModel(world=world), FakeModel(world=world)
    stepped = _session(stepped_model, **kw)
    ahead = _session(ahead_model, **kw)
    ref = _feed(stepped, range(30))
    got, held = [], []
    for i in range(30):
        new = ahead.submit(_frame(i), i * 1000)
        held.append(ahead.in_flight)
        got += new
    got += ahead.drain()
    assert not ahead.in_flight and ahead.drain() == []
    assert ahead_model.calls == stepped_model.calls  # windows re-seeded at the same frames
    assert [r.stamp_ns for r in got] == [r.stamp_ns for r in ref]
    assert [r.index for r in got] == list(range(30))
    for x, y in zip(got, ref):
        assert x.frame_type == y.frame_type and x.window_index == y.window_index
        np.testing.assert_array_equal(x.pose_c2w, y.pose_c2w)
        np.testing.assert_array_equal(x.depth, y.depth)
    assert ahead.stats() == stepped.stats()
    assert [p for _, p in ahead.trajectory][-1].tolist() == ref[-1].pose_c2w.tolist()
    # every streamed frame ran ahead, also those that opened a window (after the one
    # before them landed: its keys may seed it)
    assert held == [False] * 3 + [True] * 27 and stepped.window_index >= 2


def test_flow_mode_frames_are_not_left_in_flight():
    s = _session(FakeModel(), scale_frames=2, keyframe_mode='flow', flow_threshold_px=1.0)
    for i in range(6):
        assert len(s.submit(_frame(i), i)) == (0 if i == 0 else 2 if i == 1 else 1)
        assert not s.in_flight


def test_non_finite_rolled_back_frame_found_at_landing_costs_only_itself():
    ref = _feed(_session(FakeModel(), scale_frames=2, keyframe_interval=2), range(6))
    s = _session(FakeModel(nan_on={3}), scale_frames=2, keyframe_interval=2)
    out = _submit(s, [0, 1, 2, 3])  # 3 is not a keyframe: rolled back at its launch
    with pytest.raises(FrameRejected, match='stamp 3000') as caught:
        s.submit(_frame(4), 4000)
    assert caught.value.frames == 1
    assert s.in_flight  # frame 4 never saw frame 3 and goes on
    out += _submit(s, [5]) + s.drain()
    assert [r.stamp_ns for r in out] == [0, 1000, 2000, 4000, 5000]
    for x, y in zip(out[-2:], ref[-2:]):  # as if 3 had been an ordinary rolled-back frame
        np.testing.assert_array_equal(x.pose_enc, y.pose_enc)
    assert s.window_index == 0


def test_non_finite_kept_frame_found_at_landing_drops_the_next_and_reseeds():
    model = FakeModel(nan_on={3})
    s = _session(model, scale_frames=2)
    out = _submit(s, [0, 1, 2, 3])  # 3 is a keyframe, committed at its launch
    with pytest.raises(FrameRejected, match='stamp 3000.*stamp 4000.*re-seeded') as caught:
        s.submit(_frame(4), 4000)
    assert caught.value.frames == 2 and not s.in_flight
    out += _submit(s, [5, 6]) + s.drain()
    assert [r.stamp_ns for r in out] == [0, 1000, 2000, 5000, 6000]
    assert s.window_index == 1 and all(np.isfinite(r.pose_enc).all() for r in out)
    reseed = [c for c in model.calls if c['first']][-1]
    assert reseed['ids'] == [1, 2] and reseed['scale']  # the last landed keyframes


def test_a_frame_landed_before_a_failure_is_handed_out_by_the_next_call():
    model = FakeModel(fail_on={4})
    s = _session(model, scale_frames=2, keyframe_interval=1, max_frame_num=4)
    out = _submit(s, [0, 1, 2, 3])  # 3 fills the window: 4 must open a new one first
    assert s.in_flight
    with pytest.raises(RuntimeError, match='injected'):
        s.submit(_frame(4), 4000)  # 3 landed (its keys seed the window), then 4 failed
    assert not s.in_flight
    out += s.submit(_frame(5), 5000) + s.drain()
    assert [r.stamp_ns for r in out] == [0, 1000, 2000, 3000, 5000]


def test_a_non_finite_frame_landing_before_a_window_opens_counts_the_frame_it_held_up():
    model = FakeModel(nan_on={3})
    s = _session(model, scale_frames=2, max_frame_num=4)
    out = _submit(s, [0, 1, 2, 3])  # 3 (kept) fills the window, still in flight
    with pytest.raises(FrameRejected, match='stamp 3000.*came after it') as caught:
        s.submit(_frame(4), 4000)  # 3 must land before the window opens: 4 goes with it
    assert caught.value.frames == 2 and not s.in_flight
    out += _submit(s, [5, 6]) + s.drain()
    assert [r.stamp_ns for r in out] == [0, 1000, 2000, 5000, 6000]
    assert s.window_index == 1 and all(np.isfinite(r.pose_enc).all() for r in out)
