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

"""The frame names the node publishes in, and the covariance its odometry states."""

from types import SimpleNamespace

from lingbot_ros.ros import messages
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.node import LingbotNode
from lingbot_ros.streaming.parameters import parse, SPEC
import numpy as np
import pytest

NAV_FRAMES = {'map', 'odom', 'base_link', 'earth'}  # REP-105: the robot's own tree


def _frames(values, names, frame_id='cam_optical'):
    params = parse(values)
    cams = [CameraStream(i, n, f'/{n}/image', None, 10) for i, n in enumerate(names)]
    for cam in cams:
        cam.frame_id = frame_id
    node = SimpleNamespace(params=params, cameras=cams)
    return [LingbotNode.camera_frames(node, cam) for cam in cams]


def test_one_camera_publishes_in_lingbot_map_never_in_navs_map():
    ((map_frame, child, sensor),) = _frames({}, ['camera'])
    assert map_frame == 'lingbot_map' and map_frame not in NAV_FRAMES
    assert child == 'cam_optical_lingbot' and sensor == 'cam_optical'


def test_several_cameras_each_get_a_map_frame_of_their_own():
    frames = _frames({'camera_topics': ['/front/image', '/rear/image']}, ['front', 'rear'])
    assert [f[0] for f in frames] == ['lingbot_map_front', 'lingbot_map_rear']
    assert not NAV_FRAMES & {f[0] for f in frames}
    named = _frames({'camera_topics': ['/a', '/b'], 'map_frame': 'vslam',
                     'camera_frame': 'tracked'}, ['front', 'rear'])
    assert [f[:2] for f in named] == [('vslam_front', 'tracked_front'),
                                      ('vslam_rear', 'tracked_rear')]


def test_odometry_states_the_configured_covariance():
    pose_cov = SPEC['pose_covariance'].default
    odom = messages.odometry(np.eye(4), 1, 'lingbot_map', 'c', None,
                             pose_cov, SPEC['twist_covariance'].default)
    cov = np.array(odom.pose.covariance).reshape(6, 6)
    assert np.array_equal(np.diag(cov), pose_cov) and np.count_nonzero(cov) == 6
    twist = np.array(odom.twist.covariance).reshape(6, 6)
    assert np.array_equal(np.diag(twist), SPEC['twist_covariance'].default)
    given = parse({'pose_covariance': [1, 2, 3, 4, 5, 6]}).pose_covariance
    assert given == (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)


@pytest.mark.parametrize('bad', [[0.1] * 5, [0.1, 0.1, 0.1, 0.1, 0.1, 0.0], ['a'] * 6])
def test_a_covariance_that_is_not_six_positive_numbers_is_refused(bad):
    from lingbot_ros.streaming.parameters import ParamError
    with pytest.raises(ParamError, match='pose_covariance=.*6 positive numbers'):
        parse({'pose_covariance': bad})
