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

"""Checkpoint loading: both formats, strictness, and no unpickling of code."""

import collections

from lingbot_ros.model.checkpoint import (CheckpointError, load_model, random_init,
                                          read_state_dict)
from lingbot_ros.model.config import ModelConfig
import pytest
from safetensors.torch import save_file
import torch

CFG = ModelConfig.preset('tiny')


class NotATensor:
    """A class torch.load must never instantiate from a checkpoint."""

    built = False

    def __reduce__(self):
        return (_mark_built, ())


def _mark_built():
    NotATensor.built = True
    return NotATensor()


@pytest.fixture(scope='module')
def state():
    return {k: v.clone() for k, v in random_init(CFG, seed=11).state_dict().items()}


def _images():
    return torch.rand(2, 3, 28, 42, generator=torch.Generator().manual_seed(5))


def _pose(model):
    with torch.no_grad():
        return model(_images(), time_index=0, first_frame=True, scale_frames=True,
                     global_cache=None, camera_cache=None).pose_enc


def _assert_loaded(model, state):
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k
    assert not any(t.is_meta for t in model.parameters())
    assert not any(t.is_meta for t in model.buffers())


@pytest.mark.parametrize('layout', ['pt_top', 'pt_model', 'pth_model_extra', 'safetensors'])
def test_formats_load_identically(tmp_path, state, layout):
    if layout == 'safetensors':
        path = tmp_path / 'w.safetensors'
        save_file(state, str(path))
    else:
        path = tmp_path / ('w.pth' if layout.startswith('pth') else 'w.pt')
        obj = {'pt_top': state, 'pt_model': {'model': state},
               'pth_model_extra': {'model': state, 'epoch': 3, 'note': 'plain data is fine'}}
        torch.save(obj[layout], path)
    model = load_model(CFG, path)
    _assert_loaded(model, state)
    assert not model.training
    reference = random_init(CFG, seed=11)
    torch.testing.assert_close(_pose(model), _pose(reference), rtol=0, atol=0)


def test_random_init_is_seeded(state):
    again = random_init(CFG, seed=11).state_dict()
    other = random_init(CFG, seed=12).state_dict()
    assert all(torch.equal(state[k], again[k]) for k in state)
    assert not torch.equal(state['aggregator.camera_token'], other['aggregator.camera_token'])
    gamma = state['aggregator.frame_blocks.0.ls1.gamma']
    assert 0.1 < gamma.mean() < 0.3
    norm = state['aggregator.frame_blocks.0.norm1.weight']
    assert 0.9 < norm.mean() < 1.1


def _error(tmp_path, obj, name='w.pt'):
    path = tmp_path / name
    torch.save(obj, path)
    with pytest.raises(CheckpointError) as info:
        load_model(CFG, path)
    message = str(info.value)
    assert str(path) in message
    return message


def test_missing_keys_are_named(tmp_path, state):
    bad = dict(state)
    removed = sorted(bad)[:7]
    for k in removed:
        del bad[k]
    message = _error(tmp_path, bad)
    assert 'missing keys 7' in message
    assert removed[0] in message and '(2 more)' in message


def test_unexpected_keys_are_named(tmp_path, state):
    message = _error(tmp_path, {'model': {**state, 'point_head.norm.weight': torch.ones(3)}})
    assert 'unexpected keys 1 (point_head.norm.weight)' in message


def test_wrong_shapes_are_named(tmp_path, state):
    key = 'aggregator.patch_embed.pos_embed'
    bad = {**state, key: torch.zeros(1, 10, 32)}
    message = _error(tmp_path, bad)
    assert f'{key} [1, 10, 32] vs {list(state[key].shape)}' in message


def test_pickled_objects_are_refused(tmp_path, state):
    NotATensor.built = False
    message = _error(tmp_path, {'model': state, 'extra': NotATensor()})
    assert 'refused' in message
    assert not NotATensor.built


def test_non_tensor_entries_are_refused(tmp_path, state):
    bad = collections.OrderedDict(state)
    bad['aggregator.camera_token'] = [1.0, 2.0]
    message = _error(tmp_path, bad)
    assert 'not tensors' in message and 'aggregator.camera_token' in message


def test_unreadable_files(tmp_path):
    for name, payload in (('w.pt', b'not a checkpoint'), ('w.safetensors', b'\x00' * 16),
                          ('w.bin', b'')):
        path = tmp_path / name
        path.write_bytes(payload)
        with pytest.raises(CheckpointError, match=str(path)):
            read_state_dict(path)
    with pytest.raises(CheckpointError, match='no such file'):
        read_state_dict(tmp_path / 'absent.pt')


def test_loaded_tensors_are_assigned_not_copied(tmp_path, state, monkeypatch):
    """The model is built on the meta device and takes the read tensors as they are."""
    from lingbot_ros.model import checkpoint
    read = {k: v.clone() for k, v in state.items()}
    monkeypatch.setattr(checkpoint, 'read_state_dict', lambda path: read)
    model = load_model(CFG, tmp_path / 'any.pt')
    params = dict(model.named_parameters())
    assert all(params[k].data_ptr() == read[k].data_ptr() for k in params)
