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
The blocks' compiled pieces: each traces as one graph and computes what the plain one does.

On the CPU dynamo's 'eager' backend traces the pieces whole (``fullgraph``: any graph
break fails) and runs the traced code, which must give the plain model's numbers bit for
bit (the same aten calls in the same order). Inductor on the GPU fuses them, so there the
numbers agree within rounding; that test is skipped without CUDA.
"""

from lingbot_ros.model.checkpoint import load_model
from lingbot_ros.model.compiled import compile_blocks, compile_depth_decoder
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.layers import Block
from lingbot_ros.streaming.config import ConfigError, EngineConfig
from lingbot_ros.streaming.engine import Engine
import numpy as np
from oracles.dense_cache import DenseStreamCache
import pytest
import torch


def _stream(model, frames):
    agg, cam = DenseStreamCache(6, 2, 3), DenseStreamCache(1, 0, 1)
    outs = []
    with torch.no_grad():
        for i, n in ((0, 2), (2, 1), (3, 1), (4, 1)):
            agg.begin(n)
            cam.begin(n)
            out = model(frames[i:i + n], time_index=agg.frames, first_frame=i == 0,
                        scale_frames=i == 0, global_cache=agg, camera_cache=cam)
            outs.append((out.pose_enc.clone(), out.depth.clone()))
            agg.commit()
            cam.commit()
    return outs


def test_every_block_gets_the_compiled_pair_and_traced_pieces_equal_the_plain_ones():
    cfg = ModelConfig.preset('tiny')
    frames = torch.rand(5, 3, 56, 84, generator=torch.Generator().manual_seed(1))
    plain = _stream(load_model(cfg, None, seed=3), frames)
    model = load_model(cfg, None, seed=3)
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    assert compile_blocks(model, backend='eager') == len(blocks) > 0
    assert len({id(b.pieces) for b in blocks}) == 1
    assert compile_depth_decoder(model, backend='eager') == 1
    assert model.depth_head.decoder is not None
    traced = _stream(model, frames)
    for (pp, dp), (pt, dt) in zip(plain, traced):
        assert torch.equal(pp, pt) and torch.equal(dp, dt)


def test_the_engine_option_is_a_validated_bool_and_says_why_it_is_off_on_the_cpu():
    with pytest.raises(ConfigError, match='torch_compile'):
        EngineConfig(torch_compile='yes').validate()
    engine = Engine.load(EngineConfig(device='cpu', torch_compile=True))
    assert engine.compiled_blocks == 0
    assert engine.compile_status.startswith('off: needs CUDA'), engine.compile_status
    assert all(b.pieces is None for b in engine.model.modules() if isinstance(b, Block))
    assert Engine.load(EngineConfig(device='cpu')).compile_status == 'off'


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device')
@pytest.mark.parametrize('dtype', [None, torch.bfloat16])
def test_inductor_pieces_agree_with_the_plain_model_on_the_gpu(dtype):
    cfg = ModelConfig.preset('tiny')
    frames = torch.rand(5, 3, 56, 84, device='cuda')
    plain = _stream(load_model(cfg, None, device='cuda', seed=3, autocast_dtype=dtype), frames)
    model = load_model(cfg, None, device='cuda', seed=3, autocast_dtype=dtype)
    compile_blocks(model)
    compile_depth_decoder(model)
    fused = _stream(model, frames)
    # Fused norms sum in another order, which the depth head magnifies: float32 is held to
    # 1e-4 on poses and 1e-2 on depth near 1, bf16 to its own rounding.
    pose_tol, depth_tol = ({'atol': 1e-4, 'rtol': 1e-3}, {'atol': 1e-2, 'rtol': 1e-2}) \
        if dtype is None else ({'atol': 5e-2, 'rtol': 5e-2},) * 2
    for (pp, dp), (pf, df) in zip(plain, fused):
        torch.testing.assert_close(pf, pp, **pose_tol)
        torch.testing.assert_close(df, dp, **depth_tol)


def test_warm_up_runs_a_throwaway_stream_and_leaves_the_cameras_untouched():
    from lingbot_ros.streaming.config import StreamConfig
    engine = Engine.load(EngineConfig(device='cpu'))
    cfg = StreamConfig(scale_frames=2, sliding_window=4, image_size=56).validate()
    camera = engine.new_session('cam', cfg)
    times = engine.warm_up(cfg, (48, 64), cameras=2)
    assert times.total_s > 0
    # each part of each camera's stream is timed: the scale call (its 2 frames), 2 frames
    # with depth, 2 without; the second camera's under its own names
    names = [name for name, _ in times.parts]
    first = ['scale call'] * 2 + ['first frame with depth', 'later frames with depth',
                                  'first frame without depth', 'later frames without depth']
    assert names == first + ['cameras after the first: ' + n for n in first]
    assert times.by_part()['scale call'] == sum(s for n, s in times.parts if n == 'scale call')
    assert 'first frame with depth' in times.text()
    assert camera.frames_seen == 0 and camera.stats().frames == 0
    frames = [np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
              for i in range(3)]
    assert [len(camera.step(f, i + 1)) for i, f in enumerate(frames)] == [0, 2, 1]


def test_warm_up_leaves_one_cache_pair_per_camera_for_sessions_of_its_size():
    """The cameras take the warm-up's caches (and, on CUDA, its graphs) and stream as fresh."""
    from lingbot_ros.streaming.config import StreamConfig
    cfg = StreamConfig(scale_frames=2, sliding_window=4, image_size=56).validate()
    frames = [np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
              for i in range(6)]

    def stream(session):
        out = []
        for i, f in enumerate(frames):
            out += session.submit(f, i + 1)
        out += session.drain()
        return out
    fresh = stream(Engine.load(EngineConfig(device='cpu')).new_session('fresh', cfg))
    engine = Engine.load(EngineConfig(device='cpu'))
    allocated = []
    real = engine.cache_factory.factory
    engine.cache_factory.factory = lambda spec: allocated.append(spec) or real(spec)
    engine.warm_up(cfg, (48, 64), cameras=2)
    assert len(allocated) == 2 and engine.cache_factory.kept == 2
    cams = [engine.new_session(f'cam{i}', cfg) for i in range(2)]
    for cam in cams:
        got = stream(cam)
        assert [r.stamp_ns for r in got] == [r.stamp_ns for r in fresh]
        for a, b in zip(got, fresh):
            np.testing.assert_array_equal(a.pose_c2w, b.pose_c2w)
            np.testing.assert_array_equal(a.depth, b.depth)
    assert len(allocated) == 2 and engine.cache_factory.kept == 0  # both taken, none made
    other = engine.new_session('other', cfg.replace(sliding_window=6))
    other.step(frames[0], 1)
    other.step(frames[1], 2)
    assert len(allocated) == 3  # a size no warm-up made: allocated as before


def test_prepare_says_there_is_nothing_to_compile_without_cuda(capsys):
    from lingbot_ros.tools import prepare
    assert prepare.main(['--set', 'device:=cpu', '--set', 'preset:=tiny',
                         '--set', 'torch_compile:=true']) == 0
    out = capsys.readouterr().out
    assert 'attention backend sdpa' in out
    assert 'torch_compile: off: needs CUDA' in out and 'nothing to compile' in out
    assert 'Python bytecode: ' in out.splitlines()[-1]


def test_prepare_reads_the_camera_size_as_width_by_height():
    from lingbot_ros.streaming.config import NOMINAL_INPUT_HW
    from lingbot_ros.tools import prepare
    assert prepare._camera_hw(None) == NOMINAL_INPUT_HW
    assert prepare._camera_hw('1280x720') == (720, 1280)
    for bad in ('12', '0x480', 'wide x tall'):
        with pytest.raises(SystemExit, match='WIDTHxHEIGHT'):
            prepare._camera_hw(bad)


def test_kernel_cache_is_the_given_folder_or_ours_under_the_user_cache(monkeypatch, tmp_path):
    from lingbot_ros.model.compiled import kernel_cache_dir
    monkeypatch.setenv('TORCHINDUCTOR_CACHE_DIR', str(tmp_path / 'given'))
    assert kernel_cache_dir() == tmp_path / 'given'
    monkeypatch.delenv('TORCHINDUCTOR_CACHE_DIR')
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'xdg'))
    assert kernel_cache_dir() == tmp_path / 'xdg' / 'lingbot_ros' / 'torchinductor'


def test_a_scale_call_runs_uncompiled_and_a_streaming_frame_compiled():
    """Only a streaming frame's shapes are traced: a start loads half the graphs."""
    from lingbot_ros.streaming.config import StreamConfig
    torch._dynamo.reset()
    traced = []

    def counting(gm, example_inputs):
        traced.append(gm)
        return gm.forward
    engine = Engine.load(EngineConfig(device='cpu'))
    compile_blocks(engine.model, backend=counting)
    compile_depth_decoder(engine.model, backend=counting)
    session = engine.new_session('cam', StreamConfig(scale_frames=2, sliding_window=4,
                                                     image_size=56).validate())
    frames = [np.random.default_rng(i).integers(0, 256, (48, 64, 3), dtype=np.uint8)
              for i in range(3)]
    assert [len(session.step(f, i + 1)) for i, f in enumerate(frames[:2])] == [0, 2]
    assert traced == []
    assert len(session.step(frames[2], 3)) == 1
    assert traced  # the streaming frame's pieces and depth decoder
    torch._dynamo.reset()


def test_a_compiled_engines_warm_up_saves_the_traces_and_a_failed_save_only_says_so(
        monkeypatch):
    from lingbot_ros.model import compiled
    from lingbot_ros.streaming.config import StreamConfig
    cfg = StreamConfig(scale_frames=2, sliding_window=4, image_size=56).validate()
    saves = []
    monkeypatch.setattr(compiled, 'save_traces', lambda: saves.append(1) or 3)
    engine = Engine.load(EngineConfig(device='cpu'))
    engine.warm_up(cfg, (48, 64))
    assert saves == []  # nothing compiled, nothing to keep
    engine.compiled_blocks, engine.compile_status = 4, 'on (4 blocks)'
    engine.warm_up(cfg, (48, 64))
    assert saves == [1] and engine.compile_status == 'on (4 blocks)'

    def broken():
        raise OSError('read-only file system')
    monkeypatch.setattr(compiled, 'save_traces', broken)
    engine.warm_up(cfg, (48, 64))
    assert engine.compile_status == ('on (4 blocks); traces not saved (OSError: read-only '
                                     'file system)')
