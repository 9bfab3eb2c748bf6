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
import pickle
import struct
import zipfile

from lingbot_ros.model import checkpoint
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


@pytest.mark.parametrize('layout', ['pt_top', 'pt_model', 'pth_model_extra', 'safetensors',
                                    'pt_legacy'])
def test_formats_load_identically(tmp_path, state, layout):
    if layout == 'safetensors':
        path = tmp_path / 'w.safetensors'
        save_file(state, str(path))
    elif layout == 'pt_legacy':  # torch.save before 1.6: a bare pickle, not a zip archive
        path = tmp_path / 'w.pt'
        torch.save(state, path, _use_new_zipfile_serialization=False)
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
    read = {k: v.clone() for k, v in state.items()}
    monkeypatch.setattr(checkpoint, 'read_state_dict', lambda path: read)
    model = load_model(CFG, tmp_path / 'any.pt')
    params = dict(model.named_parameters())
    assert all(params[k].data_ptr() == read[k].data_ptr() for k in params)


# --- files that are not checkpoints: one line naming the file and what it is -------------

SMALL = {'w': torch.arange(4096, dtype=torch.float32).reshape(64, 64), 'b': torch.ones(64)}
LFS_OID = 'sha256:' + '4d7a' * 16
LFS_TEXT = ('version https://git-lfs.github.com/spec/v1\n'
            f'oid {LFS_OID}\nsize 4631302144\n')


def _half(data):
    return data[:len(data) // 2]


def _saved(tmp_path, **kwargs):
    path = tmp_path / 'real.pt'
    torch.save(SMALL, path, **kwargs)
    return path.read_bytes()


def _safetensors_bytes(tmp_path):
    path = tmp_path / 'real.safetensors'
    save_file(SMALL, str(path))
    return path.read_bytes()


def _zip_with_broken_pickle(tmp_path):
    """Rebuild a real checkpoint with its data.pkl cut in half and the zip directory intact."""
    src, out = tmp_path / 'src.pt', tmp_path / 'broken.zip'
    torch.save(SMALL, src)
    with zipfile.ZipFile(src) as archive, zipfile.ZipFile(out, 'w') as rebuilt:
        for name in archive.namelist():
            data = archive.read(name)
            rebuilt.writestr(name, _half(data) if name.endswith('data.pkl') else data)
    return out.read_bytes()


def _zip_without_pickle(tmp_path):
    out = tmp_path / 'other.zip'
    with zipfile.ZipFile(out, 'w') as archive:
        archive.writestr('readme.txt', 'just a zip')
    return out.read_bytes()


# name, file name, bytes (from tmp_path), text the message must hold ({size}: the file's)
NOT_CHECKPOINTS = [
    ('empty_pt', 'w.pt', lambda d: b'', ['an empty file (0 bytes)']),
    ('empty_safetensors', 'w.safetensors', lambda d: b'', ['an empty file (0 bytes)']),
    ('text', 'x.pt', lambda d: b'not a checkpoint\nsecond line\n',
     ['a text file of {size} bytes', 'not a checkpoint', "'not a checkpoint'"]),
    ('text_utf8', 'x.pth', lambda d: 'Gewichte: später\n'.encode() * 100,
     ['a text file of {size} bytes']),
    ('html', 'x.pt', lambda d: b'<!DOCTYPE html>\n<html><body>Not Found</body></html>\n',
     ['an HTML page of {size} bytes', 'web page']),
    ('lfs_pt', 'w.pt', lambda d: LFS_TEXT.encode(),
     ['Git LFS pointer', f'oid {LFS_OID}', 'size 4631302144 bytes', 'git lfs pull',
      'download the real file']),
    ('lfs_safetensors', 'w.safetensors', lambda d: LFS_TEXT.encode(),
     ['Git LFS pointer', f'oid {LFS_OID}', 'git lfs pull']),
    ('lfs_without_fields', 'w.pt',
     lambda d: b'version https://git-lfs.github.com/spec/v1\n', ['Git LFS pointer', 'git lfs']),
    ('truncated_zip', 'w.pt', lambda d: _half(_saved(d)),
     ['truncated or corrupt zip archive', 'of {size} bytes', 'zip directory, is missing']),
    ('zip_broken_pickle', 'w.pt', _zip_with_broken_pickle,
     ['not a readable PyTorch zip checkpoint']),
    ('zip_not_torch', 'w.pt', _zip_without_pickle, ['zip archive', 'without a data.pkl']),
    ('truncated_legacy', 'w.pt', lambda d: _half(_saved(d, _use_new_zipfile_serialization=False)),
     ['not a readable legacy (pickle) PyTorch checkpoint', 'EOF']),
    ('garbage_legacy', 'w.pt', lambda d: b'\x80\x02' + bytes(range(256)),
     ['legacy (pickle) PyTorch checkpoint', 'pickled data is broken']),
    ('unknown_binary', 'w.pth', lambda d: bytes(range(256)) * 4,
     ['an unknown binary format', 'first bytes 00 01 02 03', 'PyTorch cannot read']),
    ('safetensors_shorter_than_length', 'w.safetensors', lambda d: b'\x10\x00\x00',
     ['3 bytes is shorter than the 8-byte header length', 'truncated']),
    ('safetensors_cut_in_header', 'w.safetensors', lambda d: _safetensors_bytes(d)[:40],
     ['the header needs', 'the file has 40', 'truncated']),
    ('safetensors_cut_in_data', 'w.safetensors', lambda d: _half(_safetensors_bytes(d)),
     ['the tensors need 16640 bytes after the header', 'truncated']),
    ('safetensors_bad_json', 'w.safetensors',
     lambda d: struct.pack('<Q', 10) + b'{not json}' + bytes(32), ['header is not valid JSON']),
    ('safetensors_zero_header', 'w.safetensors', lambda d: bytes(16),
     ['the 0-byte header is not valid JSON']),
    ('safetensors_huge_length', 'w.safetensors', lambda d: b'\xff' * 8 + bytes(32),
     ['not a safetensors header', 'ff ff ff ff']),
]


def _one_line_error(path):
    with pytest.raises(CheckpointError) as info:
        read_state_dict(path)
    message = str(info.value)
    assert '\n' not in message and '\r' not in message, message
    assert message.startswith(f'checkpoint {path}: '), message
    return message


@pytest.mark.parametrize('name, filename, build, expected', NOT_CHECKPOINTS,
                         ids=[case[0] for case in NOT_CHECKPOINTS])
def test_files_that_are_not_checkpoints_say_what_they_are(tmp_path, name, filename, build,
                                                          expected):
    path = tmp_path / filename
    data = build(tmp_path)
    path.write_bytes(data)
    message = _one_line_error(path)
    for text in expected:
        assert text.replace('{size}', str(len(data))) in message, message


def test_node_path_also_gets_one_line(tmp_path):
    """load_model (what the engine calls) raises the same one-line error, not torch's."""
    path = tmp_path / 'x.pt'
    path.write_text('a model card, not the weights\n')
    with pytest.raises(CheckpointError, match='a text file of') as info:
        load_model(CFG, path)
    assert str(path) in str(info.value) and '\n' not in str(info.value)


TORCH_FAILURES = [
    RuntimeError('PytorchStreamReader failed reading zip archive:\nfailed finding central'),
    pickle.UnpicklingError("invalid load key, 'v'."),
    EOFError('Ran out of input'),
    IndexError('pop from empty list'),
    ValueError('bad value\nsecond line'),
    zipfile.BadZipFile('Bad CRC-32 for file archive/data/0'),
    OSError(5, 'Input/output error'),
    KeyError(101),
    AttributeError("Can't get attribute"),
]


@pytest.mark.parametrize('failure', TORCH_FAILURES, ids=lambda e: type(e).__name__)
def test_anything_torch_load_raises_becomes_one_line(tmp_path, monkeypatch, failure):
    path = tmp_path / 'w.pt'
    torch.save(SMALL, path)

    def fail(*args, **kwargs):
        raise failure

    monkeypatch.setattr(checkpoint.torch, 'load', fail)
    message = _one_line_error(path)
    assert 'not a readable PyTorch zip checkpoint' in message
    first = str(failure).splitlines()[0]
    assert first in message, message
    if not isinstance(failure, (OSError, pickle.UnpicklingError)):
        assert type(failure).__name__ in message


def test_weights_only_refusal_names_the_global(tmp_path):
    path = tmp_path / 'w.pt'
    NotATensor.built = False
    torch.save({'w': torch.ones(2), 'hook': NotATensor()}, path)
    message = _one_line_error(path)
    assert 'holds pickled code or objects, not a plain state dict' in message
    assert '_mark_built' in message
    assert not NotATensor.built


def test_small_real_files_still_load(tmp_path):
    for name, save in (('w.pt', lambda p: torch.save(SMALL, p)),
                       ('w.safetensors', lambda p: save_file(SMALL, str(p)))):
        path = tmp_path / name
        save(path)
        loaded = read_state_dict(path)
        assert set(loaded) == set(SMALL)
        assert all(torch.equal(loaded[k], SMALL[k]) for k in SMALL)
