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

"""Device out-of-memory while allocating the KV pools halves the window and goes on."""

from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.ros import diagnostics
from lingbot_ros.ros.params import parse
from lingbot_ros.ros.worker import CameraStream
from lingbot_ros.streaming.caches import dense_cache_factory
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.session import MIN_SLIDING_WINDOW, Session, SessionContext
import pytest
import torch


class _Model:
    """Stands in for the network: attends through the caches, returns fixed poses."""

    def __call__(self, images, *, time_index, first_frame, scale_frames, global_cache,
                 camera_cache, with_depth=True, camera_iterations=0):
        from lingbot_ros.model.network import ModelOutput
        s, _, h, w = images.shape
        q = torch.zeros(1, 1, s * (6 + 4), 4)
        global_cache.attend(0, q, q, q)
        c = torch.zeros(1, 1, s, 4)
        camera_cache.attend(0, c, c, c)
        pose = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1.0, 1.0]).repeat(s, 1)
        depth = torch.ones(s, h, w, 1) if with_depth else None
        return ModelOutput(pose_enc=pose, pose_enc_iters=pose[:, None], depth=depth,
                           depth_conf=None if depth is None else depth[..., 0] + 1,
                           camera_tokens=torch.zeros(s, 4, 2))


def _session(fits_window: int, requested: list) -> Session:
    def factory(spec):
        requested.append(spec.sliding_window)
        if spec.sliding_window > fits_window:
            raise torch.cuda.OutOfMemoryError('CUDA out of memory (simulated)')
        return dense_cache_factory(spec)
    ctx = SessionContext(model=_Model(), model_config=ModelConfig.preset('tiny'),
                         device=torch.device('cpu'), dtype=torch.float32, backend='sdpa',
                         cache_factory=factory)
    return Session(ctx, 'cam', StreamConfig(scale_frames=2, sliding_window=64))


def test_out_of_memory_halves_the_window_until_the_pools_fit():
    requested = []
    session = _session(fits_window=10, requested=requested)
    images = torch.rand(6, 3, 28, 28)
    out = session.run(images)
    assert requested == [64, 32, 16, 8]
    assert session.stats().sliding_window == 8
    assert list(out.arrays['frame_type']) == [0, 0, 1, 1, 1, 1]


def test_out_of_memory_below_the_smallest_window_is_raised():
    session = _session(fits_window=MIN_SLIDING_WINDOW - 1, requested=[])
    with pytest.raises(torch.cuda.OutOfMemoryError):
        session.run(torch.rand(3, 3, 28, 28))


def test_reset_tries_the_configured_window_again():
    requested = []
    session = _session(fits_window=20, requested=requested)
    session.run(torch.rand(3, 3, 28, 28))
    session.reset()
    assert session.stats().sliding_window == 64


def test_a_shrunk_window_is_a_diagnostics_warning():
    cam = CameraStream(0, 'front', '/front/image', session=None, window=20)
    cam.sliding_window = 64
    cam.cache_stats = CacheStats(sliding_window=16)
    cam.counters.received = cam.counters.processed = 5
    status = diagnostics.camera_status(cam, diagnostics.NodeInfo(hardware_id='cpu'),
                                       parse({}).diag, now=0.0)
    assert status.level == diagnostics.WARN
    assert 'shrunk to 16 frames' in status.message
    assert {v.key: v.value for v in status.values}['sliding_window'] == '16'
