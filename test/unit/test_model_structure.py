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

"""The module tree matches the released checkpoints key for key; the forward contract holds."""

import json
from pathlib import Path

from lingbot_ros.model.checkpoint import load_model
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.network import LingBotMap
import pytest
from safetensors import safe_open
import torch

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / 'test' / 'data' / 'state_dict_manifest.json'
PARITY = ROOT / 'test' / 'data' / 'parity' / 'basic'


def _meta_model(cfg: ModelConfig) -> LingBotMap:
    with torch.device('meta'):
        return LingBotMap(cfg)


def test_release_state_dict_equals_manifest():
    manifest = json.loads(MANIFEST.read_text())
    expected = {k: list(v) for k, v in manifest['keys'].items()}
    state = _meta_model(ModelConfig.preset('release')).state_dict()
    actual = {k: list(v.shape) for k, v in state.items()}
    assert sorted(set(expected) - set(actual)) == []
    assert sorted(set(actual) - set(expected)) == []
    wrong = {k: (actual[k], expected[k]) for k in expected if actual[k] != expected[k]}
    assert wrong == {}
    assert sum(v.numel() for v in state.values()) == manifest['num_params']
    assert all(v.dtype == torch.float32 for v in state.values())


def test_fixture_structure_equals_fixture_weights():
    cfg = ModelConfig.load(PARITY / 'config.json')
    with safe_open(str(PARITY / 'weights.safetensors'), framework='pt') as f:
        expected = {k: list(f.get_slice(k).get_shape()) for k in f.keys()}
    actual = {k: list(v.shape) for k, v in _meta_model(cfg).state_dict().items()}
    assert actual == expected


@pytest.fixture(scope='module')
def tiny():
    return load_model(ModelConfig.preset('tiny'), None, seed=7)


def _call(model, images, **kw):
    args = {'time_index': 0, 'first_frame': True, 'scale_frames': True, 'global_cache': None,
            'camera_cache': None}
    args.update(kw)
    with torch.no_grad():
        return model(images, **args)


def test_forward_shapes(tiny):
    images = torch.rand(2, 3, 28, 56, generator=torch.Generator().manual_seed(0))
    out = _call(tiny, images)
    iters = tiny.cfg.camera_head.iterations
    assert out.pose_enc.shape == (2, 9)
    assert out.pose_enc_iters.shape == (2, iters, 9)
    torch.testing.assert_close(out.pose_enc_iters[:, -1], out.pose_enc)
    assert out.depth.shape == (2, 28, 56, 1)
    assert out.depth_conf.shape == (2, 28, 56)
    assert out.camera_tokens.shape == (2, 4, tiny.cfg.head_width)
    assert (out.depth > 0).all() and (out.depth_conf > 1).all()
    assert (out.pose_enc[:, 7:] > 0).all(), 'random weights must keep the field of view positive'
    no_depth = _call(tiny, images, with_depth=False)
    assert no_depth.depth is None and no_depth.depth_conf is None
    torch.testing.assert_close(no_depth.pose_enc, out.pose_enc)


@pytest.mark.parametrize('shape', [(1, 3, 28, 50), (1, 3, 27, 56), (3, 28, 56), (1, 4, 28, 56)])
def test_bad_image_shapes_are_refused(tiny, shape):
    with pytest.raises(ValueError, match='must be|invalid'):
        _call(tiny, torch.rand(shape))


def test_token_rows_follow_the_flags(tiny):
    images = torch.rand(1, 3, 28, 28, generator=torch.Generator().manual_seed(1))
    base = _call(tiny, images).camera_tokens
    for flags in ({'first_frame': False}, {'scale_frames': False}):
        other = _call(tiny, images, **flags).camera_tokens
        assert (other - base).abs().max() > 1e-3


def test_bf16_autocast_runs_heads_in_fp32():
    model = load_model(ModelConfig.preset('tiny'), None, seed=7)
    images = torch.rand(2, 3, 28, 42, generator=torch.Generator().manual_seed(2))
    ref = _call(model, images)
    model.set_autocast_dtype(torch.bfloat16)
    assert model.aggregator.frame_blocks[0].attn.qkv.weight.dtype == torch.bfloat16
    assert model.aggregator.frame_blocks[0].norm1.weight.dtype == torch.float32
    assert model.camera_head.trunk_norm.weight.dtype == torch.float32
    low = _call(model, images)
    assert low.pose_enc.dtype == low.depth.dtype == torch.float32
    assert (low.pose_enc - ref.pose_enc).abs().max() < 0.1
    assert (low.pose_enc - ref.pose_enc).abs().max() > 0  # it really ran in bf16
    with pytest.raises(ValueError):
        model.set_autocast_dtype(torch.float64)


def test_bf16_storage_computes_as_float32_weights_under_autocast():
    """
    Plain autocast over float32 weights, bit for bit.

    Only the linear and convolution weights are stored in bf16 (autocast rounds them so at
    every call anyway); the norms, layer scales, tokens and position tables stay float32,
    so the residual stream stays float32. With every aggregator parameter in bf16 (the
    reference demo's cast, ours before 2026-12-05) the depth differed by 1e-2 here.
    """
    cfg = ModelConfig.preset('tiny')
    images = torch.rand(3, 3, 56, 70, generator=torch.Generator().manual_seed(0))
    recipe = load_model(cfg, None, seed=3)
    recipe.autocast_dtype = torch.bfloat16  # autocast on, weights left float32
    ours = load_model(cfg, None, seed=3, autocast_dtype=torch.bfloat16)
    a, b = _call(recipe, images), _call(ours, images)
    for name in ('pose_enc', 'depth', 'depth_conf', 'camera_tokens'):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
