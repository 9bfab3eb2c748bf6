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

"""Camera and depth heads: checkpoint key layout and numerical parity with the reference."""

import dataclasses
from pathlib import Path

from lingbot_ros.model.camera_head import CameraHead
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.depth_head import DepthHead, position_embedding
import numpy as np
from oracles.dense_cache import DenseStreamCache
import pytest
from safetensors.torch import load_file
import torch

DATA = Path(__file__).resolve().parents[1] / 'data'
PARITY = DATA / 'parity'
# Recommended float32 bounds of the parity README (poses / depth and confidences).
POSE_TOL = {'atol': 1e-5, 'rtol': 1e-4}
DEPTH_TOL = {'atol': 1e-4, 'rtol': 1e-4}


def _fixture_cfg() -> ModelConfig:
    return ModelConfig.load(PARITY / 'basic' / 'config.json')


def _head_weights(prefix: str) -> dict:
    weights = load_file(str(PARITY / 'basic' / 'weights.safetensors'))
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


@pytest.fixture(scope='module')
def camera_head() -> CameraHead:
    head = CameraHead(_fixture_cfg()).eval()
    head.load_state_dict(_head_weights('camera_head.'), strict=True)
    return head


def _stream(head: CameraHead, tokens: torch.Tensor, frame_type: np.ndarray, **kw):
    """Drive the head like a session: scale frames in one call, then one frame per call."""
    cache = DenseStreamCache(special_tokens=1, scale_frames=0, sliding_window=1)
    n_scale = int((frame_type == 0).sum())
    calls = [(0, n_scale, True)] + [(i, i + 1, frame_type[i] != 2)
                                    for i in range(n_scale, tokens.shape[1])]
    poses, iters = [], []
    with torch.no_grad():
        for start, stop, keep in calls:
            cache.begin(stop - start)
            pose, it = head(tokens[:, start:stop], cache, **kw)
            cache.commit() if keep else cache.rollback()
            poses.append(pose)
            iters.append(it)
    return torch.cat(poses, 1)[0].numpy(), torch.cat(iters, 1)[0].numpy()


@pytest.mark.parametrize('run', ['basic/outputs.npz', 'keyframes/outputs_paged.npz',
                                 'keyframes/outputs.npz'])
def test_camera_head_streaming_parity(camera_head, run):
    ref = np.load(PARITY / run)
    tokens = torch.from_numpy(ref['debug_agg_camera_tokens'][:, 3])[None]  # last layer
    pose, iters = _stream(camera_head, tokens, ref['frame_type'])
    np.testing.assert_allclose(pose, ref['pose_enc'], **POSE_TOL)
    np.testing.assert_allclose(iters, ref['pose_enc_iters'], **POSE_TOL)


def test_camera_head_fewer_iterations_is_a_prefix(camera_head):
    ref = np.load(PARITY / 'basic' / 'outputs.npz')
    tokens = torch.from_numpy(ref['debug_agg_camera_tokens'][:, 3])[None]
    pose, iters = _stream(camera_head, tokens, ref['frame_type'], iterations=2)
    assert iters.shape[1] == 2
    np.testing.assert_allclose(iters, ref['pose_enc_iters'][:, :2], **POSE_TOL)
    np.testing.assert_array_equal(pose, iters[:, -1])
    with pytest.raises(ValueError):
        camera_head(tokens, None, iterations=0)


def test_camera_head_without_cache_is_joint_attention(camera_head):
    ref = np.load(PARITY / 'basic' / 'outputs.npz')
    tokens = torch.from_numpy(ref['debug_agg_camera_tokens'][:3, 3])[None]
    with torch.no_grad():
        pose, _ = camera_head(tokens, None)  # the 3 scale frames attend to each other
    np.testing.assert_allclose(pose[0].numpy(), ref['pose_enc'][:3], **POSE_TOL)


def test_camera_head_runs_fp32_under_autocast(camera_head):
    ref = np.load(PARITY / 'basic' / 'outputs.npz')
    tokens = torch.from_numpy(ref['debug_agg_camera_tokens'][:3, 3])[None].bfloat16()
    with torch.no_grad(), torch.autocast('cpu', dtype=torch.bfloat16):
        pose, iters = camera_head(tokens, None)
    assert pose.dtype == torch.float32 and iters.dtype == torch.float32


def _depth_head(chunk: int) -> DepthHead:
    cfg = _fixture_cfg()
    cfg = dataclasses.replace(
        cfg, depth_head=dataclasses.replace(cfg.depth_head, frames_chunk_size=chunk))
    head = DepthHead(cfg).eval()
    head.load_state_dict(_head_weights('depth_head.'), strict=True)
    return head


@pytest.mark.parametrize('case,hw', [('wide', (42, 84)), ('tall', (70, 42))])
def test_depth_head_parity(case, hw):
    ref = np.load(DATA / 'heads' / 'dpt.npz')
    head = _depth_head(int(ref[f'{case}_chunk']))
    layers = [torch.from_numpy(t) for t in ref[f'{case}_tokens']]
    with torch.no_grad():
        depth, conf = head(layers, hw)
    s = layers[0].shape[1]
    assert depth.shape == (1, s, hw[0], hw[1], 1) and conf.shape == (1, s, hw[0], hw[1])
    np.testing.assert_allclose(depth.numpy(), ref[f'{case}_depth'], **DEPTH_TOL)
    np.testing.assert_allclose(conf.numpy(), ref[f'{case}_conf'], **DEPTH_TOL)


def test_depth_head_frames_are_independent():
    ref = np.load(DATA / 'heads' / 'dpt.npz')
    layers = [torch.from_numpy(t) for t in ref['wide_tokens']]
    with torch.no_grad():
        whole, _ = _depth_head(8)(layers, (42, 84))
        last, _ = _depth_head(8)([t[:, 2:] for t in layers], (42, 84))
    torch.testing.assert_close(last[:, 0], whole[:, 2], atol=1e-5, rtol=1e-5)


def test_depth_head_leaves_its_inputs_alone():
    ref = np.load(DATA / 'heads' / 'dpt.npz')
    layers = [torch.from_numpy(t).clone() for t in ref['wide_tokens']]
    before = [t.clone() for t in layers]
    with torch.no_grad():
        _depth_head(2)(layers, (42, 84))
    for a, b in zip(layers, before):
        assert torch.equal(a, b)


def test_position_embedding_layout():
    emb = position_embedding(3, 5, 8, aspect=2.0, device=torch.device('cpu'))
    assert emb.shape == (8, 3, 5) and emb.dtype == torch.float32
    # Channels 0-1 sin(x*omega), 2-3 cos(x*omega), 4-7 the same for y; scaled by 0.1.
    sx = 2.0 / np.sqrt(5.0)
    x = np.linspace(-sx * 4 / 5, sx * 4 / 5, 5)
    np.testing.assert_allclose(emb[0, 1].numpy(), 0.1 * np.sin(x), atol=1e-7)
    np.testing.assert_allclose(emb[3, 2].numpy(), 0.1 * np.cos(x / 100.0 ** 0.5), atol=1e-7)
    np.testing.assert_allclose(emb[4, :, 0].numpy(),
                               0.1 * np.sin(np.linspace(-1 / np.sqrt(5) * 2 / 3,
                                                        1 / np.sqrt(5) * 2 / 3, 3)), atol=1e-7)


# From the reference's state-dict manifest of the released model (key count, parameters).
RELEASE_COUNTS = {'camera_head.': (69, 216_174_610), 'depth_head.': (62, 32_654_562)}


@pytest.mark.parametrize('prefix,cls', [('camera_head.', CameraHead), ('depth_head.', DepthHead)])
def test_release_structure_matches_the_checkpoint(prefix, cls):
    with torch.device('meta'):
        state = cls(ModelConfig.preset('release')).state_dict()
    assert (len(state), sum(v.numel() for v in state.values())) == RELEASE_COUNTS[prefix]
    if prefix == 'camera_head.':
        assert state['poseLN_modulation.1.weight'].shape == (6144, 2048)
        assert state['trunk.3.attn.qkv.weight'].shape == (6144, 2048)
    else:
        assert state['scratch.output_conv2.2.weight'].shape == (2, 32, 1, 1)
        assert 'resize_layers.2.weight' not in state


def test_depth_head_in_chunks_of_one_equals_one_chunk():
    """The engine's depth_chunk_frames only bounds memory: every frame decodes alike."""
    ref = np.load(DATA / 'heads' / 'dpt.npz')
    layers = [torch.from_numpy(t) for t in ref['wide_tokens']]
    with torch.no_grad():
        whole, whole_conf = _depth_head(8)(layers, (42, 84))
        single, single_conf = _depth_head(1)(layers, (42, 84))
    assert layers[0].shape[1] > 1
    torch.testing.assert_close(single, whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(single_conf, whole_conf, atol=1e-5, rtol=1e-5)
