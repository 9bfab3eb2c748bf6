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

"""Aggregator parity with the reference: camera tokens of the selected layers, fixture 'basic'."""

import json
from pathlib import Path

from lingbot_ros.model.aggregator import Aggregator
from lingbot_ros.model.config import ModelConfig, SPECIAL_TOKENS
import numpy as np
from oracles.dense_cache import DenseStreamCache
import pytest
from safetensors.numpy import load_file
import torch

DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity' / 'basic'
ATOL, RTOL = 1e-5, 1e-4


@pytest.fixture(scope='module')
def fixture():
    cfg = ModelConfig.load(DATA / 'config.json')
    weights = load_file(str(DATA / 'weights.safetensors'))
    prefix = 'aggregator.'
    state = {k[len(prefix):]: torch.from_numpy(v) for k, v in weights.items()
             if k.startswith(prefix)}
    agg = Aggregator(cfg).eval()
    agg.load_state_dict(state, strict=True)
    images = torch.from_numpy(np.load(DATA / 'images.npy'))
    expected = np.load(DATA / 'outputs.npz')['debug_agg_camera_tokens']
    args = json.loads((DATA / 'config.json').read_text())
    return agg, images, expected, args


def _camera_tokens(outputs):
    return torch.stack([o[0, :, 0] for o in outputs], dim=1).numpy()  # [S, layers, 2C]


def _check(actual, expected, what):
    err = np.abs(actual - expected)
    bound = ATOL + RTOL * np.abs(expected)
    assert (err <= bound).all(), f'{what}: max |diff| {err.max():.3g}, worst ratio ' \
        f'{(err / bound).max():.3g}'


def test_scale_call_uncached_matches_reference(fixture):
    agg, images, expected, args = fixture
    scale = args['inference']['args']['num_scale_frames']
    with torch.no_grad():
        out = agg(images[None, :scale], time_index=0, first_frame=True, scale_frames=True)
    _check(_camera_tokens(out), expected[:scale], 'scale call')


def test_streaming_with_dense_cache_matches_reference(fixture):
    agg, images, expected, args = fixture
    ctor = args['constructor_args']
    scale = args['inference']['args']['num_scale_frames']
    cache = DenseStreamCache(special_tokens=SPECIAL_TOKENS,
                             scale_frames=ctor['kv_cache_scale_frames'],
                             sliding_window=ctor['kv_cache_sliding_window'])
    got = []
    with torch.no_grad():
        cache.begin(scale)
        out = agg(images[None, :scale], time_index=0, first_frame=True, scale_frames=True,
                  cache=cache)
        cache.commit()
        got.append(_camera_tokens(out))
        for i in range(scale, images.shape[0]):
            cache.begin(1)
            out = agg(images[None, i:i + 1], time_index=i, first_frame=False, scale_frames=False,
                      cache=cache)
            cache.commit()
            got.append(_camera_tokens(out))
    got = np.concatenate(got)
    assert got.shape == expected.shape
    _check(got, expected, 'streaming')
    # The window was exceeded, so the comparison covers eviction.
    assert cache.evictions > 0


def test_wrong_slot_or_time_is_detected(fixture):
    """The comparison is sharp: a wrong token row or a one-step time shift fails it."""
    agg, images, expected, args = fixture
    ctor = args['constructor_args']
    scale = args['inference']['args']['num_scale_frames']
    bad = []
    with torch.no_grad():
        bad.append(agg(images[None, :scale], time_index=0, first_frame=False, scale_frames=True))
        bad.append(agg(images[None, :scale], time_index=0, first_frame=True, scale_frames=False))
    for out in bad:
        assert np.abs(_camera_tokens(out) - expected[:scale]).max() > 100 * ATOL
    # Time only matters relative to the cache: shift the first streaming frame by one.
    cache = DenseStreamCache(SPECIAL_TOKENS, ctor['kv_cache_scale_frames'],
                             ctor['kv_cache_sliding_window'])
    with torch.no_grad():
        cache.begin(scale)
        agg(images[None, :scale], time_index=0, first_frame=True, scale_frames=True, cache=cache)
        cache.commit()
        cache.begin(1)
        out = agg(images[None, scale:scale + 1], time_index=scale + 1, first_frame=False,
                  scale_frames=False, cache=cache)
    assert np.abs(_camera_tokens(out) - expected[scale:scale + 1]).max() > 100 * ATOL
