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
A stream saved and resumed: it goes on exactly as if it had never stopped.

Frames 0..k-1 through one session, saved; a fresh engine of the same seed and a new
session restore it and run frames k..N-1; one session over 0..N-1 is the yardstick. The
window is small, so frames are evicted and windows open around the save. On the CPU in
float32 the two give the same bits, which the tests require (beyond the tolerances the
comparison asks for). Then every refusal, the relocalisation report, the size formula.
"""

import dataclasses
import json
from pathlib import Path

from hypothesis import given, HealthCheck, settings, strategies as st
from lingbot_ros.cache.layout import aggregator_layout, camera_head_layout
from lingbot_ros.cache.pool import KVPool
from lingbot_ros.cache.stream import PagedStreamCache
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.errors import StateCorrupt, StateError, StateMismatch
from lingbot_ros.streaming.relocalise import KeyframeTrack
from lingbot_ros.streaming.result import FrameType
from lingbot_ros.streaming.state import (load_into, random_weights_digest, save_session,
                                         state_bytes)
from lingbot_ros.streaming.state_file import FORMAT_NAME, FORMAT_VERSION
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import save_file
import torch

H, W = 28, 56   # 2 x 4 patches
N = 12
# windows of 5 frames: frame 5 opens window 1 (seeded by frames 3, 4), frame 8 window 2, ...
CFG = StreamConfig(scale_frames=2, sliding_window=2, max_window_frames=5)
DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity'


def _load(seed=1, **kw):
    return Engine.load(EngineConfig(preset='tiny', device='cpu', seed=seed, **kw))


@pytest.fixture(scope='module')
def engines():
    """Return the engine that saves and a fresh one of the same seed that resumes."""
    return _load(), _load()


@pytest.fixture(scope='module')
def images():
    return torch.rand(N, 3, H, W, generator=torch.Generator().manual_seed(0))


_WHOLE = {}


def _whole(engine, images, cfg):
    """One session over every frame, and its outputs (run once per configuration)."""
    if cfg not in _WHOLE:
        session = engine.new_session('whole', cfg)
        _WHOLE[cfg] = session, session.run(images, stamps=range(N))
    return _WHOLE[cfg]


def _split(engines, images, cfg, k, path):
    """Frames 0..k-1, saved; frames k..N-1 in a new session of a fresh engine, restored."""
    a, b = engines
    before = a.new_session('before', cfg)
    first = before.run(images[:k], stamps=range(k))
    saved = save_session(before, path, a.state_identity())
    after = b.new_session('after', cfg)
    load_into(after, path, b.state_identity(), model_hw=(H, W))
    second = after.run(images[k:], stamps=range(k, N), resume=True)
    return first, second, before, after, saved


def _assert_continues(whole, first, second):
    """Check the halves give what one session gives: within the tolerances, bit for bit."""
    got = first.results + second.results
    assert len(got) == len(whole.results)
    for mine, ref in zip(got, whole.results):
        assert (mine.index, mine.stamp_ns, mine.frame_type, mine.window_index,
                mine.map_epoch) == (ref.index, ref.stamp_ns, ref.frame_type,
                                    ref.window_index, ref.map_epoch)
        np.testing.assert_allclose(mine.pose_c2w, ref.pose_c2w, atol=1e-4)
        assert np.array_equal(mine.pose_enc, ref.pose_enc)
        assert (mine.depth is None) == (ref.depth is None)
        if ref.depth is not None:
            np.testing.assert_allclose(mine.depth, ref.depth, rtol=1e-3)
            assert np.array_equal(mine.depth, ref.depth)
            assert np.array_equal(mine.confidence, ref.confidence)
    for key in ('pose_enc_iters', 'debug_agg_camera_tokens'):
        joined = np.concatenate([first.arrays[key], second.arrays[key]])
        assert np.array_equal(joined, whole.arrays[key]), key
    # every call's counters: its index, RoPE time, what it attended to and left behind
    calls = [json.dumps(c.as_record(), sort_keys=True) for c in first.kv_stats + second.kv_stats]
    assert calls == [json.dumps(c.as_record(), sort_keys=True) for c in whole.kv_stats]


CASES = {
    'a window opens at the first resumed frame': (CFG, 5),
    'saved right after a window opened': (CFG, 6),
    'saved mid-window': (CFG, 7),
    'saved after the scale call': (CFG, 2),
    'interval 2, saved after a non-keyframe': (CFG.replace(keyframe_interval=2), 6),
    'interval 2, saved after a keyframe': (CFG.replace(keyframe_interval=2), 7),
    'flow keyframes': (CFG.replace(keyframe_mode='flow', flow_threshold_px=0.5,
                                   max_keyframe_gap=2), 6),
    'no depth asked for': (CFG.replace(with_depth=False), 6),
}


@pytest.mark.parametrize('case', list(CASES))
def test_resume_continues_exactly(case, engines, images, tmp_path):
    cfg, k = CASES[case]
    ref, whole = _whole(engines[0], images, cfg)
    windows = [r.window_index for r in whole.results]
    assert windows[-1] > windows[k - 1], 'a window must open after the save'
    if 'interval 2' in case:
        before = whole.results[k - 1].frame_type
        assert (before == FrameType.NON_KEYFRAME) == ('non-keyframe' in case)
        assert any(r.frame_type == FrameType.NON_KEYFRAME for r in whole.results[k:])
    first, second, before, after, _ = _split(engines, images, cfg, k, tmp_path / 's.state')
    _assert_continues(whole, first, second)
    assert after.stats() == ref.stats()
    assert after.window_index == ref.window_index and after.frames_seen == N
    assert [s for s, _ in after.trajectory] == list(range(N))
    for (_, p), (_, q) in zip(after.trajectory, ref.trajectory):
        assert np.array_equal(p, q)


@settings(max_examples=4, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(k=st.integers(2, N - 1), interval=st.integers(1, 3), window=st.integers(2, 3))
def test_resume_at_any_frame(engines, images, tmp_path, k, interval, window):
    cfg = CFG.replace(keyframe_interval=interval, sliding_window=window)
    first, second, *_ = _split(engines, images, cfg, k, tmp_path / f'{k}.state')
    _assert_continues(_whole(engines[0], images, cfg)[1], first, second)


def test_a_float8_cache_resumes_exactly(images, tmp_path):
    """float8 keys and values (half of bf16's bytes) go through the file bit for bit."""
    engines = tuple(_load(kv_cache_dtype='float8_e4m3') for _ in range(2))
    assert engines[0].state_identity().kv_dtype == 'float8_e4m3fn'
    whole = engines[0].new_session('whole', CFG).run(images, stamps=range(N))
    first, second, *_ = _split(engines, images, CFG, 6, tmp_path / 'f8.state')
    _assert_continues(whole, first, second)


def _frames(n, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (40, 60, 3), dtype=np.uint8) for _ in range(n)]


@pytest.mark.parametrize('k', [1, 7])
def test_live_frames_resume_exactly(engines, tmp_path, k):
    """submit(): a frame in flight lands at the save; a save in the scale phase keeps it."""
    cfg = CFG.replace(image_size=56)
    frames = _frames(10)
    whole = engines[0].new_session('whole', cfg)
    ref = [r for i, f in enumerate(frames) for r in whole.submit(f, i)] + whole.drain()
    a, b = engines
    before = a.new_session('before', cfg)
    got = [r for i, f in enumerate(frames[:k]) for r in before.submit(f, i)]
    assert before.in_flight == (k > cfg.scale_frames)
    saved = save_session(before, tmp_path / 'live.state', a.state_identity())
    got += saved.landed
    assert not before.in_flight
    after = b.new_session('after', cfg)
    load_into(after, saved.path, b.state_identity(), input_hw=(40, 60))
    got += [r for i, f in enumerate(frames[k:], k) for r in after.submit(f, i)] + after.drain()
    assert [r.stamp_ns for r in got] == list(range(10))
    for mine, theirs in zip(got, ref):
        assert np.array_equal(mine.pose_enc, theirs.pose_enc)
        assert np.array_equal(mine.depth, theirs.depth)


def test_the_saving_session_goes_on_unchanged(engines, images, tmp_path):
    cfg = CFG
    session = engines[0].new_session('s', cfg)
    first = session.run(images[:6], stamps=range(6))
    save_session(session, tmp_path / 'x.state', engines[0].state_identity())
    second = session.run(images[6:], stamps=range(6, N), resume=True)
    _assert_continues(_whole(engines[0], images, cfg)[1], first, second)


# --- refusals --------------------------------------------------------------------------

@pytest.fixture(scope='module')
def saved(engines, images, tmp_path_factory):
    """Save a state after frame 6 (frame 5 opened the second window)."""
    path = tmp_path_factory.mktemp('state') / 'cam.state'
    session = engines[0].new_session('saved', CFG)
    session.run(images[:7], stamps=range(7))
    save_session(session, path, engines[0].state_identity())
    return path


def _refused(session, path, identity, kind=StateError, **kw):
    """Check the restore is refused in one line naming the file; the session stays fresh."""
    with pytest.raises(kind) as raised:
        load_into(session, path, identity, **kw)
    text = str(raised.value)
    assert '\n' not in text and str(path) in text
    assert session.frames_seen == 0 and len(session.trajectory) == 0
    assert session.stats().frames == 0 and session.resume_report is None
    assert session.window_index == 0
    return text


def _rewrite(src, dst, tensors=None, metadata=None, drop=()):
    """Copy a state file with some tensors or metadata replaced."""
    with safe_open(str(src), framework='pt') as f:
        meta = dict(f.metadata())
        out = {k: f.get_tensor(k) for k in f.keys() if k not in drop}
    out.update(tensors or {})
    meta.update(metadata or {})
    save_file(out, str(dst), metadata=meta)
    return dst


def _header(path):
    with safe_open(str(path), framework='pt') as f:
        return json.loads(f.metadata()['header'])


@pytest.mark.parametrize('field, value, words', [
    ('weights', 'sha256:' + '0' * 64, 'checkpoint differs'),
    ('dtype', 'bfloat16', 'compute dtype differs'),
    ('kv_dtype', 'float8_e4m3fn', 'KV cache dtype differs'),
    ('camera_kv_dtype', 'bfloat16', 'camera-head cache dtype differs'),
])
def test_another_identity_is_refused(engines, saved, field, value, words):
    identity = dataclasses.replace(engines[1].state_identity(), **{field: value})
    text = _refused(engines[1].new_session('r', CFG), saved, identity, StateMismatch)
    assert words in text and value in text


def test_other_weights_are_refused(saved):
    other = _load(seed=2)
    text = _refused(other.new_session('r', CFG), saved, other.state_identity(), StateMismatch)
    assert 'checkpoint differs' in text and 'random:' in text


def test_another_structure_is_refused(saved, tmp_path):
    tiny = ModelConfig.preset('tiny')
    deeper = dataclasses.replace(tiny, aggregator=dataclasses.replace(tiny.aggregator, depth=4,
                                                                      selected_layers=(0, 1,
                                                                                       2, 3)))
    (tmp_path / 'm.json').write_text(json.dumps(deeper.to_dict()))
    other = Engine.load(EngineConfig(model_config=str(tmp_path / 'm.json'), device='cpu',
                                     seed=1))
    text = _refused(other.new_session('r', CFG), saved, other.state_identity(), StateMismatch)
    assert 'model structure differs' in text and 'aggregator' in text


@pytest.mark.parametrize('change, words', [
    ({'sliding_window': 3}, 'sliding_window differs'),
    ({'scale_frames': 3}, 'scale_frames differs'),
    ({'max_window_frames': 6}, 'max_window_frames differs'),
    ({'camera_iterations': 2}, 'camera_iterations differs'),
    ({'image_size': 70}, 'image_size differs'),
])
def test_other_stream_settings_are_refused(engines, saved, change, words):
    session = engines[1].new_session('r', CFG.replace(**change))
    assert words in _refused(session, saved, engines[1].state_identity(), StateMismatch)


@pytest.mark.parametrize('grid', ['input_hw', 'model_hw'])
def test_another_image_grid_is_refused(engines, saved, grid):
    text = _refused(engines[1].new_session('r', CFG), saved, engines[1].state_identity(),
                    StateMismatch, **{grid: (H, W + 14)})
    assert 'differs' in text and f'{W}x{H}' in text and f'{W + 14}x{H}' in text


def test_a_newer_format_is_refused(engines, saved, tmp_path):
    newer = _rewrite(saved, tmp_path / 'new.state', metadata={'version': str(FORMAT_VERSION + 1)})
    text = _refused(engines[1].new_session('r', CFG), newer, engines[1].state_identity(),
                    StateMismatch)
    assert 'newer' in text


def _corrupt_files(saved, tmp_path):
    data = saved.read_bytes()
    header = _header(saved)
    header['windows']['current']['time'] = 9
    keys = safe_open(str(saved), framework='pt').get_tensor('window.agg.keys')
    return {
        'truncated': (tmp_path / 'cut.state', data[:len(data) - 100], 'not a complete'),
        'garbage': (tmp_path / 'junk.state', b'\x10\x00' + b'x' * 64, 'not a complete'),
        'empty': (tmp_path / 'empty.state', b'', 'not a complete'),
        'missing': (tmp_path / 'nothing.state', None, 'no such file'),
        'not a state': (_rewrite(saved, tmp_path / 'other.state',
                                 metadata={'format': 'something else'}), None,
                        'not a stream state'),
        'header not JSON': (_rewrite(saved, tmp_path / 'hdr.state', metadata={'header': '{x'}),
                            None, 'not JSON'),
        'header field wrong': (_rewrite(saved, tmp_path / 'fld.state', metadata={
            'header': json.dumps({**header, 'session': {**header['session'], 'index': -3}})}),
            None, 'session.index'),
        'tensor missing': (_rewrite(saved, tmp_path / 'drop.state',
                                    drop=('window.sim3.rotation',)), None,
                           'window.sim3.rotation is missing'),
        'tensor of another shape': (_rewrite(saved, tmp_path / 'shape.state', tensors={
            'window.overlap.0.pose': torch.zeros(3, 4, dtype=torch.float64)}), None,
            'window.overlap.0.pose has shape'),
        'cache of another size': (_rewrite(saved, tmp_path / 'size.state', tensors={
            'window.agg.keys': keys[:, 1:].contiguous(),
            'window.agg.values': keys[:, 1:].contiguous()}), None, 'do not fit'),
        'parts that disagree': (_rewrite(saved, tmp_path / 'time.state', metadata={
            'header': json.dumps(header)}), None, 'window time 9'),
    }


@pytest.mark.parametrize('case', ['truncated', 'garbage', 'empty', 'missing', 'not a state',
                                  'header not JSON', 'header field wrong', 'tensor missing',
                                  'tensor of another shape', 'cache of another size',
                                  'parts that disagree'])
def test_a_bad_file_is_refused_and_the_session_stays_fresh(engines, images, saved, tmp_path,
                                                           case):
    path, data, words = _corrupt_files(saved, tmp_path)[case]
    if data is not None:
        path.write_bytes(data)
    session = engines[1].new_session('r', CFG)
    text = _refused(session, path, engines[1].state_identity(), StateCorrupt)
    assert words in text
    fresh = session.run(images[:3], stamps=range(3))
    ref = engines[1].new_session('ref', CFG).run(images[:3], stamps=range(3))
    assert np.array_equal(fresh.arrays['pose_enc'], ref.arrays['pose_enc'])


# --- what a state holds, and what it takes -------------------------------------------------

def test_the_file_says_what_it_belongs_to(engines, saved):
    with safe_open(str(saved), framework='pt') as f:
        meta = f.metadata()
        names = set(f.keys())
    assert meta['format'] == FORMAT_NAME and meta['version'] == str(FORMAT_VERSION)
    header = json.loads(meta['header'])
    identity = header['identity']
    assert identity['weights'] == 'random:' + random_weights_digest(
        ModelConfig.preset('tiny'), 1)
    assert (identity['dtype'], identity['kv_dtype'], identity['camera_kv_dtype']) == \
        ('float32', 'float32', 'float32')
    assert identity['model']['aggregator']['depth'] == 5 and 'name' not in identity['model']
    assert header['settings'] == {'scale_frames': 2, 'sliding_window': 2, 'window_limit': 5,
                                  'camera_iterations': 4, 'image_size': 518}
    assert header['session']['model_hw'] == [H, W] and header['session']['index'] == 7
    window = header['windows']['current']
    assert (window['index'], window['time']) == (1, 4)   # frames 3, 4 re-run, then 5, 6
    assert sorted(window['agg']['slot_frame']) == [0, 1, 2, 3]   # all resident
    assert {'window.agg.keys', 'window.camera.keys', 'window.sim3.scale',
            'trajectory.pose', 'keyframes.position', 'window.overlap.1.depth'} <= names


def test_checkpoint_weights_are_named_by_their_sha256():
    import hashlib
    d = DATA / 'keyframes'
    engine = Engine.load(EngineConfig(checkpoint=str(d / 'weights.safetensors'),
                                      model_config=str(d / 'config.json'), device='cpu'))
    digest = hashlib.sha256((d / 'weights.safetensors').read_bytes()).hexdigest()
    assert engine.state_identity().weights == f'sha256:{digest}'
    assert random_weights_digest(ModelConfig.preset('tiny'), 1) != \
        random_weights_digest(ModelConfig.preset('tiny'), 2)


def test_size_formula_matches_the_file(engines, saved):
    """The file's tensor bytes are what state_bytes says of a state of that content."""
    header = _header(saved)
    raw = saved.read_bytes()
    data_bytes = len(raw) - 8 - int.from_bytes(raw[:8], 'little')
    size = state_bytes(ModelConfig.preset('tiny'), CFG, (H, W), torch.float32)
    window = header['windows']['current']
    trajectory = len(_tensor(saved, 'trajectory.stamp_ns'))
    keyframes = len(_tensor(saved, 'keyframes.index'))
    expect = size.total(resident=len(window['agg']['slot_frame']), committed=window['time'],
                        overlap=len(window['overlap']), poses=trajectory,
                        keyframes=keyframes)
    assert data_bytes == expect
    assert 0.1e6 < len(raw) < 0.2e6   # this file: a tiny structure, a 2 x 4 patch grid


def _tensor(path, name):
    with safe_open(str(path), framework='pt') as f:
        return f.get_tensor(name)


def test_release_structure_per_cached_frame():
    """A 640x480 camera (518x392 grid, 37 x 28 patches) on the release structure."""
    release = ModelConfig.preset('release')
    bf16 = state_bytes(release, StreamConfig(), (392, 518), torch.bfloat16)
    agg = (37 * 28 + 6) * 2 * 24 * 16 * 64 * 2       # keys and values, 24 layers, bf16
    camera = 2 * 4 * 4 * 2048 * 4                     # 16 trunk layers, float32
    assert bf16.per_cached_frame == agg + camera == 102_694_912
    assert bf16.per_evicted_frame == 6 * 2 * 24 * 16 * 64 * 2 + camera
    fp8 = state_bytes(release, StreamConfig(), (392, 518), torch.float8_e4m3fn)
    assert fp8.per_cached_frame == agg // 2 + camera
    full = bf16.full(StreamConfig(), 1024)
    assert full == bf16.total(72, 1024, 8)


# --- the relocalisation report -----------------------------------------------------------

def test_resume_report_measures_against_the_saved_keyframes(engines, images, tmp_path):
    first, second, before, after, _ = _split(engines, images, CFG, 6, tmp_path / 'r.state')
    report = after.resume_report
    assert report is not None and report.done is False and len(report.frames) == 6
    kept = [r for r in first.results if r.frame_type != FrameType.NON_KEYFRAME]
    positions = np.stack([r.pose_c2w[:3, 3] for r in kept])
    np.testing.assert_array_equal(report.saved.position, positions)
    for got, result in zip(report.frames, second.results):
        gaps = np.linalg.norm(positions - result.pose_c2w[:3, 3], axis=1)
        assert got.index == result.index and got.distance == pytest.approx(gaps.min())
        assert got.keyframe_index == kept[int(np.argmin(gaps))].index
    assert report.summary().startswith('6 of 10 resumed frames against 6 saved keyframes')
    np.testing.assert_allclose(report.distances(2.0), 2 * report.distances())


def test_keyframe_track_keeps_the_current_map_bounded(engines, images):
    session = engines[0].new_session('t', CFG.replace(trajectory_length=3))
    session.run(images[:6])
    track = session.export_state().keyframes
    assert list(track.index) == [3, 4, 5] and track.map_epoch == 1
    t = KeyframeTrack(4)
    results = session.run(images[:3]).results   # a reset: a new map
    for r in results:
        t.landed(r)
    assert len(t.export()) == 3
    t.landed(dataclasses.replace(results[0], map_epoch=results[0].map_epoch + 1))
    assert len(t.export()) == 1


# --- the cache alone: export, import, go on ------------------------------------------------

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scale=st.integers(0, 3), window=st.integers(1, 4), special=st.integers(0, 3),
       patch=st.integers(1, 3), data=st.data())
def test_cache_imported_goes_on_like_the_original(scale, window, special, patch, data):
    layout = aggregator_layout(patch_tokens=patch, scale_frames=scale, sliding_window=window,
                               special_capacity=40, special_tokens=special)
    heads, dim, layers = 2, 4, 2
    a = PagedStreamCache.allocate(layout, layers, heads, dim)
    # the copy lives in another pool, as the second stream of two
    pool = KVPool([camera_head_layout(capacity=8, page_size=patch), layout], layers, heads,
                  dim)
    b = PagedStreamCache(pool, 1)
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2 ** 16)))
    ops = st.tuples(st.sampled_from(['commit', 'commit', 'rollback']), st.integers(1, 2),
                    st.booleans())
    before = data.draw(st.lists(ops, max_size=12))
    after = data.draw(st.lists(ops, min_size=1, max_size=8))

    def call(cache, n, defer, op, tensors):
        cache.begin(n, defer)
        outs = [cache.attend(layer, *t) for layer, t in enumerate(tensors)]
        cache.commit() if op == 'commit' else cache.rollback()
        return outs

    def draw(n):
        return [[torch.randn(1, heads, n * layout.tokens_per_frame, dim, generator=gen)
                 for _ in range(3)] for _ in range(layers)]

    for op, n, defer in before:
        if a.check(n, defer) is None:
            call(a, n, defer, op, draw(n))
    b.import_state(a.export_state())
    assert (b.frames, b.patch_frames_resident, b.evictions, b.rollbacks) == \
        (a.frames, a.patch_frames_resident, a.evictions, a.rollbacks)
    for op, n, defer in after:
        if a.check(n, defer) is not None:
            assert b.check(n, defer) is not None
            continue
        tensors = draw(n)
        for x, y in zip(call(a, n, defer, op, tensors), call(b, n, defer, op, tensors)):
            torch.testing.assert_close(x, y, atol=1e-6, rtol=1e-6)
        assert a.stats().as_dict() == b.stats().as_dict()


def test_cache_refuses_a_state_of_another_layout():
    lay = aggregator_layout(patch_tokens=2, scale_frames=1, sliding_window=2,
                            special_capacity=10, special_tokens=1)
    a = PagedStreamCache.allocate(lay, 1, 2, 4)
    for _ in range(3):
        a.begin(1)
        a.attend(0, *(torch.randn(1, 2, 3, 4) for _ in range(3)))
        a.commit()
    smaller = PagedStreamCache.allocate(dataclasses.replace(lay, sliding_window=1), 1, 2, 4)
    with pytest.raises(ValueError, match='slots'):
        smaller.import_state(a.export_state())
    assert smaller.frames == 0
    wider = PagedStreamCache.allocate(lay, 1, 2, 8)
    with pytest.raises(ValueError, match='do not fit'):
        wider.import_state(a.export_state())
    a.begin(1)
    with pytest.raises(RuntimeError, match='pending'):
        a.export_state()


# --- the save itself ---------------------------------------------------------------------

def test_a_failed_save_leaves_the_old_file(engines, images, saved, tmp_path, monkeypatch):
    import safetensors.torch
    target = tmp_path / 'keep.state'
    target.write_bytes(saved.read_bytes())
    session = engines[0].new_session('f', CFG)
    session.run(images[:3])

    def half_written(tensors, filename, metadata=None):
        Path(filename).write_bytes(b'partial')
        raise OSError('disk full')
    monkeypatch.setattr(safetensors.torch, 'save_file', half_written)
    with pytest.raises(OSError, match='disk full'):
        save_session(session, target, engines[0].state_identity())
    assert target.read_bytes() == saved.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ['keep.state']


# --- on the GPU: bf16, CUDA graphs, FlashInfer -------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
def test_resume_on_the_gpu_within_bf16_tolerance(tmp_path):
    """The same comparison on CUDA in bf16 with the production path (graphs, FlashInfer)."""
    from lingbot_ros.model.config import (AggregatorConfig, CameraHeadConfig, DepthHeadConfig,
                                          PatchEmbedConfig)
    small64 = ModelConfig(   # FlashInfer's head size
        name='small64', patch_embed=PatchEmbedConfig(embed_dim=128, depth=2, num_heads=2),
        aggregator=AggregatorConfig(embed_dim=128, depth=4, num_heads=2,
                                    selected_layers=(0, 1, 2, 3), rope3d_split=(20, 22, 22)),
        camera_head=CameraHeadConfig(trunk_depth=2, num_heads=4),
        depth_head=DepthHeadConfig(features=16, out_channels=(8, 16, 32, 32))).validate()
    (tmp_path / 'm.json').write_text(json.dumps(small64.to_dict()))
    cfg = EngineConfig(model_config=str(tmp_path / 'm.json'), device='cuda', dtype='bfloat16',
                       attention_backend='auto', seed=3, cuda_graphs=True)
    a, b = Engine.load(cfg), Engine.load(cfg)
    stream = StreamConfig(scale_frames=2, sliding_window=3, max_window_frames=6,
                          keyframe_interval=2, image_size=112)
    images = torch.rand(14, 3, 84, 112, generator=torch.Generator().manual_seed(0))
    whole = a.new_session('whole', stream).run(images, stamps=range(14))
    k = 7
    before = a.new_session('before', stream)
    first = before.run(images[:k], stamps=range(k))
    save_session(before, tmp_path / 'gpu.state', a.state_identity())
    after = b.new_session('after', stream)
    load_into(after, tmp_path / 'gpu.state', b.state_identity(), model_hw=(84, 112))
    second = after.run(images[k:], stamps=range(k, 14), resume=True)
    got = first.results + second.results
    assert [r.window_index for r in got] == [r.window_index for r in whole.results]
    for mine, ref in zip(got, whole.results):
        np.testing.assert_allclose(mine.pose_c2w, ref.pose_c2w, atol=2e-2)
        np.testing.assert_allclose(mine.depth, ref.depth, rtol=2e-2, atol=1e-3)
    print('gpu resume: poses max |diff|',
          max(float(np.abs(m.pose_c2w - r.pose_c2w).max()) for m, r in zip(got, whole.results)),
          'graphs:', b.graph_status)
