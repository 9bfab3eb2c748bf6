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

"""The output thread's sink with a scale: metres in every output, frames, diagnostics keys."""

import os
import uuid

from builtin_interfaces.msg import Time
from conftest import dds_domain
from lingbot_ros.ros import diagnostics, messages
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.conventions import OPTICAL_TO_REP103
from lingbot_ros.ros.frames import tf2_missing
from lingbot_ros.ros.outputs import camera_frames, CameraPublishers, Outputs
from lingbot_ros.ros.probe import status_of
from lingbot_ros.ros.scale_feed import depth_topics, driving_camera, ScaleFeed
from lingbot_ros.ros.worker import Output
from lingbot_ros.streaming.parameters import ParamError, parse
from lingbot_ros.streaming.result import FrameResult, FrameType
import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image

DOMAIN = dds_domain(146)
HAVE_TF2 = tf2_missing() is None


class Maps:
    """The map thread's producer side, recorded."""

    def __init__(self):
        self.jobs = []

    def submit(self, camera, result, pose):
        self.jobs.append(('add', result, pose))

    def clear(self, camera):
        self.jobs.append(('clear',))


@pytest.fixture
def node():
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN)
    node = rclpy.create_node(f'scale_out_{uuid.uuid4().hex[:8]}', context=context)
    yield node
    node.destroy_node()
    rclpy.shutdown(context=context)


def _rig(node, monkeypatch, **values):
    params = parse({'publish_depth': True, 'publish_map': True, **values})
    cam = CameraStream(0, 'camera', '/image', None, window=10)
    cam.frame_id = 'cam_optical'
    maps = Maps()
    out = Outputs(node, lambda: params, lambda: [cam], lambda: maps, lambda: False)
    out.pubs = [CameraPublishers(node, '~/')]
    out.scale = ScaleFeed(params, ['camera'], 14, node.get_logger())
    built = []
    for name in ('depth_image', 'odometry', 'camera_info'):
        real = getattr(messages, name)
        monkeypatch.setattr(messages, name, lambda *a, _n=name, _r=real, **k: (
            built.append((_n, a, k)), _r(*a, **k))[1])
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    name = node.get_fully_qualified_name()
    node.create_subscription(Image, f'{name}/depth', lambda m: None, qos)
    node.create_subscription(CameraInfo, f'{name}/camera_info', lambda m: None, qos)
    return cam, out, maps, built


def _result(i):
    k = np.array([[20.0, 0, 8], [0, 20.0, 6], [0, 0, 1]])
    pose = np.eye(4)
    pose[:3, 3] = [0.1 * i, 0.0, 0.2]
    return FrameResult(stamp_ns=10**9 + i, index=i, frame_type=FrameType.KEYFRAME,
                       pose_c2w=pose, pose_enc=np.zeros(9, np.float32), intrinsics=k,
                       intrinsics_model=k, input_hw=(12, 16), model_hw=(12, 16),
                       depth=np.full((12, 16), 1.5, np.float32),
                       confidence=np.full((12, 16), 2.0, np.float32),
                       colors=np.zeros((12, 16, 3), np.uint8))


def test_a_fixed_scale_makes_the_pose_depth_odometry_and_map_metric(node, monkeypatch):
    cam, out, maps, built = _rig(node, monkeypatch, scale_source='fixed', fixed_scale=3.0)
    for i in range(2):
        out.publish(Output(cam, _result(i), None))  # no thread started: sent inline
    (stamp, pose), = cam.track.records()[1:]
    expected = OPTICAL_TO_REP103 @ _result(1).pose_c2w
    expected[:3, 3] *= 3.0
    np.testing.assert_allclose(pose, expected, atol=1e-12)
    depth = [a for n, a, _ in built if n == 'depth_image'][-1][0]
    np.testing.assert_allclose(depth.depth, 4.5)
    odom_args = [a for n, a, _ in built if n == 'odometry'][-1]
    cov = np.asarray(odom_args[5])  # the fit's [6, 6], not the stated diagonal
    assert cov.shape == (6, 6) and np.all(np.diag(cov) > 0)
    np.testing.assert_allclose(np.asarray(odom_args[6])[:3], np.array([0.05] * 3) * 9.0)
    adds = [j for j in maps.jobs if j[0] == 'add']
    np.testing.assert_allclose(adds[-1][1].depth, 4.5)
    np.testing.assert_allclose(adds[-1][2], pose)
    assert ('clear',) not in maps.jobs  # metric from the first frame: nothing to restart
    report = out.scale_reports()[0]
    assert (report.state, report.units, report.scale) == ('fitted', 'metre', 3.0)


def test_the_camera_driving_map_to_odom_publishes_nothing_in_the_map_frame_before_it(
        node, monkeypatch):
    cam, out, maps, built = _rig(node, monkeypatch, scale_source='fixed',
                                 publish_map_to_odom=True, map_frame='map')
    out.publish(Output(cam, _result(0), None))
    report = out.scale_reports()[0]
    if HAVE_TF2:  # no TF read (not subscribed): no base_frame -> camera, map -> odom waits
        assert len(cam.track) == 0 and not maps.jobs
        assert [n for n, _, _ in built] == ['camera_info']
        assert report.frame == 'withheld until map -> odom is set'
        assert report.map_to_odom.startswith('waiting for base_frame -> camera')
        assert report.base == 'unknown: not subscribed to TF'
    else:  # no tf2_ros: no map -> odom; the camera goes on as an island, said so
        assert len(cam.track) == 1 and report.map_to_odom.startswith('unavailable')
        assert report.base == 'not needed'


def test_several_cameras_keep_their_islands_but_the_driving_one_publishes_in_map():
    params = parse({'camera_topics': ['/a', '/b'], 'camera_names': ['front', 'rear'],
                    'publish_map_to_odom': True, 'map_frame': 'map',
                    'map_to_odom_camera': 'rear'})
    cams = [CameraStream(i, n, f'/{n}', None, 10) for i, n in enumerate(['front', 'rear'])]
    assert [camera_frames(params, cams, c)[0] for c in cams] == ['map_front', 'map']
    assert driving_camera(params, ['front', 'rear']) == 1
    assert driving_camera(parse({**{'camera_topics': ['/a', '/b']}}), ['a', 'b']) is None
    with pytest.raises(ParamError, match="map_to_odom_camera='left'.*front"):
        driving_camera(parse({'camera_topics': ['/a', '/b'], 'publish_map_to_odom': True,
                              'map_to_odom_camera': 'left'}), ['front', 'rear'])
    assert depth_topics(params, ['front', 'rear']) == ['front/depth_registered/image_rect',
                                                       'rear/depth_registered/image_rect']
    with pytest.raises(ParamError, match='one topic per camera_topics entry'):
        parse({'depth_topics': ['/a_depth', '/b_depth']})


def test_diagnostics_show_the_scale_and_warn_where_a_source_cannot_run(node):
    params = parse({'scale_source': 'odometry'})
    feed = ScaleFeed(params, ['camera'], 14, node.get_logger())
    cam = CameraStream(0, 'camera', '/image', None, window=10)
    cam.counters.on_received(0.0)
    status = status_of(diagnostics.build(diagnostics.NodeInfo(hardware_id='cpu'), [cam],
                                         params, Time(), 0.0, scales=feed.reports()),
                       diagnostics.camera_status_name('/lingbot_node', 'camera'))
    level, message, values = status
    for key in ('scale_source', 'scale_state', 'scale', 'scale_sigma', 'scale_age_s',
                'scale_samples', 'scale_residual_rms_m', 'units', 'output_frame',
                'base_transform', 'map_to_odom'):
        assert key in values, key
    assert values['scale_source'] == 'odometry' and values['scale'] == 'n/a'
    if HAVE_TF2:
        assert level == 0 and values['scale_state'] == 'waiting for motion'
        assert feed.fallbacks == []
    else:
        assert level == 1 and 'unavailable' in message and values['scale_state'] == 'unavailable'
        assert feed.fallbacks and 'tf2_ros' in feed.fallbacks[0]
