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

"""~/path assembled from poses serialized once reads back as the Path rclpy would send."""

from geometry_msgs.msg import PoseStamped
from hypothesis import given, settings, strategies as st
from lingbot_ros.ros import path_cdr
from nav_msgs.msg import Path
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from std_msgs.msg import Header

frames = st.text(alphabet='abcdefghijklmnopqrstuvwxyz_/0123456789', max_size=12)


def _pose(i: int, frame: str) -> PoseStamped:
    pose = PoseStamped(header=Header(frame_id=frame))
    pose.header.stamp.sec, pose.header.stamp.nanosec = 1_800_000_000 + i, 7 * i
    p, q = pose.pose.position, pose.pose.orientation
    p.x, p.y, p.z = 0.1 * i, -0.2 * i, 1.5 + i
    q.x, q.y, q.z, q.w = 0.1, -0.2, 0.3, 0.9
    return pose


@settings(max_examples=60, deadline=None)
@given(header_frame=frames, pose_frames=st.lists(frames, max_size=6))
def test_assembled_bytes_equal_rclpys_for_every_string_alignment(header_frame, pose_frames):
    poses = [_pose(i, f) for i, f in enumerate(pose_frames)]
    header = Header(frame_id=header_frame)
    header.stamp.sec, header.stamp.nanosec = 1_800_000_100, 99
    want = serialize_message(Path(header=header, poses=poses))
    got = path_cdr.path_cdr(header, [path_cdr.pose_cdr(p) for p in poses])
    # rclpy leaves alignment padding uninitialised: same length, same message read back
    assert len(got) == len(want)
    assert deserialize_message(got, Path) == Path(header=header, poses=poses)


@pytest.mark.parametrize('frame', ['', 'lingbot_map', 'lingbot_map_cam0', 'm'])
def test_the_runtime_check_passes_with_this_rmw(frame):
    assert path_cdr.assembly_holds(frame)


def test_a_long_path_is_one_copy_of_each_pose():
    poses = [path_cdr.pose_cdr(_pose(i, 'lingbot_map')) for i in range(2000)]
    out = path_cdr.path_cdr(Header(frame_id='lingbot_map'), poses)
    back = deserialize_message(out, Path)
    assert len(back.poses) == 2000 and back.poses[-1].pose.position.z == 1.5 + 1999
