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

"""CUDA-graph replay of a streaming step equals the eager forward (GPU only)."""

from lingbot_ros.cache.dense import DenseStreamCache
from lingbot_ros.model.checkpoint import load_model
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.graphs import GraphedStep
import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason='needs a CUDA device')]


def _stream(model, frames, step=None, window=3, scale=2):
    """Run scale frames eagerly, then each frame eagerly or through ``step``."""
    agg = DenseStreamCache(6, scale, window)
    cam = DenseStreamCache(1, 0, 1)
    outs = []
    with torch.no_grad():
        for i in range(frames.shape[0]):
            n = scale if i == 0 else 1
            if i and i < scale:
                continue
            images = frames[:scale] if i == 0 else frames[i:i + 1]
            agg.begin(n)
            cam.begin(n)
            t = 0 if i == 0 else agg.frames
            if i == 0 or step is None:
                out = model(images, time_index=t, first_frame=i == 0, scale_frames=i == 0,
                            global_cache=agg, camera_cache=cam)
            else:
                out = step(images, t, agg, cam)
            outs.append((out.pose_enc.clone(), out.depth.clone()))
            agg.commit()
            cam.commit()
    return outs


@pytest.mark.parametrize('dtype', [None, torch.bfloat16])
def test_graph_replay_equals_eager(dtype):
    cfg = ModelConfig.preset('tiny')
    model = load_model(cfg, None, device='cuda', seed=3, autocast_dtype=dtype)
    frames = torch.rand(9, 3, 56, 84, device='cuda', generator=None)
    eager = _stream(model, frames)
    step = GraphedStep(model, 56, 84, with_depth=True)
    graphed = _stream(model, frames, step)
    assert len(step.graphs) == len(step.cuts) + 1 > 1
    for (pe, de), (pg, dg) in zip(eager, graphed):
        torch.testing.assert_close(pg, pe, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(dg, de, atol=1e-4, rtol=1e-4)
