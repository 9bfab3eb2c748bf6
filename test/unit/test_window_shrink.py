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

"""Device out-of-memory (allocating the pools, or inside a step) halves the window, goes on."""

import dataclasses

from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.ros import diagnostics
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.parameters import parse
from lingbot_ros.streaming.session import Session, SessionContext
from lingbot_ros.streaming.windows import MIN_SLIDING_WINDOW
import numpy as np
from oracles.dense_cache import dense_cache_factory
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
                                       parse({}), now=0.0)
    assert status.level == diagnostics.WARN
    assert 'shrunk to 16 frames' in status.message
    assert {v.key: v.value for v in status.values}['sliding_window'] == '16'


# --- out of memory inside a step -------------------------------------------------------


class _Failing(_Model):
    """Runs out of memory in calls of the kinds given while the window is above ``fits``."""

    def __init__(self, fits: int, scale: bool = False, stream: bool = True) -> None:
        self.fits, self.scale, self.stream = fits, scale, stream
        self.failures = 0

    def __call__(self, images, *, scale_frames, global_cache, **kw):
        kind = self.scale if scale_frames else self.stream
        if kind and global_cache.sliding_window > self.fits:
            self.failures += 1
            raise torch.cuda.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')
        return super().__call__(images, scale_frames=scale_frames,
                                global_cache=global_cache, **kw)


def _failing_session(model: _Failing, window: int = 64, requested=None, alive=None):
    import weakref

    def factory(spec):
        if alive is not None:
            assert not list(alive), 'the old caches are still held while allocating new ones'
        if requested is not None:
            requested.append(spec.sliding_window)
        caches = dense_cache_factory(spec)
        if alive is not None:
            alive.update(caches)
        return caches
    ctx = SessionContext(model=model, model_config=ModelConfig.preset('tiny'),
                         device=torch.device('cpu'), dtype=torch.float32, backend='sdpa',
                         cache_factory=factory)
    session = Session(ctx, 'cam', StreamConfig(scale_frames=2, sliding_window=window))
    return session, (weakref.WeakSet() if alive is None else alive)


def test_out_of_memory_in_a_step_halves_the_window_reseeds_and_keeps_the_frame():
    import weakref
    requested, alive = [], weakref.WeakSet()
    model = _Failing(fits=20)
    session, _ = _failing_session(model, requested=requested, alive=alive)
    out = session.run(torch.rand(8, 3, 28, 28))
    assert len(out.results) == 8  # no frame lost
    assert requested == [64, 32, 16]
    stats = session.stats()
    assert stats.sliding_window == 16 and session.memory_shrinks == 2
    assert session.window_index == 2  # each shrink seeds a new window from the overlap
    assert 'sliding_window=32' in session.last_oom and 'halved to 16' in session.last_oom
    assert list(out.arrays['window_index']) == [0, 0, 2, 2, 2, 2, 2, 2]
    assert model.failures == 2


def test_out_of_memory_in_the_scale_call_shrinks_and_runs_it_again():
    requested = []
    session, _ = _failing_session(_Failing(fits=20, scale=True, stream=False),
                                  requested=requested)
    out = session.run(torch.rand(5, 3, 28, 28))
    assert len(out.results) == 5 and requested == [64, 32, 16]
    assert session.stats().sliding_window == 16 and session.memory_shrinks == 2


def test_out_of_memory_while_reseeding_shrinks_again():
    requested = []
    model = _Failing(fits=10, scale=True, stream=True)
    session, _ = _failing_session(model, window=32, requested=requested)
    session._ctx = dataclasses.replace(session._ctx, prepare=_prepare)
    frames = [np.full((28, 28, 3), i, np.uint8) for i in range(5)]
    model.scale = False  # the scale phase fits; then every call above 10 runs out
    results = [r for i, f in enumerate(frames[:2]) for r in session.step(f, i)]
    model.scale = True
    results += [r for i, f in enumerate(frames[2:]) for r in session.step(f, 10 + i)]
    assert len(results) == 5
    # the stream call fails at 32; the re-seed at 16 fails too; at 8 both fit
    assert requested == [32, 16, 8] and session.stats().sliding_window == 8
    assert session.memory_shrinks == 2 and model.failures == 2


def _prepare(image_rgb, cfg):
    from lingbot_ros.streaming.session import Prepared
    t = torch.from_numpy(image_rgb).permute(2, 0, 1).float() / 255
    return Prepared(image=t, model_to_input=np.eye(3), input_hw=image_rgb.shape[:2])


def test_out_of_memory_at_the_smallest_window_is_raised_and_the_stream_goes_on():
    model = _Failing(fits=0)
    session, _ = _failing_session(model, window=8)
    session._ctx = dataclasses.replace(session._ctx, prepare=_prepare)
    frames = [np.full((28, 28, 3), i, np.uint8) for i in range(6)]
    assert session.step(frames[0], 1) == [] and len(session.step(frames[1], 2)) == 2
    with pytest.raises(torch.cuda.OutOfMemoryError):
        session.step(frames[2], 3)
    assert session.stats().sliding_window == MIN_SLIDING_WINDOW
    assert session.memory_shrinks == 1  # 8 -> 4, then nothing left to give
    seen = session.frames_seen
    model.fits = 100  # memory is back: the stream goes on from where it was
    assert len(session.step(frames[3], 4)) == 1
    assert session.frames_seen == seen + 1
    assert session.stats().sliding_window == MIN_SLIDING_WINDOW  # until a reset
    session.reset()
    assert session.stats().sliding_window == 8 and session.memory_shrinks == 0
