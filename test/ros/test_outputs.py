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


"""The output thread's sink builds the large messages only while someone subscribes."""

import os
import uuid

from conftest import dds_domain
from lingbot_ros.ros import messages
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.outputs import CameraPublishers, Outputs
from lingbot_ros.ros.worker import Output
from lingbot_ros.streaming.parameters import parse
from lingbot_ros.streaming.result import FrameResult, FrameType
import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, PointCloud2

DOMAIN = dds_domain(60)


@pytest.fixture
def rig(monkeypatch):
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN)
    node = rclpy.create_node(f'outputs_{uuid.uuid4().hex[:8]}', context=context)
    params = parse({'publish_depth': True, 'publish_points': True})
    cam = CameraStream(0, 'cam', '/cam/image', None, window=10)
    out = Outputs(node, lambda: params, lambda: [cam], lambda: None, lambda: False)
    out.pubs = [CameraPublishers(node, '~/')]
    built = []

    def counting(name, real):
        def build(*args, **kwargs):
            built.append(name)
            return real(*args, **kwargs)
        return build
    for name in ('depth_image', 'point_cloud'):
        monkeypatch.setattr(messages, name, counting(name, getattr(messages, name)))
    yield node, cam, out, built
    node.destroy_node()
    rclpy.shutdown(context=context)


def _result(stamp):
    k = np.array([[20.0, 0, 8], [0, 20.0, 6], [0, 0, 1]])
    return FrameResult(stamp_ns=stamp, index=0, frame_type=FrameType.KEYFRAME,
                       pose_c2w=np.eye(4), pose_enc=np.zeros(9, np.float32), intrinsics=k,
                       intrinsics_model=k, input_hw=(12, 16), model_hw=(12, 16),
                       depth=np.ones((12, 16), np.float32),
                       confidence=np.full((12, 16), 2.0, np.float32),
                       colors=np.zeros((12, 16, 3), np.uint8))


def test_depth_and_points_are_built_only_while_subscribed(rig):
    node, cam, out, built = rig
    out.publish(Output(cam, _result(1), None))  # no thread started: sent inline
    assert built == [] and cam.counters.processed == 1
    assert [s for s, _ in cam.track.records()] == [1]  # the track is kept all the same
    qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
    name = node.get_fully_qualified_name()
    node.create_subscription(Image, f'{name}/depth', lambda m: None, qos)
    node.create_subscription(PointCloud2, f'{name}/points', lambda m: None, qos)
    out.publish(Output(cam, _result(2), None))
    assert built == ['depth_image', 'point_cloud'] and cam.counters.processed == 2


def test_the_publishers_add_no_event_handlers_to_the_wait_set(rig):
    """Every waitable costs the executor Python on each turn; a publisher's are not needed."""
    node, _, out, _ = rig
    before = len(list(node.waitables))
    extra = CameraPublishers(node, '~/second/')
    assert len(list(node.waitables)) == before
    extra.destroy(node)
    node.create_publisher(Image, '~/plain', 1)  # rclpy's default: event handlers
    assert len(list(node.waitables)) > before


def test_a_camera_may_report_a_warning_and_then_an_error(rig):
    """Two severities from one camera: rclpy refuses them at one call site; report must not."""
    from lingbot_ros.ros.reasons import Event, Level, Rejection
    _, cam, out, _ = rig
    out.report(cam, Rejection.SIZE, 'odd frame', Level.WARN)
    out.report(cam, Event.PUBLISH_FAILED, 'publish failed', Level.ERROR)
    out.report(None, Event.WORKER_ERROR, 'worker', Level.WARN)
