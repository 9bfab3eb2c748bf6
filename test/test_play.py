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

"""lingbot-ros-play publishes folders, videos and bags; lingbot-ros-demo runs end to end."""

import os
from pathlib import Path
import subprocess
import sys

import cv2
from lingbot_ros.ros.probe import Probe
from lingbot_ros.tools import scene
import numpy as np
import pytest
from sensor_msgs.msg import Image

DOMAIN = 53
BIN = Path(sys.executable).parent


def _env():
    return dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
                ROS_DOMAIN_ID=str(DOMAIN), PYTHONUNBUFFERED='1')


@pytest.fixture(scope='module')
def probe():
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    p = Probe('play_probe', domain_id=DOMAIN)
    yield p
    p.close()


def _play(probe, topic, args, expect):
    got = probe.collect(Image, topic)
    proc = subprocess.Popen([str(BIN / 'lingbot-ros-play')] + args + [
        '--topic', topic, '--rate', '30', '--quiet', '--wait', '30'], env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe.spin_until(lambda: len(got) >= expect and proc.poll() is not None, 60)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    probe.spin_for(0.3)
    return got


def _rgb(msg):
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)


def test_scene_is_deterministic_and_moves():
    a = list(scene.frames(3, 64, 48))
    b = list(scene.frames(3, 64, 48))
    assert all(np.array_equal(x.image, y.image) for x, y in zip(a, b))
    assert not np.array_equal(a[0].image, a[2].image)
    assert a[0].image.std() > 10  # textured, not flat
    assert np.linalg.norm(a[2].pose_c2w[:3, 3] - a[0].pose_c2w[:3, 3]) > 0.5


def test_folder_is_published_in_order_with_its_pixels(probe, tmp_path):
    folder = scene.write(tmp_path / 'seq', 4, 64, 48)
    assert (folder / 'groundtruth.tum').is_file()
    got = _play(probe, '/play/folder', [str(folder)], 4)
    assert len(got) == 4
    files = sorted(folder.glob('*.png'))
    for msg, path in zip(got, files):
        assert msg.encoding == 'rgb8' and msg.header.frame_id == 'camera_optical_frame'
        np.testing.assert_array_equal(_rgb(msg), cv2.imread(str(path))[..., ::-1])
    stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in got]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4


def test_video_with_count_and_loop(probe, tmp_path):
    path = tmp_path / 'clip.avi'
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 10, (64, 48))
    for f in scene.frames(3, 64, 48):
        writer.write(np.ascontiguousarray(f.image[..., ::-1]))
    writer.release()
    got = _play(probe, '/play/video', [str(path), '--loop', '--count', '7'], 7)
    assert len(got) == 7 and (got[0].width, got[0].height) == (64, 48)
    # the loop starts again: frame 4 is frame 1 (MJPG is deterministic per frame)
    np.testing.assert_array_equal(_rgb(got[3]), _rgb(got[0]))


def test_bag_is_republished_with_its_stamps(probe, tmp_path):
    from rosbags.rosbag2 import Writer
    from rosbags.typesys import get_typestore, Stores
    store = get_typestore(Stores.ROS2_HUMBLE)
    Img = store.types['sensor_msgs/msg/Image']
    Hdr = store.types['std_msgs/msg/Header']
    Time = store.types['builtin_interfaces/msg/Time']
    frames = list(scene.frames(3, 32, 24))
    bag = tmp_path / 'bag'
    stamps = [5_000_000_000 + i * 250_000_000 for i in range(3)]
    with Writer(bag, version=8) as writer:
        conn = writer.add_connection('/cam/image_raw', Img.__msgtype__, typestore=store)
        for f, stamp in zip(frames, stamps):
            bgr = np.ascontiguousarray(f.image[..., ::-1])
            msg = Img(header=Hdr(stamp=Time(sec=stamp // 10**9, nanosec=stamp % 10**9),
                                 frame_id='cam'),
                      height=24, width=32, encoding='bgr8', is_bigendian=0, step=96,
                      data=bgr.reshape(-1))
            writer.write(conn, stamp, store.serialize_cdr(msg, Img.__msgtype__))
    got = _play(probe, '/play/bag', [str(bag), '--source-stamps'], 3)
    assert [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in got] == stamps
    for msg, f in zip(got, frames):
        np.testing.assert_array_equal(_rgb(msg), f.image)


def test_bad_arguments_are_refused():
    proc = subprocess.run([str(BIN / 'lingbot-ros-play'), 'scene', '--rate', '0'], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and '--rate=0.0 is invalid' in proc.stderr


def test_demo_streams_the_scene_through_the_node_and_exits_zero():
    env = dict(_env(), ROS_DOMAIN_ID=str(DOMAIN + 1))
    proc = subprocess.run([str(BIN / 'lingbot-ros-demo'), '--frames', '6', '--rate', '5',
                           '--image-size', '56', '--scale-frames', '2', '--timeout', '120'],
                          env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert 'TINY RANDOM-WEIGHT' in out
    poses = [line for line in out.splitlines() if line.startswith('pose ')]
    assert len(poses) == 6 and poses[-1].startswith('pose   6/6')
    assert 'final diagnostics' in out and 'processed 6' in out
    assert '[WARN] node: random weights' in out
