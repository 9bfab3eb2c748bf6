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
Checkpoints by name, offline: a cache laid out as huggingface_hub lays it out.

The real ``hf_hub_download`` resolves every spec here; no test reaches the network
(``HF_HUB_OFFLINE=1``, or an endpoint on a closed local port).
"""

import hashlib
import os
from pathlib import Path
import time

from lingbot_ros.model.checkpoint import random_init
from lingbot_ros.model.config import ConfigError, ModelConfig
from lingbot_ros.model.hub import (HubError, HubSpec, HubSpecError, parse_hub_spec,
                                   resolve_checkpoint, sha256_file)
from lingbot_ros.streaming.config import EngineConfig
from lingbot_ros.streaming.engine import Engine, EngineError
from lingbot_ros.tools.replay import main as replay
import pytest
import torch

pytest.importorskip('huggingface_hub')
pytest.importorskip('safetensors')

OWNER, REPO = 'acme-robotics', 'lingbot-tiny'
FILE = 'weights/tiny.safetensors'
MAIN = hashlib.sha1(b'main commit').hexdigest()
OLD = hashlib.sha1(b'older commit').hexdigest()
SEED = 5  # not the engine's default seed 0: loaded weights cannot be mistaken for random ones


def _tiny_checkpoint(path, seed):
    from safetensors.torch import save_file
    state = {k: v.contiguous() for k, v in
             random_init(ModelConfig.preset('tiny'), seed=seed).state_dict().items()}
    save_file(state, str(path))
    return state


def _put(cache, commit, filename, data, branch=None):
    """Store a file the way huggingface_hub does: blob by hash, snapshot symlink, ref."""
    folder = cache / f'models--{OWNER}--{REPO}'
    blob = folder / 'blobs' / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    link = folder / 'snapshots' / commit / filename
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(blob, link.parent))
    if branch:
        (folder / 'refs').mkdir(exist_ok=True)
        (folder / 'refs' / branch).write_text(commit)
    return link


@pytest.fixture(scope='module')
def weights(tmp_path_factory):
    folder = tmp_path_factory.mktemp('weights')
    state = _tiny_checkpoint(folder / 'tiny.safetensors', SEED)
    _tiny_checkpoint(folder / 'older.safetensors', SEED + 1)
    return folder, state


@pytest.fixture
def cache(tmp_path, monkeypatch, weights):
    """Lay out an offline hub cache: FILE at main, an older version at branch 'v0'."""
    home = tmp_path / 'hf'
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    monkeypatch.setenv('HF_HOME', str(home))
    monkeypatch.setenv('HF_HUB_CACHE', str(home / 'hub'))
    monkeypatch.delenv('HUGGINGFACE_HUB_CACHE', raising=False)
    folder, _ = weights
    _put(home / 'hub', MAIN, FILE, (folder / 'tiny.safetensors').read_bytes(), 'main')
    _put(home / 'hub', OLD, FILE, (folder / 'older.safetensors').read_bytes(), 'v0')
    return home / 'hub'


def test_an_hf_spec_loads_the_cached_weights_into_the_engine(cache, weights):
    folder, state = weights
    spec = f'hf://{OWNER}/{REPO}/{FILE}'
    engine = Engine.load(EngineConfig(checkpoint=spec, preset='tiny', device='cpu'))
    ck = engine.checkpoint
    assert ck.spec == spec and ck.from_hub
    assert ck.path.name == 'tiny.safetensors' and ck.path.parent.parent.name == MAIN
    assert ck.path.resolve().parent.name == 'blobs'  # the real cache layout was read
    assert ck.sha256 == hashlib.sha256((folder / 'tiny.safetensors').read_bytes()).hexdigest()
    loaded = engine.model.state_dict()
    assert set(loaded) == set(state)
    for key, value in state.items():
        assert torch.equal(loaded[key], value), key
    assert engine.description == spec


def test_a_revision_selects_the_snapshot(cache, weights):
    folder, _ = weights
    older = hashlib.sha256((folder / 'older.safetensors').read_bytes()).hexdigest()
    by_branch = resolve_checkpoint(f'hf://{OWNER}/{REPO}@v0/{FILE}')
    by_commit = resolve_checkpoint(f'hf://{OWNER}/{REPO}@{OLD}/{FILE}')
    assert by_branch.sha256 == by_commit.sha256 == older
    assert by_commit.path.parent.parent.name == OLD
    assert resolve_checkpoint(f'hf://{OWNER}/{REPO}@main/{FILE}').sha256 != older


def test_offline_and_not_cached_is_one_line_naming_repo_file_and_cache(cache, capsys):
    spec = f'hf://{OWNER}/{REPO}/weights/missing.safetensors'
    with pytest.raises(HubError) as err:
        resolve_checkpoint(spec)
    text = str(err.value)
    assert len(text.splitlines()) == 1
    for part in (f'{OWNER}/{REPO}', 'weights/missing.safetensors', str(cache),
                 'not in the cache', 'HF_HUB_OFFLINE'):
        assert part in text, part
    with pytest.raises(EngineError, match='HF_HUB_OFFLINE'):
        Engine.load(EngineConfig(checkpoint=spec, preset='tiny', device='cpu'))
    # the command line says it in one line too, with no traceback
    rc = replay(['--checkpoint', spec, '--preset', 'tiny', '--device', 'cpu', '--quiet',
                 '--images', 'unused.npy'])
    out = capsys.readouterr().err.strip()
    assert rc == 2 and len(out.splitlines()) == 1 and 'missing.safetensors' in out
    assert 'Traceback' not in out


def test_an_unreachable_hub_is_one_line_naming_repo_file_and_cache(cache, monkeypatch):
    monkeypatch.delenv('HF_HUB_OFFLINE')
    import huggingface_hub.constants as constants
    monkeypatch.setattr(constants, 'HF_HUB_OFFLINE', False)
    monkeypatch.setenv('HF_ENDPOINT', 'http://127.0.0.1:9')  # discard port: refused at once
    # huggingface_hub retries a refused connection five times with a backoff (~23 s in
    # all): same outcome without the waits
    from huggingface_hub.utils import _http
    if hasattr(_http, 'time'):
        monkeypatch.setattr(_http.time, 'sleep', lambda seconds: None)
    spec = f'hf://{OWNER}/{REPO}/weights/missing.safetensors'
    start = time.monotonic()
    with pytest.raises(HubError) as err:
        resolve_checkpoint(spec)
    text = str(err.value)
    assert len(text.splitlines()) == 1 and time.monotonic() - start < 60
    for part in (f'{OWNER}/{REPO}', 'weights/missing.safetensors', str(cache),
                 'not in the cache', 'cannot be reached'):
        assert part in text, part
    # a cached file still resolves without the hub
    assert resolve_checkpoint(f'hf://{OWNER}/{REPO}/{FILE}').path.is_file()


def test_local_paths_pass_through_with_their_digest(weights, tmp_path):
    folder, _ = weights
    path = str(folder / 'tiny.safetensors')
    ck = resolve_checkpoint(path)
    assert ck.spec == path and ck.path == Path(path) and not ck.from_hub
    assert ck.sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    engine = Engine.load(EngineConfig(checkpoint=path, preset='tiny', device='cpu'))
    assert engine.checkpoint == ck and engine.description == path
    assert engine.checkpoint.sha256 == ck.sha256
    assert Engine.load(EngineConfig(preset='tiny', device='cpu')).checkpoint is None
    with pytest.raises(HubError, match='no such file'):
        resolve_checkpoint(str(tmp_path / 'absent.pt'))


def test_the_digest_is_computed_on_its_own_thread_and_says_why_it_failed(tmp_path):
    from lingbot_ros.model.hub import Digest, HubError
    path = tmp_path / 'w.safetensors'
    path.write_bytes(b'abc' * 1000)
    digest = Digest(path)
    assert digest.wait(10) == hashlib.sha256(b'abc' * 1000).hexdigest() == digest.peek()
    assert digest.error is None
    broken = Digest(tmp_path)  # a folder: reading it fails
    with pytest.raises(HubError, match='cannot read'):
        broken.wait(10)
    assert broken.peek() is None and 'cannot read' in broken.error


def test_sha256_streams_large_files_in_chunks(tmp_path):
    data = os.urandom(3 * (1 << 20) + 17)  # more than one chunk, not a multiple of it
    path = tmp_path / 'blob.bin'
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()


def test_spec_parts():
    assert parse_hub_spec('hf://o/r/a/b.pt') == HubSpec('o', 'r', 'a/b.pt')
    assert parse_hub_spec('hf://o.x/r-1@v1.2/m.safetensors') == \
        HubSpec('o.x', 'r-1', 'm.safetensors', 'v1.2')
    assert parse_hub_spec('hf://o/r/a@b.pt').filename == 'a@b.pt'


@pytest.mark.parametrize('spec', [
    'hf://', 'hf://owner', 'hf://owner/repo', 'hf://owner/repo/', 'hf://owner/repo@/f.pt',
    'hf:///repo/f.pt', 'hf://own er/repo/f.pt', 'hf://owner/repo/a//b.pt',
    'hf://owner/repo/../x.pt', 'hf://-owner/repo/f.pt', 'hf://owner/repo@a b/f.pt'])
def test_malformed_specs_name_the_value_and_the_form(spec):
    with pytest.raises(HubSpecError) as err:
        parse_hub_spec(spec)
    assert repr(spec) in str(err.value) and 'hf://<owner>/<repo>[@<revision>]/' in str(err.value)
    with pytest.raises(ConfigError) as err:
        EngineConfig(checkpoint=spec).validate()
    text = str(err.value)
    assert text.startswith(f'checkpoint={spec!r} is invalid') and 'a file path' in text
    assert 'hf://<owner>/<repo>[@<revision>]/' in text


def test_the_node_names_the_resolved_file_and_its_digest_in_log_and_diagnostics(
        cache, weights, tmp_path):
    import signal
    import subprocess
    from conftest import dds_domain, dds_env, node_executable
    from diagnostic_msgs.msg import DiagnosticArray
    from lingbot_ros.ros.probe import Probe, status_of
    domain = dds_domain(58)
    digest = hashlib.sha256((weights[0] / 'tiny.safetensors').read_bytes()).hexdigest()
    env = dds_env(domain, HF_HUB_OFFLINE='1', HF_HOME=os.environ['HF_HOME'],
                  HF_HUB_CACHE=os.environ['HF_HUB_CACHE'])
    log = open(tmp_path / 'node.log', 'w+')
    proc = subprocess.Popen([str(node_executable()), '--ros-args', '-r', '__node:=lingbot_hub',
                             '-p', f'checkpoint:=hf://{OWNER}/{REPO}/{FILE}',
                             '-p', 'preset:=tiny', '-p', 'diagnostics_period:=0.2'],
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('hub_probe', domain_id=domain)
    try:
        diags = probe.collect(DiagnosticArray, '/diagnostics')

        def node_status():
            for d in reversed(diags):
                s = status_of(d, '/lingbot_hub: node')
                # the digest is hashed on its own thread: 'computing' until it is known
                if s is not None and s[2]['state'] == 'active' \
                        and s[2]['checkpoint_sha256'] != 'computing':
                    return s
            return None
        assert probe.spin_until(lambda: node_status() is not None, 120), _text(log)
        _, _, values = node_status()
        assert values['checkpoint_sha256'] == digest and values['random_weights'] == 'False'
        assert values['checkpoint_file'].endswith(FILE) and MAIN in values['checkpoint_file']
        assert f'(sha256 {digest})' in _text(log) or f'checkpoint sha256 {digest}' in _text(log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
        probe.close()


def _text(log):
    log.flush()
    log.seek(0)
    return log.read()
