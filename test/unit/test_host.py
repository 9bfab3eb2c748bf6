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

"""One transfer gives what one .float().cpu() per output gave, as arrays of their own."""

from lingbot_ros.streaming.host import to_host
import numpy as np
import pytest
import torch

DEVICES = ['cpu'] + (['cuda'] if torch.cuda.is_available() else [])


def _outputs(device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        'pose_enc': torch.randn(3, 9, generator=g),
        'iters': torch.randn(3, 4, 9, generator=g),
        'depth': torch.rand(3, 7, 5, 1, generator=g),
        'tokens': torch.randn(3, 16, generator=g).to(torch.bfloat16),
        'colors': torch.randint(0, 256, (3, 7, 5, 3), generator=g).to(torch.uint8),
        'absent': None,
    }


@pytest.mark.parametrize('device', DEVICES)
def test_every_output_equals_its_own_copy_bit_for_bit(device):
    outs = {k: None if v is None else v.to(device) for k, v in _outputs(device).items()}
    # a non-contiguous view, as a permuted output is
    outs['colors'] = outs['colors'].permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    host = to_host(outs)
    assert list(host) == list(outs) and host['absent'] is None
    for name, t in outs.items():
        if t is None:
            continue
        want = (t.float() if t.is_floating_point() else t).cpu().numpy()
        got = host[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), name


def test_the_arrays_are_their_own_memory():
    host = to_host({'a': torch.ones(4), 'b': torch.zeros(2, 2, dtype=torch.uint8)})
    assert host['a'].base is None and host['b'].base is None  # no view of a shared buffer
    assert host['a'].flags.writeable and host['a'].flags.c_contiguous


def test_nothing_to_copy():
    assert to_host({'x': None}) == {'x': None}
