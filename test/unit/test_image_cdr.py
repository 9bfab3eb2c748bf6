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

"""Images read from their serialized bytes equal rclpy's deserialized messages."""

from hypothesis import given, settings
from hypothesis import strategies as st
from lingbot_ros.ros.convert import image_to_rgb, TruncatedData
from lingbot_ros.ros.image_cdr import ImageView, NotPlainCdr, parse_image
from lingbot_ros.ros.intake import read_image
import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message
from sensor_msgs.msg import Image


def _image(frame_id, encoding, height, width, pad, seed, bigendian=0):
    channels = {'rgb8': 3, 'mono8': 1, 'bgra8': 4, 'mono16': 2}[encoding]
    step = width * channels + pad
    msg = Image(height=height, width=width, encoding=encoding, step=step,
                is_bigendian=bigendian)
    msg.header.frame_id = frame_id
    msg.header.stamp.sec, msg.header.stamp.nanosec = seed % 2**31, (seed * 7919) % 10**9
    msg.data = np.random.default_rng(seed).integers(0, 256, step * height,
                                                    dtype=np.uint8).tobytes()
    return msg


@settings(max_examples=80, deadline=None)
@given(frame_id=st.text(max_size=12),
       encoding=st.sampled_from(['rgb8', 'mono8', 'bgra8', 'mono16']),
       height=st.integers(0, 9), width=st.integers(0, 9), pad=st.integers(0, 5),
       seed=st.integers(0, 2**40), bigendian=st.integers(0, 1))
def test_every_field_equals_the_message(frame_id, encoding, height, width, pad, seed,
                                        bigendian):
    """Strings of every length and alignment, empty images, padded rows."""
    sample = serialize_message(_image(frame_id, encoding, height, width, pad, seed, bigendian))
    msg = deserialize_message(sample, Image)  # what rclpy would have handed the callback
    view = parse_image(sample)
    assert isinstance(view, ImageView)
    assert (view.header.stamp.sec, view.header.stamp.nanosec) == \
        (msg.header.stamp.sec, msg.header.stamp.nanosec)
    assert view.header.frame_id == msg.header.frame_id
    assert (view.height, view.width, view.encoding, view.is_bigendian, view.step) == \
        (msg.height, msg.width, msg.encoding, msg.is_bigendian, msg.step)
    assert bytes(view.data) == bytes(msg.data)


def test_the_pixels_are_viewed_not_copied_and_convert_alike():
    msg = _image('camera_optical_frame', 'rgb8', 48, 64, 0, 3)
    sample = serialize_message(msg)
    view = parse_image(sample)
    assert view.data.obj is sample  # a view of the sample's own bytes
    np.testing.assert_array_equal(image_to_rgb(view), image_to_rgb(msg))


def test_other_encapsulations_and_broken_samples(monkeypatch):
    sample = serialize_message(_image('f', 'mono8', 4, 4, 0, 1))
    with pytest.raises(NotPlainCdr, match='encapsulation 0000'):
        parse_image(b'\x00\x00' + sample[2:])  # big-endian CDR: not read here
    for cut in (3, 10, 30, len(sample) - 1):
        with pytest.raises(NotPlainCdr):
            parse_image(sample[:cut])
    # the intake falls back to rclpy for what the reader does not take ...
    from lingbot_ros.ros import intake

    def refuse(_):
        raise NotPlainCdr('say, big-endian')
    monkeypatch.setattr(intake, 'parse_image', refuse)
    msg = read_image(sample)
    assert isinstance(msg, Image) and msg.header.frame_id == 'f' and msg.height == 4
    # ... and rejects what is no image at all
    with pytest.raises(TruncatedData):
        read_image(b'\x00\x00\x00\x00\x01')
