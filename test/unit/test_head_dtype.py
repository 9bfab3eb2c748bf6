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

"""``head_dtype``: float32 heads by default; 'compute' and 'float16' run them under autocast."""

from lingbot_ros.model.checkpoint import load_model, matmul_parameters
from lingbot_ros.model.config import ConfigError, ModelConfig
from lingbot_ros.model.layers import FLOAT32_ATTR, float32_output
from lingbot_ros.streaming.config import EngineConfig, HeadDtype, StreamConfig
from lingbot_ros.streaming.engine import Engine
import numpy as np
import pytest
import torch

TINY = ModelConfig.preset('tiny')
CALL = {'time_index': 0, 'first_frame': True, 'scale_frames': True, 'global_cache': None,
        'camera_cache': None}
STREAM = StreamConfig(scale_frames=2, sliding_window=3, image_size=84, max_window_frames=6)


def _images(seed: int = 2) -> torch.Tensor:
    return torch.rand(3, 3, 56, 84, generator=torch.Generator().manual_seed(seed))


def _frames(n: int = 9) -> list:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(n)]


def _run(engine: Engine):
    """Stream the frames through one session (a window re-seed included)."""
    session = engine.new_session('cam', STREAM)
    out = [r for i, f in enumerate(_frames()) for r in session.step(f, i + 1)]
    assert session.window_index >= 1
    return session, np.stack([r.pose_c2w for r in out]), np.stack([r.depth for r in out])


def _head_params(model) -> dict:
    return {n: p for n, p in model.named_parameters() if not n.startswith('aggregator.')}


# --- the configuration ----------------------------------------------------------------


def test_float32_by_default_and_read_from_strings():
    assert EngineConfig().validate().head_dtype is HeadDtype.FLOAT32
    cfg = EngineConfig.from_dict({'head_dtype': 'compute'})
    assert cfg.head_dtype is HeadDtype.COMPUTE
    assert cfg.replace(head_dtype='float32').head_dtype is HeadDtype.FLOAT32
    assert cfg.replace(head_dtype='float16').head_dtype is HeadDtype.FLOAT16


@pytest.mark.parametrize('value', ['bfloat16', 'COMPUTE', '', 1, None])
def test_invalid_values_name_the_field_the_value_and_the_choices(value):
    with pytest.raises(ConfigError) as info:
        EngineConfig(head_dtype=value).validate()
    text = str(info.value)
    assert text.startswith(f'head_dtype={value!r} is invalid')
    assert "['float32', 'compute', 'float16']" in text


# --- the model ------------------------------------------------------------------------


@pytest.mark.parametrize('low', [torch.bfloat16, torch.float16])
def test_low_heads_run_channels_last_with_float32_outputs(low):
    model = load_model(TINY, None, seed=5, autocast_dtype=torch.bfloat16, head_autocast=low)
    assert model.head_autocast_dtype == low
    matmul = matmul_parameters(model)
    kept = {n for n, m in model.named_modules() if getattr(m, FLOAT32_ATTR, False)}
    assert kept == {'camera_head.pose_branch.fc2', 'depth_head.scratch.output_conv2.2'}
    for name, p in _head_params(model).items():
        want = low if name in matmul else torch.float32
        assert p.dtype == want, name   # norms, tokens and the two last layers: float32
        if p.dim() == 4:
            assert p.is_contiguous(memory_format=torch.channels_last), name
    seen = {}

    def last(x: torch.Tensor) -> bool:
        return x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)

    def keep(name):
        def hook(module, args, output):
            seen[name] = (args[0].dtype, output.dtype, last(args[0]), last(output))
        return hook
    sc = model.depth_head.scratch
    sc.refinenet1.resConfUnit2.conv1.register_forward_hook(keep('conv'))
    model.depth_head.projects[0].register_forward_hook(keep('project'))
    model.camera_head.trunk[0].attn.qkv.register_forward_hook(keep('qkv'))
    model.camera_head.trunk_norm.register_forward_hook(keep('norm'))
    with torch.no_grad():
        out = model(_images(), **CALL)
    assert seen['conv'] == (low, low, True, True)
    assert seen['project'] == (torch.float32, low, True, True)  # tokens as laid out
    assert seen['qkv'][1] == low
    assert seen['norm'][:2] == (torch.float32, torch.float32)  # the residual stream: float32
    for name in ('pose_enc', 'pose_enc_iters', 'depth', 'depth_conf'):
        assert getattr(out, name).dtype == torch.float32, name


@pytest.mark.skipif(not torch.cuda.is_available(), reason='CUDA autocast only')
@pytest.mark.parametrize('low', [torch.bfloat16, torch.float16])
def test_depth_head_resizes_in_the_heads_dtype_on_cuda(low):
    """CUDA autocast would resize in float32 (CPU autocast does not); the head keeps ``low``."""
    model = load_model(TINY, None, seed=5, device=torch.device('cuda'),
                       autocast_dtype=torch.bfloat16, head_autocast=low)
    sc = model.depth_head.scratch
    seen = {}

    def keep(name):
        def hook(module, args, output):
            seen[name] = args[0].dtype
        return hook
    sc.refinenet1.out_conv.register_forward_hook(keep('refined'))
    sc.output_conv2[0].register_forward_hook(keep('full'))
    with torch.no_grad():
        out = model(_images().cuda(), **CALL)
    assert seen == {'refined': low, 'full': low}
    assert out.depth.dtype == torch.float32 and torch.isfinite(out.depth).all()


def test_compute_heads_stay_near_float32():
    """
    bf16 heads (tiny model, CPU autocast) against the same model in float32.

    Measured: depth relative error median 0.74 %, p99 3.1 %; pose codes within 0.0035
    (as with float32 heads: the camera head adds nothing visible). Bounds are about three
    times that; a layer left in the wrong layout or a lost activation is off by far more.
    """
    with torch.no_grad():
        ref = load_model(TINY, None, seed=5)(_images(), **CALL)
        float_heads = load_model(TINY, None, seed=5, autocast_dtype=torch.bfloat16)(
            _images(), **CALL)
        low = load_model(TINY, None, seed=5, autocast_dtype=torch.bfloat16,
                         head_autocast=torch.bfloat16)(_images(), **CALL)
    rel = ((low.depth - ref.depth).abs() / ref.depth.abs()).flatten()
    assert rel.median() < 0.025 and rel.quantile(0.99) < 0.1
    assert (low.pose_enc - ref.pose_enc).abs().max() < 0.012
    assert torch.isfinite(low.depth_conf).all() and (low.depth_conf > 1).all()
    # the heads really ran in bf16: the same aggregator with float32 heads differs
    assert ((low.depth - float_heads.depth).abs() / float_heads.depth).median() > 1e-4


def test_float16_heads_add_a_fraction_of_what_bf16_heads_add():
    """
    Each against the same bf16 aggregator with float32 heads: what the heads' rounding adds.

    float16 keeps 3 more mantissa bits than bf16, so its rounding is about 8 times smaller.
    Measured (tiny model, CPU autocast): depth median 8.2e-4 against 7.4e-3, pose codes
    within 2.6e-4 against 2.8e-3. The test asks for a factor 3 in both.
    """
    def heads(low):
        model = load_model(TINY, None, seed=5, autocast_dtype=torch.bfloat16, head_autocast=low)
        with torch.no_grad():
            return model(_images(), **CALL)
    base, bf16, fp16 = heads(None), heads(torch.bfloat16), heads(torch.float16)

    def depth(out):
        return ((out.depth - base.depth).abs() / base.depth.abs()).median().item()

    def pose(out):
        return (out.pose_enc - base.pose_enc).abs().max().item()
    assert 0 < depth(fp16) < depth(bf16) / 3
    assert 0 < pose(fp16) < pose(bf16) / 3
    assert torch.isfinite(fp16.depth).all() and torch.isfinite(fp16.pose_enc).all()


def test_heads_go_back_to_float32():
    model = load_model(TINY, None, seed=5, autocast_dtype=torch.bfloat16,
                       head_autocast=torch.bfloat16)
    model.set_autocast_dtype(torch.bfloat16)
    assert model.head_autocast_dtype is None and model.camera_head.autocast_dtype is None
    for name, p in _head_params(model).items():
        assert p.dtype == torch.float32 and p.is_contiguous(), name
    with torch.no_grad():
        out = model(_images(), **CALL)
    assert out.depth.dtype == torch.float32 and torch.isfinite(out.pose_enc).all()


def test_float32_output_takes_linear_and_pointwise_convolutions_only():
    with pytest.raises(TypeError, match='1x1 Conv2d'):
        float32_output(torch.nn.Conv2d(4, 2, 3, padding=1), torch.rand(1, 4, 5, 5))
    conv = torch.nn.Conv2d(4, 2, 1)
    x = torch.rand(2, 4, 5, 7).to(torch.bfloat16)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = float32_output(conv, x)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, conv(x.float()), rtol=1e-6, atol=1e-6)


# --- the engine -----------------------------------------------------------------------


def test_float32_engine_is_unchanged_by_compute_heads():
    base = Engine.load(EngineConfig(preset='tiny', device='cpu'))
    other = Engine.load(EngineConfig(preset='tiny', device='cpu', head_dtype='compute'))
    assert other.model.head_autocast_dtype is None
    assert {p.dtype for p in other.model.parameters()} == {torch.float32}
    assert all(p.is_contiguous() for p in other.model.parameters())
    s0, p0, d0 = _run(base)
    s1, p1, d1 = _run(other)
    assert s1._windows.current.camera.pool.dtype == torch.float32
    np.testing.assert_array_equal(p1, p0)
    np.testing.assert_array_equal(d1, d0)


def test_bf16_engine_keeps_float32_heads_by_default():
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16'))
    assert engine.model.head_autocast_dtype is None
    assert {p.dtype for p in _head_params(engine.model).values()} == {torch.float32}
    session, pose, _ = _run(engine)
    assert session._windows.current.camera.pool.dtype == torch.float32
    assert np.all(np.isfinite(pose))


def test_bf16_engine_with_compute_heads_streams_near_float32():
    ref = Engine.load(EngineConfig(preset='tiny', device='cpu'))
    low = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16',
                                   head_dtype='compute'))
    assert low.camera_kv_dtype == torch.bfloat16
    _, ref_pose, ref_depth = _run(ref)
    session, pose, depth = _run(low)
    assert session._windows.current.camera.pool.dtype == torch.bfloat16  # attention in bf16 too
    assert depth.dtype == np.float32
    ok = np.isfinite(ref_depth)   # NaN where the model grid does not reach the input
    rel = np.abs(depth[ok] - ref_depth[ok]) / np.abs(ref_depth[ok])
    assert np.median(rel) < 0.025
    assert np.abs(pose - ref_pose).max() < 0.05


def test_bf16_engine_with_float16_heads():
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16',
                                      head_dtype='float16'))
    assert engine.model.head_autocast_dtype == torch.float16
    assert engine.camera_kv_dtype == torch.float16
    assert engine.model.autocast_dtype == torch.bfloat16   # the aggregator: as before
    session, pose, depth = _run(engine)
    assert session._windows.current.camera.pool.dtype == torch.float16
    assert np.all(np.isfinite(pose)) and depth.dtype == np.float32


def test_float32_engine_ignores_float16_heads():
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', head_dtype='float16'))
    assert engine.model.head_autocast_dtype is None
    assert {p.dtype for p in engine.model.parameters()} == {torch.float32}


def test_weights_dtype_does_not_change_compute_heads():
    a = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16',
                                 head_dtype='compute'))
    b = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16',
                                 head_dtype='compute', weights_dtype='compute'))
    pa, pb = _head_params(a.model), _head_params(b.model)
    assert {n: p.dtype for n, p in pa.items()} == {n: p.dtype for n, p in pb.items()}
    assert all(torch.equal(pa[n], pb[n]) for n in pa)
