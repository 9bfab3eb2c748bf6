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

"""Pose code -> camera matrices, quaternions and SE(3) helpers."""

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from lingbot_ros.model.pose import (intrinsics_from_fov, intrinsics_to_input,
                                    pose_encoding_to_camera, quaternion_to_rotation,
                                    rotation_to_quaternion, se3_inverse, to_homogeneous)
from lingbot_ros.streaming import trajectory
from lingbot_ros.streaming.trajectory import invert_rigid, matrix_to_quat
import numpy as np
import torch

PARITY = Path(__file__).resolve().parents[1] / 'data' / 'parity'
quats = st.lists(st.floats(-1.0, 1.0), min_size=4, max_size=4).filter(
    lambda q: sum(v * v for v in q) > 1e-2)


def test_pose_encoding_matches_reference_converter():
    ref = np.load(PARITY / 'keyframes' / 'outputs.npz')
    ext, k = pose_encoding_to_camera(torch.from_numpy(ref['pose_enc']), (42, 84))
    np.testing.assert_allclose(ext.numpy(), ref['extrinsic_w2c'], atol=1e-6, rtol=1e-5)
    np.testing.assert_allclose(se3_inverse(ext).numpy(), ref['extrinsic_c2w'], atol=1e-6,
                               rtol=1e-5)
    np.testing.assert_allclose(k.numpy(), ref['intrinsic'], atol=1e-4, rtol=1e-5)


def test_intrinsics_from_fov_geometry():
    enc = torch.zeros(9)
    enc[6] = 1.0  # identity rotation
    enc[7], enc[8] = np.pi / 2, 2 * np.arctan(2.0)  # tan(fov/2) = 1 and 2
    _, k = pose_encoding_to_camera(enc, (30, 80))
    expected = np.array([[20.0, 0, 40.0], [0, 15.0, 15.0], [0, 0, 1]])
    np.testing.assert_allclose(k.numpy(), expected, atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(quats, st.floats(0.1, 10.0))
def test_quaternion_roundtrip_and_scale_invariance(q, scale):
    q = torch.tensor(q, dtype=torch.float64)
    rot = quaternion_to_rotation(q)
    torch.testing.assert_close(quaternion_to_rotation(q * scale), rot)
    torch.testing.assert_close(rot @ rot.T, torch.eye(3, dtype=torch.float64))
    assert torch.det(rot) > 0.999
    back = rotation_to_quaternion(rot)
    unit = q / q.norm()
    unit = unit if unit[3] >= 0 else -unit
    assert back[3] >= 0
    # q and -q are the same turn; with w == 0 either sign is valid.
    assert min((back - unit).abs().max(), (back + unit).abs().max()) < 1e-9


def test_rotation_to_quaternion_near_half_turns_and_batches():
    angles = torch.tensor([np.pi, np.pi - 1e-7, 1e-8, 2.0], dtype=torch.float64)
    axes = torch.nn.functional.normalize(torch.tensor(
        [[1.0, 0, 0], [0, 1, 1], [1, 2, 3], [-1, 0.5, 0.2]], dtype=torch.float64), dim=-1)
    q = torch.cat([axes * torch.sin(angles / 2)[:, None], torch.cos(angles / 2)[:, None]], -1)
    rot = quaternion_to_rotation(q).reshape(2, 2, 3, 3)
    back = rotation_to_quaternion(rot).reshape(4, 4)
    torch.testing.assert_close(quaternion_to_rotation(back), quaternion_to_rotation(q))
    np.testing.assert_allclose(matrix_to_quat(rot.numpy()).reshape(4, 4), back.numpy())


def test_se3_inverse_shapes_and_numpy_twin():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    pose = torch.cat([quaternion_to_rotation(q), torch.randn(5, 3, 1, generator=gen,
                                                             dtype=torch.float64)], -1)
    full = to_homogeneous(pose)
    assert full.shape == (5, 4, 4) and to_homogeneous(full) is full
    torch.testing.assert_close(full @ se3_inverse(full), torch.eye(4, dtype=torch.float64)
                               .expand(5, 4, 4))
    torch.testing.assert_close(se3_inverse(pose), se3_inverse(full)[:, :3])
    np.testing.assert_allclose(invert_rigid(full.numpy()), se3_inverse(full).numpy())
    np.testing.assert_allclose(invert_rigid(pose.numpy()), se3_inverse(full).numpy())


@settings(max_examples=80, deadline=None)
@given(st.lists(quats, min_size=1, max_size=5), st.floats(0.2, 3.0), st.floats(0.2, 3.0),
       st.sampled_from([(378, 504), (294, 518), (42, 84)]))
def test_the_hosts_numpy_pose_math_equals_the_models_torch(qs, fov_h, fov_w, hw):
    # the host (session records, messages) runs numpy twins of model/pose.py: same numbers
    q = torch.tensor(qs, dtype=torch.float64)
    rng = np.random.default_rng(len(qs))
    enc = torch.cat([torch.from_numpy(rng.normal(0, 3, (len(qs), 3))), q,
                     torch.full((len(qs), 1), fov_h, dtype=torch.float64),
                     torch.full((len(qs), 1), fov_w, dtype=torch.float64)], -1)
    ext, k = pose_encoding_to_camera(enc, hw)
    np.testing.assert_allclose(trajectory.pose_enc_to_matrix(enc.numpy()),
                               to_homogeneous(ext).numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(trajectory.quat_to_matrix(q.numpy()),
                               quaternion_to_rotation(q).numpy(), rtol=0, atol=1e-12)
    rot = quaternion_to_rotation(q)
    np.testing.assert_allclose(matrix_to_quat(rot.numpy()), rotation_to_quaternion(rot).numpy(),
                               rtol=0, atol=1e-12)
    np.testing.assert_allclose(trajectory.intrinsics_from_fov(enc[:, 7].numpy(),
                                                              enc[:, 8].numpy(), *hw),
                               intrinsics_from_fov(enc[:, 7], enc[:, 8], hw).numpy(),
                               rtol=1e-15, atol=0)
    full = to_homogeneous(ext)
    np.testing.assert_allclose(invert_rigid(full.numpy()), se3_inverse(full).numpy(),
                               rtol=0, atol=1e-12)


def test_intrinsics_to_input_projects_consistently():
    # A point seen by the model grid (input scaled by s, then cropped by an offset)
    # must land on the matching input pixel.
    k_model = torch.tensor([[50.0, 0, 42.0], [0, 55.0, 21.0], [0, 0, 1]], dtype=torch.float64)
    scale, offset = (0.25, 0.2), (3.0, -7.0)
    k_in = intrinsics_to_input(k_model, scale, offset)
    point = torch.tensor([0.3, -0.2, 2.0], dtype=torch.float64)
    uv_model = (k_model @ point)[:2] / point[2]
    uv_in = (k_in @ point)[:2] / point[2]
    expected = (uv_model + torch.tensor(offset, dtype=torch.float64)) / torch.tensor(
        scale, dtype=torch.float64)
    torch.testing.assert_close(uv_in, expected)
