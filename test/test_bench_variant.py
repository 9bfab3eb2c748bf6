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

"""benchmarks/bench_variant.py: each undone cut computes what the model computes with it."""

from pathlib import Path
import sys

from lingbot_ros.cache.dense import DenseStreamCache
from lingbot_ros.model import camera_head, compiled, layers
from lingbot_ros.model.checkpoint import load_model
from lingbot_ros.model.config import ModelConfig
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'benchmarks'))
import bench_variant  # noqa: E402,I100


@pytest.fixture
def restored(monkeypatch):
    """Let undo() patch the modules; put them back after the test."""
    monkeypatch.setattr(compiled, 'compile_blocks', compiled.compile_blocks)
    monkeypatch.setattr(layers, 'gelu_linear', layers.gelu_linear)
    monkeypatch.setattr(camera_head, 'gelu_linear', camera_head.gelu_linear)


def _poses(model, frames):
    agg, cam = DenseStreamCache(6, 2, 3), DenseStreamCache(1, 0, 1)
    poses = []
    with torch.no_grad():
        for i, n in ((0, 2), (2, 1), (3, 1)):
            agg.begin(n)
            cam.begin(n)
            out = model(frames[i:i + n], time_index=agg.frames, first_frame=i == 0,
                        scale_frames=i == 0, global_cache=agg, camera_cache=cam)
            poses.append(out.pose_enc.clone())
            agg.commit()
            cam.commit()
    return poses


def test_pieces_route_the_aggregator_through_the_block_pieces_with_equal_numbers(restored):
    cfg = ModelConfig.preset('tiny')
    frames = torch.rand(4, 3, 56, 84, generator=torch.Generator().manual_seed(2))
    plain = _poses(load_model(cfg, None, seed=5), frames)
    bench_variant.undo(bench_variant.Variant.PIECES)
    model = load_model(cfg, None, seed=5)
    compiled.compile_blocks(model, backend='eager')
    assert model.aggregator.step is bench_variant.piecewise_step
    for a, b in zip(plain, _poses(model, frames)):
        assert torch.equal(a, b)


def test_exact_gelu_replaces_the_fused_call_everywhere_it_is_used(restored):
    bench_variant.undo(bench_variant.Variant.EXACT_GELU)
    assert layers.gelu_linear is camera_head.gelu_linear is bench_variant.exact_gelu
    fc = torch.nn.Linear(8, 16)
    x = torch.randn(3, 8)
    assert torch.equal(layers.gelu_linear(fc, x), torch.nn.functional.gelu(fc(x)))


def test_an_unknown_variant_is_refused_with_the_list(capsys):
    assert bench_variant.main(['fast']) == 2
    assert 'exact_gelu,pieces' in capsys.readouterr().err
