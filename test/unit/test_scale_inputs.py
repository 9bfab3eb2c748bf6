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

"""The scale sources' inputs: registered depth images and an odometry topic, paired by stamp."""

from geometry_msgs.msg import Quaternion
from lingbot_ros.ros.scale_inputs import (depth_pixels, DepthInbox, ODOMETRY_MAX_GAP_S,
                                          OdometryInbox)
from lingbot_ros.streaming.trajectory import matrix_to_quat
from nav_msgs.msg import Odometry
import numpy as np
import pytest
from sensor_msgs.msg import Image
from synthetic_robot import rot_z


def _depth(values, encoding, stamp_ns=0, big_endian=False, pad=0):
    values = np.asarray(values)
    h, w = values.shape
    dtype = {'16UC1': 'u2', 'mono16': 'u2', '32FC1': 'f4'}.get(encoding, 'u2')
    raw = values.astype(('>' if big_endian else '<') + dtype).tobytes()
    row = w * np.dtype(dtype).itemsize
    data = b''.join(raw[r * row:(r + 1) * row] + bytes(pad) for r in range(h))
    msg = Image(height=h, width=w, encoding=encoding, step=row + pad,
                is_bigendian=int(big_endian))
    msg.data = data
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    return msg


@pytest.mark.parametrize('big_endian', [False, True])
@pytest.mark.parametrize('pad', [0, 6])
def test_depth_images_in_millimetres_and_metres(big_endian, pad):
    mm = np.array([[0, 1000, 2500], [65535, 20, 7]])
    pixels, unit = depth_pixels(_depth(mm, '16UC1', big_endian=big_endian, pad=pad))
    assert unit == 1e-3 and np.array_equal(pixels, mm) and pixels.dtype == np.uint16
    metres = np.array([[0.5, np.nan], [2.0, 0.0]], np.float32)
    pixels, unit = depth_pixels(_depth(metres, '32FC1', big_endian=big_endian, pad=pad))
    assert unit == 1.0 and np.array_equal(pixels, metres, equal_nan=True)


def test_depth_images_that_cannot_be_read_are_refused_and_counted():
    inbox = DepthInbox()
    with pytest.raises(ValueError, match='depth encoding .rgb8.'):
        depth_pixels(_depth(np.zeros((2, 2)), 'rgb8'))
    short = _depth(np.zeros((4, 4)), '16UC1')
    short.data = bytes(10)
    assert not inbox.put(short) and inbox.rejected == 1 and 'expected at least' in \
        inbox.last_error
    assert inbox.take(0, 10**9) is None


def test_a_depth_image_is_paired_by_the_nearest_stamp_within_the_tolerance():
    inbox = DepthInbox(capacity=4)
    for k in range(6):  # the first two fall out of the bounded inbox
        assert inbox.put(_depth(np.full((2, 2), 1000 * (k + 1)), '16UC1', stamp_ns=k * 100))
    assert inbox.take(0, 50) is None and inbox.take(150, 40) is None
    np.testing.assert_allclose(inbox.take(310, 20), np.full((2, 2), 4.0))  # mm -> metres
    assert inbox.take(200, 20) is None  # older than the one taken: gone
    np.testing.assert_allclose(inbox.take(500, 0), np.full((2, 2), 6.0))


def _odometry(stamp_ns, pose, parent='odom', child='base_link'):
    msg = Odometry()
    msg.header.frame_id, msg.child_frame_id = parent, child
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    p = msg.pose.pose.position
    p.x, p.y, p.z = (float(v) for v in pose[:3, 3])
    q = matrix_to_quat(pose[:3, :3])
    msg.pose.pose.orientation = Quaternion(x=float(q[0]), y=float(q[1]), z=float(q[2]),
                                           w=float(q[3]))
    return msg


def _pose(x, yaw):
    out = np.eye(4)
    out[:3, :3], out[0, 3] = rot_z(yaw), x
    return out


def test_odometry_is_read_at_a_frame_stamp_between_two_messages():
    inbox = OdometryInbox('odom', 'base_link')
    for k in range(5):
        assert inbox.put(_odometry(10**9 + k * 10**8, _pose(k * 0.1, k * 0.2)))
    got = inbox.at(10**9 + 150_000_000)
    np.testing.assert_allclose(got, _pose(0.15, 0.3), atol=1e-12)
    np.testing.assert_allclose(inbox.at(10**9 + 4 * 10**8), _pose(0.4, 0.8), atol=1e-12)
    assert inbox.at(10**9 - 1) is None and inbox.at(10**9 + 4 * 10**8 + 1) is None
    gap = int((ODOMETRY_MAX_GAP_S + 0.1) * 1e9)
    inbox.put(_odometry(10**9 + 4 * 10**8 + gap, _pose(1.0, 0.0)))
    assert inbox.at(10**9 + 4 * 10**8 + gap // 2) is None  # a gap is not bridged


def test_odometry_of_other_frames_or_going_back_is_refused_and_said():
    inbox = OdometryInbox('odom', 'base_link')
    assert not inbox.put(_odometry(1, np.eye(4), child='base_footprint'))
    assert 'expected base_link in odom' in inbox.last_error
    assert not inbox.put(_odometry(1, np.eye(4), parent='map'))
    assert inbox.put(_odometry(5, np.eye(4), parent='', child=''))  # empty: taken as meant
    assert not inbox.put(_odometry(5, np.eye(4))) and 'not after' in inbox.last_error
    bad = _odometry(9, np.eye(4))
    bad.pose.pose.orientation = Quaternion(x=0.0, y=0.0, z=0.0, w=0.0)
    assert not inbox.put(bad) and inbox.rejected == 4 and inbox.received == 1
