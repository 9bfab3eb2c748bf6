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

"""Flow-magnitude keyframe criterion against hand-built geometry."""

import math

from lingbot_ros.model.pose import quaternion_to_rotation
from lingbot_ros.streaming.flow import flow_magnitude, flow_magnitude_from_pose_encoding
import numpy as np
import pytest
import torch

H, W = 42, 84
K = torch.tensor([[60.0, 0.0, 42.0], [0.0, 60.0, 21.0], [0.0, 0.0, 1.0]])


def _pose(tx=0.0, ty=0.0, tz=0.0, yaw=0.0) -> torch.Tensor:
    """Camera-to-world 3x4: a turn about the camera y axis, then a translation."""
    c, s = math.cos(yaw), math.sin(yaw)
    rot = torch.tensor([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
    return torch.cat([rot, torch.tensor([[tx], [ty], [tz]])], dim=1)


def test_sideways_translation_of_a_fronto_parallel_plane():
    # Every pixel of a plane at depth Z moves by fx * t / Z when the camera slides by t.
    depth = torch.full((H, W), 4.0)
    flow = flow_magnitude(depth, _pose(tx=0.2), K, _pose(), K)
    assert flow.shape == ()
    torch.testing.assert_close(flow, torch.tensor(60.0 * 0.2 / 4.0))
    closer = flow_magnitude(torch.full((H, W), 2.0), _pose(tx=0.2), K, _pose(), K)
    torch.testing.assert_close(closer, 2 * flow)


def test_identical_poses_give_zero_and_pure_rotation_ignores_depth():
    depth = torch.rand(H, W, generator=torch.Generator().manual_seed(0)) * 5 + 1
    assert flow_magnitude(depth, _pose(tx=1, tz=3), K, _pose(tx=1, tz=3), K).abs() < 1e-4
    a = flow_magnitude(depth, _pose(yaw=0.05), K, _pose(), K)
    b = flow_magnitude(depth * 7, _pose(yaw=0.05), K, _pose(), K)
    torch.testing.assert_close(a, b)
    assert a > 1.0


def test_validity_rules():
    depth = torch.full((H, W), 4.0)
    depth[::8, ::8][:, :3] = 0.0  # three grid columns without depth
    flow = flow_magnitude(depth, _pose(tx=0.2), K, _pose(), K)
    torch.testing.assert_close(flow, torch.tensor(3.0))  # the rest still moves by 3 px
    # A keyframe looking the other way sees every point behind it: nothing valid -> 0.
    behind = flow_magnitude(torch.full((H, W), 4.0), _pose(), K, _pose(yaw=math.pi), K)
    assert behind == 0.0
    assert flow_magnitude(torch.zeros(H, W), _pose(tx=1.0), K, _pose(), K) == 0.0


def test_batched_streams_and_a_direct_reference():
    gen = torch.Generator().manual_seed(4)
    depth = torch.rand(3, H, W, generator=gen) * 3 + 0.5
    c2w = torch.stack([_pose(0.1, -0.05, 0.2, 0.03), _pose(-0.3, 0.0, 0.0, -0.1),
                       _pose(0.0, 0.2, -0.1, 0.2)])
    kf = torch.stack([_pose(), _pose(0.05, 0.05, 0.0, 0.0), _pose(0.0, 0.0, 0.3, 0.1)])
    k_kf = K.clone()
    k_kf[0, 0] = k_kf[1, 1] = 70.0
    got = flow_magnitude(depth, c2w, K.expand(3, 3, 3), kf, k_kf, stride=5)
    assert got.shape == (3,)
    for b in range(3):
        want = _reference(depth[b].double().numpy(), c2w[b].double().numpy(), K.double().numpy(),
                          kf[b].double().numpy(), k_kf.double().numpy(), 5)
        assert abs(float(got[b]) - want) < 1e-4


def _reference(depth, c2w, k, kf_c2w, kf_k, stride):
    """Pixel-by-pixel reading of the criterion, for comparison."""
    kf_rot, kf_t = kf_c2w[:, :3], kf_c2w[:, 3]
    norms = []
    for v in range(0, depth.shape[0], stride):
        for u in range(0, depth.shape[1], stride):
            d = depth[v, u]
            cam = np.linalg.solve(k, np.array([u, v, 1.0])) * d
            world = c2w[:, :3] @ cam + c2w[:, 3]
            p = kf_rot.T @ (world - kf_t)
            if d > 1e-6 and p[2] > 1e-6:
                uv = (kf_k @ (p / p[2]))[:2]
                norms.append(np.hypot(uv[0] - u, uv[1] - v))
    return float(np.mean(norms)) if norms else 0.0


def test_pose_encoding_entry_point_matches_matrices():
    enc = torch.tensor([[0.2, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.4],
                        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 1.0, 1.4]])
    depth = torch.full((H, W), 4.0)
    flow = flow_magnitude_from_pose_encoding(depth, enc[0], enc[1])
    fx = (W / 2) / math.tan(1.4 / 2)
    torch.testing.assert_close(flow, torch.tensor(fx * 0.2 / 4.0))
    assert torch.equal(quaternion_to_rotation(enc[1, 3:7]), torch.eye(3))


def test_bad_stride():
    with pytest.raises(ValueError):
        flow_magnitude(torch.ones(H, W), _pose(), K, _pose(), K, stride=0)
