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

"""TF as the node reads it: lookups that never wait, and who else broadcasts map -> odom."""

import os
import uuid

from conftest import dds_domain
from lingbot_ros.ros.frames import same_gid, tf2_missing
import numpy as np
import pytest
import rclpy
from rclpy.context import Context

DOMAIN = dds_domain(145)
try:
    import tf2_ros  # noqa: F401
    HAVE_TF2 = True
except ImportError:
    HAVE_TF2 = False
NEEDS_TF2 = pytest.mark.skipif(not HAVE_TF2, reason='tf2_ros is not installed (it comes with '
                               'a ROS 2 distribution; ../shared/ros-distro builds it)')


def test_tf2_missing_says_why_exactly_where_it_cannot_be_imported():
    reason = tf2_missing()
    assert (reason is None) == HAVE_TF2
    if reason is not None:
        assert 'tf2_ros is not installed' in reason


def test_publisher_gids_match_across_padding():
    gid = bytes(range(16))
    assert same_gid(gid, gid + bytes(8)) and not same_gid(gid, bytes(16))
    assert not same_gid(b'', gid)


@pytest.fixture
def nodes():
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN)
    tag = uuid.uuid4().hex[:8]
    ours = rclpy.create_node(f'frames_{tag}', context=context)
    other = rclpy.create_node(f'slam_{tag}', context=context)
    yield ours, other
    ours.destroy_node()
    other.destroy_node()
    rclpy.shutdown(context=context)


def _transform(parent, child, stamp_ns, x):
    from geometry_msgs.msg import TransformStamped
    t = TransformStamped()
    t.header.frame_id, t.child_frame_id = parent, child
    t.header.stamp.sec, t.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    t.transform.translation.x = float(x)
    t.transform.rotation.w = 1.0
    return t


@NEEDS_TF2
def test_lookups_read_the_buffer_without_waiting(nodes):
    from lingbot_ros.ros.frames import TfFrames
    from tf2_msgs.msg import TFMessage
    ours, _ = nodes
    frames = TfFrames(ours, dynamic=True, group=None)
    frames._on_static(TFMessage(transforms=[_transform('base_link', 'cam', 0, 0.3)]))
    lever, why = frames.lookup('base_link', 'cam')
    assert why == '' and lever[0, 3] == pytest.approx(0.3)
    frames._on_tf(TFMessage(transforms=[_transform('odom', 'base_link', 10**9, 1.0),
                                        _transform('odom', 'base_link', 2 * 10**9, 2.0)]), {})
    at, _ = frames.lookup('odom', '/base_link', 1_500_000_000)  # a leading slash is ignored
    np.testing.assert_allclose(at[:3, 3], [1.5, 0.0, 0.0])
    missing, why = frames.lookup('odom', 'base_link', 3 * 10**9)  # after the newest: no guess
    assert missing is None and 'odom -> base_link' in why
    assert frames.lookup('map', 'cam')[0] is None
    frames.destroy()


@NEEDS_TF2
def test_another_node_broadcasting_the_watched_edge_is_named(nodes):
    from lingbot_ros.ros.frames import TfFrames
    from tf2_msgs.msg import TFMessage
    ours, other = nodes
    mine = ours.create_publisher(TFMessage, '/tf', 10)
    theirs = other.create_publisher(TFMessage, '/tf', 10)
    frames = TfFrames(ours, dynamic=True, group=None, watch=('map', 'odom'))
    gids = {e.node_name: bytes(e.endpoint_gid) for e in ours.get_publishers_info_by_topic('/tf')}
    edge = TFMessage(transforms=[_transform('map', 'odom', 10**9, 0.0)])
    frames._on_tf(edge, {'publisher_gid': {'data': gids[ours.get_name()]}})
    assert frames.foreign is None  # this node's own broadcast
    frames._on_tf(TFMessage(transforms=[_transform('odom', 'base_link', 10**9, 0.0)]),
                  {'publisher_gid': {'data': gids[other.get_name()]}})
    assert frames.foreign is None  # another edge
    frames._on_tf(edge, {'publisher_gid': {'data': gids[other.get_name()]}})
    assert frames.foreign == f'/{other.get_name()}'
    frames.destroy()
    ours.destroy_publisher(mine)
    other.destroy_publisher(theirs)
