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

"""A voxel map saved and taken back goes on as the one that was never saved; in the file too."""

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.errors import StateCorrupt
from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig
from lingbot_ros.streaming.state import capture, load_into, read_voxels, write_captured
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import save_file
import torch


def _observations(seed, count, size):
    """Clustered points (many land in one voxel), colours, confidences with ties and NaN."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        xyz = rng.normal(scale=0.5, size=(size, 3)) + rng.integers(-2, 3, size=3)
        rgb = rng.integers(0, 256, (size, 3), dtype=np.uint8)
        conf = rng.choice([0.5, 1.0, 2.0, np.nan], size).astype(np.float32)
        out.append((xyz, rgb, conf))
    return out


def _same(a, b):
    assert np.array_equal(a.rows(), b.rows())
    assert a.stats() == b.stats()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(2, 10), size=st.integers(1, 80),
       cut=st.integers(0, 10), bound=st.integers(1, 200))
def test_an_imported_map_merges_and_drops_like_the_original(seed, count, size, cut, bound):
    """Reference: the cloud that was never exported, fed the same observations."""
    cfg = MapCloudConfig(voxel_size=0.3, max_points=bound)
    obs = _observations(seed, count, size)
    cut = min(cut, count)
    original = MapCloud(cfg)
    for o in obs[:cut]:
        original.add_points(*o)
    resumed = MapCloud(cfg)
    assert resumed.import_voxels(original.export_voxels()) == 0
    _same(resumed, original)
    for o in obs[cut:]:
        assert resumed.add_points(*o) == original.add_points(*o)
        _same(resumed, original)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), bound=st.integers(1, 60))
def test_a_smaller_bound_drops_the_least_recently_observed_as_set_config_does(seed, bound):
    """Reference: a live cloud whose max_points is lowered at runtime."""
    cfg = MapCloudConfig(voxel_size=0.3, max_points=500)
    original = MapCloud(cfg)
    for o in _observations(seed, 4, 40):
        original.add_points(*o)
    voxels = original.export_voxels()
    resumed = MapCloud(cfg.replace(max_points=bound))
    dropped = resumed.import_voxels(voxels)
    assert dropped == original.set_config(cfg.replace(max_points=bound))
    _same(resumed, original)


def test_voxels_of_another_size_or_that_cannot_be_a_map_are_refused_unchanged():
    cfg = MapCloudConfig(voxel_size=0.3)
    original = MapCloud(cfg)
    for o in _observations(1, 3, 30):
        original.add_points(*o)
    voxels = original.export_voxels()
    target = MapCloud(cfg)
    target.add_points(*_observations(2, 1, 10)[0])
    before = target.rows()
    other = MapCloud(cfg.replace(voxel_size=0.2))
    with pytest.raises(ValueError, match='voxel size 0.3 in the state, 0.2 here'):
        other.import_voxels(voxels)
    bad = {'keys': dataclasses.replace(voxels, keys=np.zeros_like(voxels.keys)),
           'counts': dataclasses.replace(voxels, counts=voxels.counts * 0),
           'shape': dataclasses.replace(voxels, rgb=voxels.rgb[:, :2]),
           'dtype': dataclasses.replace(voxels, sums=voxels.sums.astype(np.float32)),
           'epoch': dataclasses.replace(voxels, epoch=-2)}
    for name, v in bad.items():
        with pytest.raises(ValueError):
            target.import_voxels(v)
        assert np.array_equal(target.rows(), before), name


# --- in the state file -----------------------------------------------------------------------

@pytest.fixture(scope='module')
def saved(tmp_path_factory):
    """Write a session's state with a map, and one without."""
    d = tmp_path_factory.mktemp('map_state')
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', seed=3))
    session = engine.new_session('s', StreamConfig(scale_frames=2, sliding_window=2))
    session.run(torch.rand(4, 3, 28, 56, generator=torch.Generator().manual_seed(0)),
                stamps=range(4))
    cloud = MapCloud(MapCloudConfig(voxel_size=0.3))
    for o in _observations(5, 3, 50):
        cloud.add_points(*o)
    taken = capture(session, engine.state_identity())
    voxels = dataclasses.replace(cloud.export_voxels(), frame='rep103')
    write_captured(taken, d / 'with.state', voxels)
    write_captured(taken, d / 'without.state')
    return engine, d, voxels


def test_the_map_comes_back_from_the_file_bit_for_bit(saved):
    engine, d, voxels = saved
    back = read_voxels(d / 'with.state')
    assert (back.voxel_size, back.epoch, back.frame, back.keyframes) == \
        (voxels.voxel_size, voxels.epoch, voxels.frame, voxels.keyframes)
    for f in ('sums', 'counts', 'keys', 'seen', 'confidence', 'rgb'):
        a, b = getattr(back, f), getattr(voxels, f)
        assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert read_voxels(d / 'without.state') is None
    # the session's part is read as before: the map is beside it, not in it
    session = engine.new_session('r', StreamConfig(scale_frames=2, sliding_window=2))
    load_into(session, d / 'with.state', engine.state_identity())
    assert session.frames_seen == 4


def _rewritten(src, dst, tensors=None, header=None):
    with safe_open(str(src), framework='pt') as f:
        meta = dict(f.metadata())
        data = {k: f.get_tensor(k) for k in f.keys()}
    data.update(tensors or {})
    if header is not None:
        meta['header'] = json.dumps(header(json.loads(meta['header'])))
    save_file(data, str(dst), metadata=meta)
    return dst


def _map_header(change):
    def edit(h):
        h['map'].update(change)
        return h
    return edit


@pytest.mark.parametrize('case, words', [
    ('duplicate keys', 'map voxels with the same key twice'),
    ('rgb cut', 'map rgb is uint8'),
    ('voxel size', 'header field map.voxel_size'),
    ('epoch', 'header field map.epoch'),
])
def test_a_bad_map_section_is_refused_in_one_line(saved, tmp_path, case, words):
    _, d, voxels = saved
    src = d / 'with.state'
    keys = torch.from_numpy(voxels.keys.copy())
    keys[1:] = keys[0]
    path = {
        'duplicate keys': lambda: _rewritten(src, tmp_path / 'k.state', {'map.keys': keys}),
        'rgb cut': lambda: _rewritten(src, tmp_path / 'r.state', {
            'map.rgb': torch.from_numpy(voxels.rgb[:, :2].copy())}),
        'voxel size': lambda: _rewritten(src, tmp_path / 'v.state',
                                         header=_map_header({'voxel_size': 'big'})),
        'epoch': lambda: _rewritten(src, tmp_path / 'e.state',
                                    header=_map_header({'epoch': True})),
    }[case]()
    with pytest.raises(StateCorrupt) as info:
        read_voxels(path)
    text = str(info.value)
    assert words in text, text
    assert '\n' not in text and text.startswith(f'state file {path}: ')
