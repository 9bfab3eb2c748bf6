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

"""
Frames a driver swapped, and depth on the colour input, over DDS.

One node process runs the tiny random-weight model on a small grid in a domain of its
own; this process publishes images and reads the poses and ``/diagnostics``. A frame a
little older than the newest is dropped and counted (``rejected_out_of_order``) and the
map goes on; only a jump back of more than ``reorder_window_s`` starts a new session
(``stamp_resets``). A depth image on the colour topic is refused under its own reason.
"""

import os
from pathlib import Path
import subprocess

from conftest import dds_domain, dds_env, node_executable, stop_group, TINY_NODE_YAML
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe, status_of
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import SetParameters
from sensor_msgs.msg import Image

DOMAIN = dds_domain(143)
ROOT = Path(__file__).resolve().parents[2]
NAME = 'lingbot_order'
TOPIC = '/order/image'
OVERRIDES = TINY_NODE_YAML + """    diagnostics_period: 0.2
    publish_tf: false
"""
MS = 1_000_000


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('order')
    extra = tmp / 'overrides.yaml'
    extra.write_text(OVERRIDES)
    log = open(tmp / 'node.log', 'w+')
    cmd = [str(node_executable()), '--ros-args', '--params-file',
           str(ROOT / 'config' / 'lingbot.yaml'), '--params-file', str(extra),
           '-r', f'__node:={NAME}', '-p', f"camera_topics:=['{TOPIC}']"]
    proc = subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('order_probe', domain_id=DOMAIN)
    rig = {'probe': probe, 'log': log, 'proc': proc,
           'image': probe.publisher(Image, TOPIC),
           'poses': probe.collect(PoseStamped, f'/{NAME}/pose'),
           'diag': probe.collect(DiagnosticArray, '/diagnostics')}
    ok = probe.wait_for_subscribers(rig['image'], 1, 90) and \
        probe.wait_for_publishers(f'/{NAME}/pose', 1, 30)
    assert ok, _log(rig)
    yield rig
    stop_group(proc)
    probe.close()
    log.close()


def _log(rig):
    rig['log'].flush()
    rig['log'].seek(0)
    return rig['log'].read()


def _image(stamp_ns, encoding='rgb8', size=3):
    msg = Image(height=48, width=64, encoding=encoding, step=64 * size)
    msg.data = np.random.default_rng(stamp_ns).integers(
        0, 256, 48 * 64 * size, dtype=np.uint8).tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = 'order_camera'
    return msg


def _send(rig, msgs):
    for m in msgs:
        rig['image'].publish(m)
        rig['probe'].spin_for(0.05)


def _stamp(msg):
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def _latest(rig):
    """Return the newest camera diagnostics of the node (key -> value), or {} before any."""
    for d in reversed(rig['diag']):
        s = status_of(d, f'/{NAME}: camera camera')
        if s is not None:
            return s[2]
    return {}


def _until(rig, key, value):
    """Wait until the camera's diagnostics say ``key: value``; return them."""
    assert rig['probe'].spin_until(lambda: _latest(rig).get(key) == str(value), 30), \
        (key, value, _latest(rig), _log(rig)[-3000:])
    return _latest(rig)


def _wait_poses(rig, count):
    assert rig['probe'].spin_until(lambda: len(rig['poses']) >= count, 60), _log(rig)[-3000:]


def _set(rig, value):
    req = SetParameters.Request(parameters=[Parameter(
        name='reorder_window_s', value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE,
                                                      double_value=value))])
    res = rig['probe'].call(SetParameters, f'/{NAME}/set_parameters', req)
    assert res is not None
    return res.results[0]


def test_a_frame_one_millisecond_early_is_dropped_and_the_map_goes_on(rig):
    base = 10_000 * MS
    stamps = [base + i * 100 * MS for i in range(3)]
    _send(rig, [_image(s) for s in stamps])
    _wait_poses(rig, 3)
    early = stamps[-1] - 1 * MS  # a driver that swapped two frames
    _send(rig, [_image(early), _image(stamps[-1] + 100 * MS)])
    _wait_poses(rig, 4)
    values = _until(rig, 'frames_processed', 4)
    assert [_stamp(p) for p in rig['poses']] == stamps + [stamps[-1] + 100 * MS]
    assert values['stamp_resets'] == '0' and values['session_resets'] == '0'
    assert values['rejected_out_of_order'] == '1' and values['frames_rejected'] == '1'
    assert 'dropped as out of order' in _log(rig)


def test_a_jump_back_beyond_the_window_starts_a_new_session(rig):
    newest = _stamp(rig['poses'][-1])
    back = newest - 2_000 * MS  # a looped bag: more than reorder_window_s (0.5 s)
    _send(rig, [_image(back + i * 100 * MS) for i in range(3)])
    _wait_poses(rig, 7)
    values = _until(rig, 'frames_processed', 7)
    assert values['stamp_resets'] == '1' and values['rejected_out_of_order'] == '1'
    assert 'stamp jumped backwards by 2.000 s' in _log(rig)


def test_the_window_changes_at_runtime(rig):
    refused = _set(rig, -1.0)
    assert not refused.successful and 'reorder_window_s=-1.0' in refused.reason
    assert _set(rig, 0.0).successful  # every jump back resets from the next frame
    _send(rig, [_image(_stamp(rig['poses'][-1]) - 1 * MS)])
    values = _until(rig, 'stamp_resets', 2)
    assert values['rejected_out_of_order'] == '1'
    assert _set(rig, 0.5).successful


@pytest.mark.parametrize('encoding,size', [('16UC1', 2), ('32FC1', 4)])
def test_a_depth_image_on_the_colour_topic_is_refused_and_said_to_be_one(rig, encoding, size):
    before = _latest(rig)
    count = int(before.get('rejected_depth_image', '0'))
    _send(rig, [_image(_stamp(rig['poses'][-1]) + 100 * MS, encoding, size)])
    after = _until(rig, 'rejected_depth_image', count + 1)
    assert after['frames_processed'] == before['frames_processed']
    assert 'looks like a depth topic' in _log(rig)
