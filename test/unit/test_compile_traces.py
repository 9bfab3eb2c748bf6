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
Dynamo's traces of the compiled pieces outlive the process: a restart loads, not traces.

Each run is a fresh Python process, as a restart is. The piece compiled here is a pure view,
so inductor emits no kernel and needs no C compiler.
"""

import json
import os
from pathlib import Path
import subprocess
import sys

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not hasattr(torch._dynamo.config, 'caching_precompile'),
                                reason='this torch has no dynamo caching precompile')

CHILD = """
import json
import torch
from lingbot_ros.model import compiled
kept = compiled.keep_traces()
from torch._dynamo.utils import counters

def piece(x):
    return x.reshape(2, 3).transpose(0, 1)

out = compiled._compile(piece, None)(torch.arange(6.0))
print(json.dumps({'kept': kept, 'traced': counters['stats'].get('unique_graphs', 0),
                  'saved': compiled.save_traces(), 'out': out.tolist()}))
"""


def _child(cache_home: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != 'TORCHINDUCTOR_CACHE_DIR'}
    env.update(XDG_CACHE_HOME=str(cache_home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, '-c', CHILD], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_process_loads_the_traces_instead_of_tracing(tmp_path):
    first = _child(tmp_path)
    assert first['kept'] and first['traced'] == 1 and first['saved'] == 1
    store = tmp_path / 'lingbot_ros' / 'torchinductor' / 'dynamo'
    assert any(store.iterdir())
    second = _child(tmp_path)
    assert second['kept'] and second['traced'] == 0 and second['saved'] == 0
    assert second['out'] == first['out'] == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
