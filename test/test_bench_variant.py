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

"""benchmarks/bench_variant.py: the undone cut computes what the model computes with it."""

from pathlib import Path
import sys

from lingbot_ros.model import camera_head, layers
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'benchmarks'))
import bench_variant  # noqa: E402,I100


@pytest.fixture
def restored(monkeypatch):
    """Let undo() patch the modules; put them back after the test."""
    monkeypatch.setattr(layers, 'gelu_linear', layers.gelu_linear)
    monkeypatch.setattr(camera_head, 'gelu_linear', camera_head.gelu_linear)


def test_exact_gelu_replaces_the_fused_call_everywhere_it_is_used(restored):
    bench_variant.undo(bench_variant.Variant.EXACT_GELU)
    assert layers.gelu_linear is camera_head.gelu_linear is bench_variant.exact_gelu
    fc = torch.nn.Linear(8, 16)
    x = torch.randn(3, 8)
    assert torch.equal(layers.gelu_linear(fc, x), torch.nn.functional.gelu(fc(x)))


def test_an_unknown_variant_is_refused_with_the_list(capsys):
    assert bench_variant.main(['fast']) == 2
    assert '{exact_gelu}' in capsys.readouterr().err
