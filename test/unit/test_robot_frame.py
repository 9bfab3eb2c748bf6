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

"""The robot's frames: base pose, map -> odom (REP-105), base-to-camera text, odometry files."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.robot_frame import (base_pose, camera_in_odom, map_to_odom,
                                               pair_odometry, parse_base_to_camera,
                                               read_base_trajectory, rigid)
from lingbot_ros.streaming.trajectory import (interpolate_poses, invert_rigid, matrix_to_quat,
                                              quat_to_matrix, slerp, write_tum)
import numpy as np
import pytest
from synthetic_robot import random_rigid, rot_z

seeds = st.integers(0, 2 ** 31 - 1)


@settings(max_examples=100, deadline=None)
@given(seeds)
def test_map_to_odom_composes_to_the_base_pose(seed):
    rng = np.random.default_rng(seed)
    base_in_map, base_in_odom = random_rigid(rng, 50.0), random_rigid(rng, 50.0)
    odom_in_map = map_to_odom(base_in_map, base_in_odom)
    np.testing.assert_allclose(odom_in_map @ base_in_odom, base_in_map, rtol=0, atol=1e-9)
    np.testing.assert_allclose(odom_in_map[3], [0, 0, 0, 1])
    np.testing.assert_allclose(odom_in_map[:3, :3] @ odom_in_map[:3, :3].T, np.eye(3),
                               atol=1e-12)


@settings(max_examples=50, deadline=None)
@given(seeds, st.floats(0.05, 20.0))
def test_base_pose_from_a_camera_pose_in_any_units(seed, metres_per_unit):
    rng = np.random.default_rng(seed)
    base_in_map, lever = random_rigid(rng), random_rigid(rng, 0.5)
    camera_metric = base_in_map @ lever
    np.testing.assert_allclose(base_pose(camera_metric, lever), base_in_map, atol=1e-9)
    # the same camera in model units: the base comes out in model units too
    camera_model = camera_metric.copy()
    camera_model[:3, 3] /= metres_per_unit
    got = base_pose(camera_model, lever, metres_per_unit)
    np.testing.assert_allclose(got[:3, :3], base_in_map[:3, :3], atol=1e-9)
    np.testing.assert_allclose(got[:3, 3] * metres_per_unit, base_in_map[:3, 3], atol=1e-9)
    # batched, and the odometry side's inverse
    both = base_pose(np.stack([camera_metric, camera_metric]), lever)
    np.testing.assert_allclose(both[1], base_in_map, atol=1e-9)
    np.testing.assert_allclose(camera_in_odom(base_in_map, lever), camera_metric, atol=1e-12)
    with pytest.raises(ValueError):
        base_pose(camera_metric, lever, 0.0)


def test_map_to_odom_of_a_metric_estimate_is_the_true_offset():
    rng = np.random.default_rng(4)
    map_from_odom, lever = random_rigid(rng), random_rigid(rng, 0.4)
    for yaw, x in [(0.0, 0.0), (1.0, 2.0), (-2.5, -7.0)]:
        base_in_odom = rigid(rot_z(yaw), [x, 0.5 * x, 0.0])
        camera_in_map = map_from_odom @ base_in_odom @ lever
        got = map_to_odom(base_pose(camera_in_map, lever), base_in_odom)
        np.testing.assert_allclose(got, map_from_odom, atol=1e-9)


def test_parse_base_to_camera():
    got = parse_base_to_camera('0.2 -0.1 0.5  -0.5 0.5 -0.5 0.5')
    np.testing.assert_allclose(got[:3, 3], [0.2, -0.1, 0.5])
    # the usual optical frame: z forward along the base's x, x right along -y
    np.testing.assert_allclose(got[:3, :3], [[0, 0, 1], [-1, 0, 0], [0, -1, 0]], atol=1e-12)
    same = parse_base_to_camera('0.2, -0.1, 0.5, -1, 1, -1, 1')   # commas; not unit length
    np.testing.assert_allclose(same, got, atol=1e-12)


@pytest.mark.parametrize('text, words', [
    ('0 0 0 0 0 0', 'got 6'), ('0 0 0 0 0 0 1 2', 'got 8'), ('', 'got 0'),
    ('0 0 zero 0 0 0 1', 'not all are numbers'), ('0 0 nan 0 0 0 1', 'not all are finite'),
    ('0 0 0 0 0 0 0', 'quaternion is zero'), ('1 2 3 0 0 0 inf', 'not all are finite')])
def test_parse_base_to_camera_refuses_bad_text(text, words):
    with pytest.raises(ValueError, match=words) as info:
        parse_base_to_camera(text)
    assert 'x y z qx qy qz qw' in str(info.value) or 'quaternion' in str(info.value)


def test_interpolation_is_linear_in_translation_and_slerp_in_rotation():
    stamps = np.array([10.0, 12.0, 14.0])
    poses = np.stack([rigid(rot_z(a), [x, 0, 1]) for a, x in [(0.0, 0), (1.0, 2), (3.0, 2)]])
    query = np.array([9.9, 10.0, 11.0, 11.5, 13.0, 14.0, 14.1])
    paired, got = interpolate_poses(stamps, poses, query)
    assert paired.tolist() == [False, True, True, True, True, True, False]
    assert np.all(np.isnan(got[~paired]))
    np.testing.assert_allclose(got[2], rigid(rot_z(0.5), [1, 0, 1]), atol=1e-12)
    np.testing.assert_allclose(got[3], rigid(rot_z(0.75), [1.5, 0, 1]), atol=1e-12)
    np.testing.assert_allclose(got[4], rigid(rot_z(2.0), [2, 0, 1]), atol=1e-12)
    np.testing.assert_allclose(got[[1, 5]], poses[[0, 2]], atol=1e-12)
    # unsorted input, a repeated stamp, a gap longer than allowed
    order = [2, 0, 1, 0]
    paired, again = interpolate_poses(stamps[order], poses[order], query, max_gap_s=5.0)
    np.testing.assert_allclose(again[paired], got[paired], atol=1e-12)
    paired, _ = interpolate_poses(stamps, poses, query, max_gap_s=1.5)
    assert paired.tolist() == [False, True, False, False, False, True, False]  # on samples
    paired, _ = interpolate_poses(np.zeros(0), np.zeros((0, 4, 4)), query)
    assert not paired.any()
    with pytest.raises(ValueError):
        interpolate_poses(stamps, poses[:2], query)


@settings(max_examples=60, deadline=None)
@given(seeds, st.floats(0.0, 1.0))
def test_slerp_follows_the_shortest_arc_at_constant_speed(seed, alpha):
    rng = np.random.default_rng(seed)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = rng.uniform(0.0, np.pi * 0.99)
    q0 = matrix_to_quat(quat_to_matrix(rng.normal(size=4)))
    turn = np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])
    q1 = matrix_to_quat(quat_to_matrix(turn) @ quat_to_matrix(q0))
    part = np.concatenate([axis * np.sin(alpha * angle / 2), [np.cos(alpha * angle / 2)]])
    expected = quat_to_matrix(part) @ quat_to_matrix(q0)
    for sign in (1.0, -1.0):  # q and -q are the same rotation
        got = quat_to_matrix(slerp(q0, sign * q1, np.array(alpha)))
        np.testing.assert_allclose(got, expected, atol=1e-9)


def test_read_base_trajectory_pairs_frames_within_the_span(tmp_path):
    odom_stamps = np.arange(100.0, 110.0, 0.02)          # 50 Hz
    poses = np.stack([rigid(rot_z(0.1 * t), [0.5 * t, 0, 0]) for t in odom_stamps - 100])
    path = tmp_path / 'base.tum'
    write_tum(path, odom_stamps, poses)
    frames = np.array([99.0, 100.0, 101.013, 105.5, 109.98, 110.5])
    got = read_base_trajectory(path, frames)
    assert got.paired.tolist() == [False, True, True, True, True, False] and got.count == 4
    for i in np.flatnonzero(got.paired):
        t = frames[i] - 100.0
        np.testing.assert_allclose(got.base_in_odom[i], rigid(rot_z(0.1 * t), [0.5 * t, 0, 0]),
                                   atol=1e-7)
    same = pair_odometry(*_read(path), frames)
    np.testing.assert_array_equal(same.paired, got.paired)


def _read(path):
    from lingbot_ros.streaming.trajectory import read_tum
    return read_tum(path)


@pytest.mark.parametrize('text', ['1 2 3\n', '0 0 0 0 0 0 0 1\n1 0 0 0 zero 0 0 1\n',
                                  '0 0 0 0 0 0 0 0\n'])
def test_read_base_trajectory_names_a_bad_file(tmp_path, text):
    path = tmp_path / 'bad.tum'
    path.write_text(text)
    with pytest.raises(ValueError, match='bad.tum'):
        read_base_trajectory(path, np.array([0.0]))


def test_invert_rigid_is_the_inverse_used_by_map_to_odom():
    rng = np.random.default_rng(9)
    t = random_rigid(rng)
    np.testing.assert_allclose(invert_rigid(t) @ t, np.eye(4), atol=1e-12)
