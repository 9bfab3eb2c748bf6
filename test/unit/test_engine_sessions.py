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

"""Cameras share one engine: interleaved sessions give what each gives alone."""

from lingbot_ros.model.checkpoint import matmul_parameters
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
import numpy as np


def test_interleaved_sessions_equal_solo_runs():
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu'))
    cfg = StreamConfig(scale_frames=2, sliding_window=3, image_size=84)
    rng = np.random.default_rng(0)
    cams = {'a': [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(8)],
            'b': [rng.integers(0, 256, (60, 80, 3), dtype=np.uint8) for _ in range(8)]}

    def solo(frames):
        session = engine.new_session('solo', cfg)
        return [r for i, f in enumerate(frames) for r in session.step(f, i + 1)]
    alone = {name: solo(frames) for name, frames in cams.items()}
    sessions = {name: engine.new_session(name, cfg) for name in cams}
    together = {name: [] for name in cams}
    for i in range(8):
        for name, frames in cams.items():
            together[name] += sessions[name].step(frames[i], i + 1)
    for name in cams:
        assert [r.stamp_ns for r in together[name]] == list(range(1, 9))
        for mine, ref in zip(together[name], alone[name]):
            np.testing.assert_array_equal(mine.pose_c2w, ref.pose_c2w)
            np.testing.assert_array_equal(mine.depth, ref.depth)


def _poses(engine, frames, cfg):
    session = engine.new_session('cam', cfg)
    out = [r for i, f in enumerate(frames) for r in session.step(f, i + 1)]
    return session, np.stack([r.pose_c2w for r in out]), np.stack([r.depth for r in out])


def test_memory_options_are_off_by_default_and_each_runs():
    import torch
    cfg = StreamConfig(scale_frames=2, sliding_window=3, image_size=84, max_window_frames=6)
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(9)]
    base = Engine.load(EngineConfig(preset='tiny', device='cpu'))
    assert base.kv_dtype == torch.float32
    assert base.model.depth_head.chunk == base.model_config.depth_head.frames_chunk_size
    assert {p.dtype for p in base.model.parameters()} == {torch.float32}
    _, ref_pose, ref_depth = _poses(base, frames, cfg)

    chunked = Engine.load(EngineConfig(preset='tiny', device='cpu', depth_chunk_frames=1))
    assert chunked.model.depth_head.chunk == 1
    session, pose, depth = _poses(chunked, frames, cfg)
    np.testing.assert_allclose(depth, ref_depth, rtol=1e-5, atol=1e-6)
    # Decoding one frame at a time instead of eight runs the depth head's convolutions on
    # other batch shapes, so float32 sums are taken in another order: depths differ by a
    # few ulps (relative 1e-6). Rotations never see depth (the Sim(3) rotation comes from
    # the poses alone) and both engines run the same camera head on the same tokens, so
    # they stay bit for bit. Translations do see it once a window re-seeds: the Sim(3)
    # scale is the median ratio of the overlap frames' depths, so a depth ulp becomes a
    # scale ulp times each frame's offset from the anchor (about 1e-8 here, one float32
    # ulp of the published pose). 2e-6 is what a scale error of 2e-5 (twice the depth
    # tolerance above, the most a median of depth ratios can move) makes of these
    # offsets (about 0.09 units per unit of scale); a depth head that decodes a frame
    # wrongly moves the scale by percents, i.e. translations by 1e-3 or more.
    assert session.window_index >= 1  # a re-seed ran: the depths fed the scale
    np.testing.assert_array_equal(pose[:, :3, :3], ref_pose[:, :3, :3])
    np.testing.assert_array_equal(pose[:, 3], ref_pose[:, 3])
    np.testing.assert_allclose(pose[:, :3, 3], ref_pose[:, :3, 3], rtol=0, atol=2e-6)

    fp8 = Engine.load(EngineConfig(preset='tiny', device='cpu', kv_cache_dtype='float8_e4m3'))
    session, pose, _ = _poses(fp8, frames, cfg)
    assert session._windows.current.agg.pool.dtype == torch.float8_e4m3fn
    assert session.window_index >= 1  # a re-seed ran over the float8 cache too
    assert np.all(np.isfinite(pose)) and 0 < np.abs(pose - ref_pose).max() < 0.1

    low = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16',
                                   weights_dtype='compute'))
    matmul = matmul_parameters(low.model)  # every other parameter stays float32
    assert {p.dtype for n, p in low.model.named_parameters() if n in matmul} == \
        {torch.bfloat16}
    assert {p.dtype for n, p in low.model.named_parameters() if n not in matmul} == \
        {torch.float32}
    _, pose, depth = _poses(low, frames, cfg)
    assert depth.dtype == np.float32 and np.all(np.isfinite(pose))
