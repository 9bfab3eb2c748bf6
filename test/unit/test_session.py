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
The stream state machine: phases, transactions, keyframes, windows, errors, config.

Most tests drive a small fake model that attends through the injected caches exactly as
the real one does (so cache contents shape its outputs) and can play a known camera
path; the no-trace tests run the real model with the fixtures' weights.
"""

import dataclasses
import json
from pathlib import Path

from lingbot_ros.cache.overflow import CacheOverflow
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.caches import paged_cache_factory
from lingbot_ros.streaming.call_stats import CacheDecision
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine, EngineError
from lingbot_ros.streaming.result import FrameType
from lingbot_ros.streaming.session import FrameRejected, Session
from lingbot_ros.streaming.trajectory import (invert_rigid, matrix_to_quat, pose_enc_to_matrix,
                                              quat_to_matrix, read_tum, write_tum)
from lingbot_ros.streaming.windows import align_overlap, lower_median
import numpy as np
from oracles.dense_cache import dense_cache_factory
import pytest
from session_doubles import (FakeModel, feed as _feed, frame as _frame, H, rot as _rot,
                             session as _session, W, world as _world)
import torch

DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity'


# --- phases and the time index ----------------------------------------------------------

def test_scale_frames_are_buffered_then_run_together():
    model = FakeModel()
    s = _session(model, scale_frames=3)
    assert s.step(_frame(0), 0) == [] and s.step(_frame(1), 1) == []
    out = s.step(_frame(2), 2)
    assert [r.index for r in out] == [0, 1, 2] and [r.stamp_ns for r in out] == [0, 1, 2]
    assert all(r.frame_type == FrameType.SCALE for r in out)
    assert model.calls == [{'ids': [0, 1, 2], 'time': 0, 'first': True, 'scale': True}]
    out = s.step(_frame(3), 3)
    assert len(out) == 1 and out[0].frame_type == FrameType.KEYFRAME
    assert model.calls[-1] == {'ids': [3], 'time': 3, 'first': False, 'scale': False}
    assert out[0].pose_c2w.shape == (4, 4) and out[0].depth.shape == (H, W)


def test_time_index_advances_only_on_committed_frames():
    model = FakeModel()
    s = _session(model, scale_frames=2, keyframe_interval=3)
    results = _feed(s, range(10))
    types = [r.frame_type for r in results[2:]]
    assert types == [FrameType.KEYFRAME, 2, 2] * 2 + [FrameType.KEYFRAME, 2]
    # committed before each streaming frame: 2 scale frames + keyframes so far
    assert [c['time'] for c in model.calls[1:]] == [2, 3, 3, 3, 4, 4, 4, 5]
    st = s.stats()
    assert (st.frames, st.keyframes, st.rollbacks) == (5, 3, 5)


FACTORIES = [dense_cache_factory, paged_cache_factory]


@pytest.mark.parametrize('factory', FACTORIES, ids=['dense', 'paged'])
def test_non_keyframe_leaves_no_trace_in_any_cache_fake(factory):
    """Keyframe outputs equal a run that never saw the non-keyframes (K=1)."""
    a = _feed(_session(FakeModel(), factory=factory, scale_frames=2, keyframe_interval=2,
                       sliding_window=2), range(11))
    kept = [0, 1] + list(range(2, 11, 2))
    b = _feed(_session(FakeModel(), factory=factory, scale_frames=2, sliding_window=2), kept)
    a_kf = [r for r in a if r.is_keyframe]
    assert [r.pose_c2w[0, 0] for r in a_kf] != [r.pose_c2w[0, 0] for r in a[:len(a_kf)]]
    for x, y in zip(a_kf, b):
        np.testing.assert_array_equal(x.pose_enc, y.pose_enc)


@pytest.fixture(scope='module')
def fixture_engine():
    d = DATA / 'keyframes'
    return Engine.load(EngineConfig(checkpoint=str(d / 'weights.safetensors'),
                                    model_config=str(d / 'config.json'), device='cpu'))


@pytest.fixture(scope='module')
def fixture_images():
    return torch.from_numpy(np.load(DATA / 'keyframes' / 'images.npy')[:11])


def _pose_encs(engine, images, sliding_window=4, **stream):
    run = engine.new_session('t', StreamConfig(scale_frames=3, sliding_window=sliding_window,
                                               **stream))
    return run.run(images)


def test_non_keyframe_leaves_no_trace_real_model(fixture_engine, fixture_images):
    a = _pose_encs(fixture_engine, fixture_images, keyframe_interval=3)
    keep = np.flatnonzero(a.arrays['is_keyframe'])
    assert len(keep) < len(fixture_images)
    b = _pose_encs(fixture_engine, fixture_images[keep])
    np.testing.assert_allclose(a.arrays['pose_enc'][keep], b.arrays['pose_enc'],
                               atol=1e-6, rtol=0)
    np.testing.assert_allclose(a.arrays['depth'][keep], b.arrays['depth'], atol=1e-5, rtol=0)


def test_flow_mode_rollback_also_clears_camera_cache(fixture_engine, fixture_images,
                                                     monkeypatch):
    """
    The reference keeps flow-mode non-keyframes in its camera head; we do not.

    The window is wide enough that nothing is evicted, so deferred eviction (a flow-mode
    keyframe still sees the frame its commit evicts) does not enter the comparison.
    """
    flows = iter([9.0, 0.1, 0.2, 9.0, 0.1, 9.0, 0.3, 0.2])
    monkeypatch.setattr(Session, '_flow', lambda self, rec: next(flows))
    a = _pose_encs(fixture_engine, fixture_images, sliding_window=16, keyframe_mode='flow',
                   flow_threshold_px=1.0)
    keep = np.flatnonzero(a.arrays['is_keyframe'])
    expect = [0, 1, 2, 3, 6, 8]
    assert list(keep) == expect
    assert a.kv_stats[2].decision is CacheDecision.ROLLBACK
    assert a.kv_stats[1].decision is CacheDecision.COMMIT
    b = _pose_encs(fixture_engine, fixture_images[keep], sliding_window=16)
    np.testing.assert_allclose(a.arrays['pose_enc'][keep], b.arrays['pose_enc'],
                               atol=1e-6, rtol=0)


def test_flow_mode_max_gap_forces_a_keyframe(monkeypatch):
    monkeypatch.setattr(Session, '_flow', lambda self, rec: 0.0)
    s = _session(FakeModel(), scale_frames=2, keyframe_mode='flow', max_keyframe_gap=3)
    types = [int(r.frame_type) for r in _feed(s, range(12))]
    # first streaming frame always; then every 3rd frame by the gap rule
    assert types == [0, 0, 1, 2, 2, 1, 2, 2, 1, 2, 2, 1]


# --- failures leave the state as it was -------------------------------------------------

@pytest.mark.parametrize('factory', FACTORIES, ids=['dense', 'paged'])
def test_failed_forward_is_rolled_back(factory):
    ref = _feed(_session(FakeModel(), factory=factory, scale_frames=2, sliding_window=2),
                [0, 1, 2, 3, 5, 6])
    model = FakeModel(fail_on={4})
    s = _session(model, factory=factory, scale_frames=2, sliding_window=2)
    out = _feed(s, [0, 1, 2, 3])
    with pytest.raises(RuntimeError, match='injected'):
        s.step(_frame(4), 4000)
    out += _feed(s, [5, 6])
    for x, y in zip(out, ref):
        np.testing.assert_array_equal(x.pose_enc, y.pose_enc)
    assert s.stats().frames == 6


def test_non_finite_output_is_rejected_without_trace():
    ref = _feed(_session(FakeModel(), scale_frames=2), [0, 1, 2, 4])
    s = _session(FakeModel(nan_on={3}), scale_frames=2)
    out = _feed(s, [0, 1, 2])
    with pytest.raises(FrameRejected):
        s.step(_frame(3), 3000)
    out += _feed(s, [4])
    np.testing.assert_array_equal(out[-1].pose_enc, ref[-1].pose_enc)


def test_size_change_is_refused_without_corrupting_state():
    ref = _feed(_session(FakeModel(), scale_frames=2), [0, 1, 2, 3])
    s = _session(FakeModel(), scale_frames=2)
    out = _feed(s, [0, 1, 2])
    with pytest.raises(ValueError, match='differs'):
        s.step(np.zeros((H + 14, W, 3), np.uint8), 5)
    with pytest.raises(ValueError, match='uint8'):
        s.step(np.zeros((H, W, 3), np.float32), 5)
    out += _feed(s, [3])
    np.testing.assert_array_equal(out[-1].pose_enc, ref[-1].pose_enc)
    s.reset()
    assert s.step(np.zeros((H + 14, W, 3), np.uint8), 7) == []


# --- windows ------------------------------------------------------------------------------

@pytest.mark.parametrize('with_depth', [True, False])
def test_windows_bound_the_time_index_and_stay_in_one_frame(with_depth):
    world = _world(40)
    model = FakeModel(world=world)
    s = _session(model, max_frame_num=9 if with_depth else 5, scale_frames=3,
                 keyframe_interval=2, sliding_window=2, with_depth=with_depth)
    out = _feed(s, range(40))
    assert max(c['time'] for c in model.calls) < 9
    reseeds = [c for c in model.calls if c['first']][1:]
    assert len(reseeds) == s.window_index >= 3
    assert all(c['scale'] and c['time'] == 0 and len(c['ids']) == 3 for c in reseeds)
    assert out[-1].window_index == s.window_index and s.stats().window_index == s.window_index
    r0, c0, d0 = world[0]
    for r in out:
        ri, ci, _ = world[r.index]
        np.testing.assert_allclose(r.pose_c2w[:3, :3], r0.T @ ri, atol=1e-5)
        np.testing.assert_allclose(r.pose_c2w[:3, 3], r0.T @ (ci - c0) / d0, atol=1e-5)
        if with_depth:
            np.testing.assert_allclose(r.depth, world[r.index][2] / d0, rtol=1e-5)
        else:
            assert r.depth is None


def test_cache_overflow_opens_a_window_instead_of_crashing():
    def factory(spec):
        agg, cam = dense_cache_factory(spec)
        begin = agg.begin

        def guarded(n, defer_eviction=False):
            if agg.frames + n > 6:
                raise CacheOverflow('special', agg.frames + n, 6, 'frames', agg.frames)
            begin(n, defer_eviction)
        agg.begin = guarded
        return agg, cam

    s = _session(FakeModel(world=_world(20)), factory=factory, scale_frames=2)
    out = _feed(s, range(20))
    assert len(out) == 20 and s.window_index >= 2
    assert s.stats().overflow_events == s.window_index


def test_paged_cache_overflow_is_handled_by_the_session():
    """A paged pool too small for the window limit overflows; the session opens a window."""
    def small(spec):
        return paged_cache_factory(dataclasses.replace(spec, max_frames=5))

    s = _session(FakeModel(world=_world(16)), factory=small, scale_frames=2)
    out = _feed(s, range(16))
    assert len(out) == 16 and s.window_index >= 3
    st = s.stats()
    assert st.overflow_events == s.window_index and st.frames <= 5 and st.bytes_reserved > 0


# --- configuration --------------------------------------------------------------------

def test_runtime_update_applies_from_next_frame_and_guards_restart_fields():
    s = _session(FakeModel(), scale_frames=2)
    out = _feed(s, range(4))
    s.update(s.config.replace(keyframe_interval=3))
    out += _feed(s, range(4, 10))
    assert [int(r.frame_type) for r in out] == [0, 0, 1, 1, 2, 2, 1, 2, 2, 1]
    with pytest.raises(ConfigError, match='scale_frames'):
        s.update(s.config.replace(scale_frames=4))
    s.update(s.config.replace(scale_frames=4), reset=True)
    assert s.frames_seen == 0 and len(s.trajectory) == 0


@pytest.mark.parametrize('field,value,needle', [
    ('scale_frames', 0, '[1, 64]'), ('keyframe_mode', 'magic', "'interval'"),
    ('flow_threshold_px', -1.0, '[0.01, 1000.0]'), ('image_size', 100, 'multiple of 14'),
    ('max_window_frames', 3, 'scale_frames'), ('camera_iterations', -1, '[0, 8]'),
])
def test_stream_config_errors_name_parameter_value_and_rule(field, value, needle):
    with pytest.raises(ConfigError) as err:
        StreamConfig(**{'scale_frames': 4, field: value}).validate()
    text = str(err.value)
    assert text.startswith(f'{field}={value!r}') and needle in text


@pytest.mark.parametrize('field,value', [
    ('dtype', 'int8'), ('device', 'gpu'), ('attention_backend', 'triton'), ('preset', 'huge'),
])
def test_engine_config_errors(field, value):
    with pytest.raises(ConfigError, match=f'{field}='):
        EngineConfig(**{field: value}).validate()


def test_trajectory_is_a_bounded_ring():
    s = _session(FakeModel(), scale_frames=2, trajectory_length=5)
    _feed(s, range(9))
    assert [stamp for stamp, _ in s.trajectory] == [4000, 5000, 6000, 7000, 8000]


def test_camera_iterations_override_reaches_the_model():
    model = FakeModel()
    s = _session(model, scale_frames=2, camera_iterations=1)
    res = s.run(torch.rand(4, 3, H, W))
    assert res.kv_stats[-1].attended.camera_frames_per_iter == (4,)


# --- engine -----------------------------------------------------------------------------

def test_engine_load_errors_name_path_and_reason(tmp_path):
    missing = tmp_path / 'nope.safetensors'
    with pytest.raises(EngineError, match=f'{missing}.*no such file'):
        Engine.load(EngineConfig(checkpoint=str(missing), device='cpu'))
    with pytest.raises(EngineError, match='no such file'):
        Engine.load(EngineConfig(model_config=str(tmp_path / 'c.json'), device='cpu'))
    weights = DATA / 'basic' / 'weights.safetensors'
    release_like = tmp_path / 'wide.json'
    cfg = json.loads((DATA / 'basic' / 'config.json').read_text())
    cfg['shrunk_structure']['aggregator']['depth'] = 6
    release_like.write_text(json.dumps(cfg))
    with pytest.raises(EngineError, match=str(weights)):
        Engine.load(EngineConfig(checkpoint=str(weights), model_config=str(release_like),
                                 device='cpu'))


def test_engine_description_and_fields():
    e = Engine.load(EngineConfig(preset='tiny', device='cpu', seed=3))
    assert e.description.startswith('random weights (preset tiny')
    assert e.device.type == 'cpu' and e.dtype == torch.float32 and e.backend == 'sdpa'
    assert e.model_config.name == 'tiny'


# --- geometry helpers ---------------------------------------------------------------------

def test_quaternion_round_trip_and_tum_file(tmp_path):
    rng = np.random.default_rng(3)
    poses = []
    for _ in range(6):
        p = np.eye(4)
        p[:3, :3] = _rot(rng.normal(0, 1.5, 3))
        p[:3, 3] = rng.normal(0, 3, 3)
        poses.append(p)
        q = matrix_to_quat(p[:3, :3])
        assert q[3] >= 0 and abs(np.linalg.norm(q) - 1) < 1e-12
        np.testing.assert_allclose(quat_to_matrix(q * 3.0), p[:3, :3], atol=1e-12)
        np.testing.assert_allclose(invert_rigid(p) @ p, np.eye(4), atol=1e-12)
    path = tmp_path / 'traj.tum'
    assert write_tum(path, [0.5 * i for i in range(6)], poses) == 6
    first = path.read_text().splitlines()[0].split()
    assert len(first) == 8 and float(first[0]) == 0.0
    stamps, back = read_tum(path)
    np.testing.assert_allclose(stamps, [0.5 * i for i in range(6)])
    np.testing.assert_allclose(back, np.stack(poses), atol=1e-7)
    enc = np.concatenate([poses[0][:3, 3], matrix_to_quat(poses[0][:3, :3]), [1, 1]])
    np.testing.assert_allclose(pose_enc_to_matrix(enc), poses[0], atol=1e-12)


def test_overlap_alignment_maps_anchor_and_scale():
    rng = np.random.default_rng(5)
    curr = []
    for _ in range(3):
        p = np.eye(4)
        p[:3, :3], p[:3, 3] = _rot(rng.normal(0, 1, 3)), rng.normal(0, 1, 3)
        curr.append(p)
    true_r, true_s, true_t = _rot([0.3, -0.2, 0.5]), 2.5, np.array([1.0, -2.0, 0.5])
    prev = []
    for p in curr:
        q = np.eye(4)
        q[:3, :3], q[:3, 3] = true_r @ p[:3, :3], true_s * true_r @ p[:3, 3] + true_t
        prev.append(q)
    depth = [rng.uniform(1, 2, (4, 5)) for _ in range(3)]
    sim = align_overlap(prev, curr, [d * true_s for d in depth], depth)
    assert sim.scale == pytest.approx(true_s)
    np.testing.assert_allclose(sim.rotation, true_r, atol=1e-12)
    np.testing.assert_allclose(sim.translation, true_t, atol=1e-12)
    assert lower_median(np.array([4.0, 1.0, 3.0, 2.0])) == 2.0
    assert align_overlap(prev, curr).scale == 1.0


def test_live_frames_through_the_engine_match_the_array_path():
    """``step`` on raw uint8 frames equals ``run`` on the preprocessed stack."""
    from lingbot_ros.streaming.preprocess import preprocess_frame
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', seed=1))
    cfg = StreamConfig(scale_frames=2, sliding_window=2, image_size=84)
    rng = np.random.default_rng(4)
    frames = [rng.integers(0, 256, (90, 168, 3), dtype=np.uint8) for _ in range(5)]
    live = engine.new_session('live', cfg)
    results = []
    for i, f in enumerate(frames):
        results += live.step(f, 10 + i)
    prepared = [preprocess_frame(f, 'cpu', 84, 14) for f in frames]
    ref = engine.new_session('ref', cfg).run(torch.stack([t for t, _ in prepared]))
    assert [r.stamp_ns for r in results] == [10, 11, 12, 13, 14]
    np.testing.assert_array_equal(np.stack([r.pose_enc for r in results]),
                                  ref.arrays['pose_enc'])
    r, plan = results[-1], prepared[-1][1]
    assert r.input_hw == (90, 168) and r.model_hw == (42, 84) and r.colors.shape == (42, 84, 3)
    expect = plan.intrinsics_to_input(torch.from_numpy(r.intrinsics_model)).numpy()
    np.testing.assert_allclose(r.intrinsics, expect, atol=1e-9)
    assert r.intrinsics[0, 0] == pytest.approx(r.intrinsics_model[0, 0] * 2)


def test_flow_mode_decides_from_the_reference_flow(fixture_engine, fixture_images):
    from lingbot_ros.streaming.flow import flow_magnitude_from_pose_encoding
    out = _pose_encs(fixture_engine, fixture_images, keyframe_mode='flow',
                     flow_threshold_px=3.0, max_keyframe_gap=4)
    a = out.arrays
    flow, is_kf = a['flow_magnitude'], a['is_keyframe']
    assert np.all(np.isnan(flow[:3])) and np.all(np.isfinite(flow[3:]))
    last_kf = 2
    for i in range(3, len(flow)):
        expect = flow_magnitude_from_pose_encoding(
            torch.from_numpy(a['depth'][i, ..., 0]), torch.from_numpy(a['pose_enc'][i]),
            torch.from_numpy(a['pose_enc'][last_kf]))
        assert flow[i] == pytest.approx(float(expect), abs=1e-4)
        decide = i == 3 or flow[i] > 3.0 or i - last_kf >= 4
        assert is_kf[i] == decide, i
        last_kf = i if decide else last_kf
    assert 0 < (~is_kf).sum() and is_kf[3:].sum() > 1
