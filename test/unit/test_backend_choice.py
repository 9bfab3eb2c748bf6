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

"""Which attention backend a cache gets, and why (no GPU needed to decide)."""

import sys
import types

from lingbot_ros.cache.backend_choice import USER_BACKENDS
from lingbot_ros.cache.backends import (AttentionBackend, FLASHINFER_HEAD_DIMS,
                                        flashinfer_kernel_dir, flashinfer_kernels_built,
                                        resolve_backend)
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.config import BACKENDS, EngineConfig
import pytest
import torch


def _fake_flashinfer(monkeypatch, jit_dir, aot_dir):
    """Stand in for ``flashinfer.jit.env``: only the two folders are read from it."""
    env = types.SimpleNamespace(FLASHINFER_JIT_DIR=jit_dir, FLASHINFER_AOT_DIR=aot_dir)
    jit = types.ModuleType('flashinfer.jit')
    jit.env = env
    monkeypatch.setitem(sys.modules, 'flashinfer', types.ModuleType('flashinfer'))
    monkeypatch.setitem(sys.modules, 'flashinfer.jit', jit)
    monkeypatch.setitem(sys.modules, 'flashinfer.jit.env', env)


def _library(folder, name):
    (folder / name).mkdir(parents=True)
    (folder / name / f'{name}.so').write_bytes(b'')


def test_kernels_count_where_flashinfer_builds_them_and_where_it_loads_them_unbuilt(
        monkeypatch, tmp_path):
    jit, aot = tmp_path / 'cached_ops', tmp_path / 'aot'
    _fake_flashinfer(monkeypatch, jit, aot)
    assert flashinfer_kernels_built() == 0 and flashinfer_kernel_dir() == jit
    _library(jit, 'batch_prefill_a')
    _library(jit, 'norm')  # not an attention kernel
    assert flashinfer_kernels_built() == 1
    _library(aot, 'batch_prefill_b')  # carried or packaged: loaded without a build
    assert flashinfer_kernels_built() == 2


def test_no_flashinfer_means_no_kernels_and_no_folder(monkeypatch):
    monkeypatch.setitem(sys.modules, 'flashinfer', None)  # import fails
    assert flashinfer_kernels_built() == 0 and flashinfer_kernel_dir() is None


CUDA = torch.device('cuda')  # only its type is read: no device is touched


def test_auto_on_cpu_is_sdpa():
    assert resolve_backend('auto', torch.device('cpu'), dtype=torch.bfloat16)[0] == 'sdpa'


def test_auto_keeps_full_precision_caches_on_sdpa():
    backend, reason = resolve_backend('auto', CUDA, dtype=torch.float32, head_dim=64)
    assert backend == 'sdpa' and 'half precision' in reason


@pytest.mark.parametrize('head_dim', [16, 32, 96])
def test_auto_keeps_unsupported_head_sizes_on_sdpa(head_dim):
    assert head_dim not in FLASHINFER_HEAD_DIMS
    backend, reason = resolve_backend('auto', CUDA, dtype=torch.bfloat16, head_dim=head_dim)
    assert backend == 'sdpa' and f'head_dim {head_dim}' in reason


def test_explicit_flashinfer_refuses_what_it_cannot_run():
    with pytest.raises(ValueError, match='head_dim=16'):
        resolve_backend('flashinfer', CUDA, dtype=torch.bfloat16, head_dim=16)
    with pytest.raises(ValueError, match='float16 or bfloat16'):
        resolve_backend('flashinfer', CUDA, dtype=torch.float32, head_dim=64)
    with pytest.raises(ValueError, match='needs CUDA'):
        resolve_backend('flashinfer', torch.device('cpu'), dtype=torch.bfloat16, head_dim=64)


@pytest.mark.parametrize('name', ['auto', 'sdpa', 'flashinfer'])
def test_config_takes_backend_names_as_members(name):
    cfg = EngineConfig(attention_backend=name).validate()
    assert cfg.attention_backend is AttentionBackend(name)
    assert cfg.attention_backend.value == name


@pytest.mark.parametrize('name', ['paged_sdpa', AttentionBackend.PAGED_SDPA, 'flash', 3, None])
def test_config_refuses_other_backends_naming_the_parameter(name):
    with pytest.raises(ConfigError) as err:
        EngineConfig(attention_backend=name).validate()
    text = str(err.value)
    assert text.startswith(f'attention_backend={getattr(name, "value", name)!r} is invalid')
    assert "['auto', 'sdpa', 'flashinfer']" in text


@pytest.mark.parametrize('requested', ['sdpa', 'paged_sdpa', AttentionBackend.SDPA,
                                       AttentionBackend.PAGED_SDPA])
def test_resolve_backend_returns_members(requested):
    backend, reason = resolve_backend(requested, torch.device('cpu'))
    assert backend is AttentionBackend(requested) and reason == 'requested'
    assert resolve_backend('auto', torch.device('cpu'))[0] is AttentionBackend.SDPA
    assert resolve_backend(AttentionBackend.AUTO, CUDA, dtype=torch.float32)[0] \
        is AttentionBackend.SDPA


def test_user_choices_come_from_the_enum():
    assert BACKENDS == ('auto', 'sdpa', 'flashinfer')
    assert USER_BACKENDS == tuple(AttentionBackend(name) for name in BACKENDS)
