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
The production path on the GPU: CUDA graphs, the paged cache, FlashInfer, bf16, vs eager.

What the node runs on a robot's GPU, frame by frame through ``Session.step`` with window
evictions and rolled-back non-keyframes: the graphed engine must give what the same
engine gives eagerly (the same kernels, so bf16 rounding apart the same numbers), with
FlashInfer really in use. The model is small but has FlashInfer's head size (64).
Skipped without CUDA or FlashInfer, per test.
"""

import dataclasses
import json

from lingbot_ros.cache.backends import flashinfer_module
from lingbot_ros.model.config import (AggregatorConfig, CameraHeadConfig, DepthHeadConfig,
                                      ModelConfig, PatchEmbedConfig)
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA device'),
    pytest.mark.skipif(torch.cuda.is_available() and flashinfer_module()[0] is None,
                       reason=f'FlashInfer: {flashinfer_module()[1]}'),
]

SMALL64 = ModelConfig(
    name='small64',
    patch_embed=PatchEmbedConfig(embed_dim=128, depth=2, num_heads=2),
    aggregator=AggregatorConfig(embed_dim=128, depth=4, num_heads=2,
                                selected_layers=(0, 1, 2, 3), rope3d_split=(20, 22, 22)),
    camera_head=CameraHeadConfig(trunk_depth=2, num_heads=4),
    depth_head=DepthHeadConfig(features=16, out_channels=(8, 16, 32, 32)),
).validate()


def _engines(tmp_path):
    path = tmp_path / 'small64.json'
    path.write_text(json.dumps(SMALL64.to_dict()))
    cfg = EngineConfig(model_config=str(path), device='cuda', dtype='bfloat16',
                       attention_backend='flashinfer', seed=3, cuda_graphs=True)
    graphed = Engine.load(cfg)
    eager = Engine(graphed.model, graphed.model_config, graphed.device, graphed.dtype,
                   graphed.backend, 'eager twin', cuda_graphs=False)
    return graphed, eager


def _run(engine, frames):
    stream = StreamConfig(scale_frames=2, sliding_window=4, keyframe_interval=2,
                          image_size=126, with_depth=True).validate()
    session = engine.new_session('gpu', stream)
    out = []
    for i, frame in enumerate(frames):
        out += session.step(frame, 1_000_000 * (i + 1))
    return out, session.stats()


def test_graphed_flashinfer_bf16_session_equals_its_eager_twin(tmp_path):
    graphed, eager = _engines(tmp_path)
    assert graphed.backend == 'flashinfer' and graphed.dtype == torch.bfloat16
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(24)]
    got, stats = _run(graphed, frames)
    want, _ = _run(eager, frames)
    assert graphed.graph_status.startswith('on'), graphed.graph_status
    assert 'one graph per frame' in graphed.graph_status  # attention inside the graph
    assert 'frame resize graphed' in graphed.graph_status, graphed.graph_status
    assert graphed.runner.eager_frames == 0
    assert stats.evictions > 0 and stats.rollbacks > 0  # the window turned over
    assert [r.stamp_ns for r in got] == [r.stamp_ns for r in want] and len(got) == 24
    for g, w in zip(got, want):
        assert g.frame_type == w.frame_type
        np.testing.assert_allclose(g.pose_enc, w.pose_enc, atol=2e-3, rtol=0)
        np.testing.assert_allclose(g.depth, w.depth, rtol=1e-2, atol=1e-3)
        assert np.isfinite(g.depth).all()
    print('graph status:', graphed.graph_status, '| stats:', dataclasses.asdict(stats))


def test_compiled_graphed_session_agrees_with_the_plain_one(tmp_path):
    graphed, _ = _engines(tmp_path)
    path = tmp_path / 'small64.json'
    compiled = Engine.load(graphed.config.replace(model_config=str(path), torch_compile=True))
    assert compiled.compiled_blocks > 0, compiled.compile_status
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(16)]
    want, _ = _run(graphed, frames)
    got, _ = _run(compiled, frames)
    assert 'one graph per frame' in compiled.graph_status, compiled.graph_status
    assert compiled.runner.eager_frames == 0
    for g, w in zip(got, want):  # fused kernels round differently: bf16 tolerance
        np.testing.assert_allclose(g.pose_enc, w.pose_enc, atol=2e-2, rtol=0)
        np.testing.assert_allclose(g.depth, w.depth, rtol=5e-2, atol=1e-2)
    print('compiled:', compiled.compile_status, '|', compiled.graph_status)
