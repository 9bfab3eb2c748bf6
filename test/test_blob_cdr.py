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

"""Image and PointCloud2 assembled around their data read back as rclpy's own messages."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.ros import blob_cdr, messages
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image, PointCloud2, PointField

frames = st.text(alphabet='abcdefghijklmnopqrstuvwxyz_/0123456789', max_size=12)


@settings(max_examples=60, deadline=None)
@given(frame=frames, encoding=st.sampled_from(['32FC1', 'mono8', 'rgb8', '']),
       size=st.integers(0, 41))
def test_an_image_reads_back_whatever_the_string_lengths(frame, encoding, size):
    data = np.arange(size, dtype=np.uint8)
    msg = Image(height=1, width=size, encoding=encoding, step=size)
    msg.header.frame_id = frame
    msg.header.stamp.sec, msg.header.stamp.nanosec = 1_800_000_000, 99
    got = blob_cdr.blob_cdr(msg, data)
    msg.data = data.tobytes()
    assert deserialize_message(got, Image) == msg
    assert len(got) == len(serialize_message(msg))


@settings(max_examples=60, deadline=None)
@given(frame=frames, fields=st.lists(frames, min_size=1, max_size=5), points=st.integers(0, 9),
       dense=st.booleans())
def test_a_cloud_reads_back_with_its_fields_and_is_dense(frame, fields, points, dense):
    # the data sits between the fields' strings and is_dense: every alignment before it
    fs = [PointField(name=n, offset=4 * i, datatype=PointField.FLOAT32, count=1)
          for i, n in enumerate(fields)]
    data = np.random.default_rng(points).random((points, len(fs)), dtype=np.float32)
    msg = PointCloud2(height=1, width=points, fields=fs, point_step=4 * len(fs),
                      row_step=4 * len(fs) * points, is_dense=dense)
    msg.header.frame_id = frame
    got = blob_cdr.blob_cdr(msg, data)
    msg.data = data.tobytes()
    assert deserialize_message(got, PointCloud2) == msg


def test_the_message_must_come_without_its_data():
    with pytest.raises(ValueError, match='empty data'):
        blob_cdr.blob_cdr(Image(data=b'\x01'), np.zeros(3, np.uint8))


def test_where_the_assembly_does_not_hold_the_message_goes_out(monkeypatch):
    assert blob_cdr.assembly_holds(Image) and blob_cdr.assembly_holds(PointCloud2)
    blob = messages.Blob(Image(height=1, width=2, encoding='mono8', step=2),
                         np.array([7, 9], np.uint8))
    assert isinstance(blob.outgoing(), bytes)
    monkeypatch.setattr(blob_cdr, 'assembly_holds', lambda kind: False)
    sent = blob.outgoing()
    assert isinstance(sent, Image) and bytes(sent.data) == b'\x07\x09'
    assert len(blob.message.data) == 0  # the blob's own message is left as it was
