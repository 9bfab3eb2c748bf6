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
A namespaced lingbot_node over DDS, driven as a lifecycle manager and ``ros2 param`` do.

One child process (``/robot1/lingbot_node``, compressed input, ``autostart: false``):
every parameter answers over GetParameters (what ``ros2 param dump`` asks), refusals are
in our words, status names carry the node's fully qualified name, start-up time leaves
out the wait for the manager, a decompression bomb is refused from its header while the
good frames around it are processed, cleanup takes the model's WARN away (and its
process: this node runs the model in one of its own), and the shutdown transition ends
the process.
"""

import os
from pathlib import Path
import subprocess
import time

from conftest import (dds_domain, dds_env, jpeg_declaring, node_executable, png_bomb,
                      stop_group, TINY_NODE_YAML)
import cv2
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from lingbot_ros.ros.probe import Probe, status_of
from lingbot_ros.streaming.parameters import SPECS
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, ListParameters, SetParameters
from sensor_msgs.msg import CompressedImage

DOMAIN = dds_domain(121)
ROOT = Path(__file__).resolve().parents[2]
NODE = '/robot1/lingbot_node'
PARAMS = TINY_NODE_YAML + """    diagnostics_period: 0.2
    input_transport: compressed
    autostart: false
"""
WAIT_S = 1.5  # how long the 'manager' keeps the node waiting in unconfigured


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('boundaries')
    (tmp / 'p.yaml').write_text(PARAMS)
    log = open(tmp / 'node.log', 'w+')
    cmd = [str(node_executable()), '--ros-args', '--params-file', str(tmp / 'p.yaml'),
           '-r', '__ns:=/robot1', '-r', 'image:=cam']
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('boundaries_probe', domain_id=DOMAIN)
    rig = {'probe': probe, 'proc': proc, 'log': log, 'started': started,
           'diag': probe.collect(DiagnosticArray, '/diagnostics'),
           'poses': probe.collect(PoseStamped, f'{NODE}/pose'),
           'jpeg': probe.publisher(CompressedImage, '/robot1/cam/compressed')}
    yield rig
    stop_group(proc)
    probe.close()
    log.close()


def _read(rig):
    rig['log'].flush()
    rig['log'].seek(0)
    return rig['log'].read()


def _transition(rig, transition):
    req = ChangeState.Request(transition=Transition(id=transition))
    res = rig['probe'].call(ChangeState, f'{NODE}/change_state', req, 60)
    assert res is not None and res.success, _read(rig)


def _status(rig, component, since=0, predicate=lambda s: True):
    """Return the newest status '<NODE>: <component>' after index ``since`` that fits."""
    def find():
        for d in reversed(rig['diag'][since:]):
            s = status_of(d, f'{NODE}: {component}')
            if s is not None and predicate(s):
                return s
        return None
    rig['probe'].spin_until(lambda: find() is not None, 20)
    return find()


def _peak_rss_mb(pid):
    for line in Path(f'/proc/{pid}/status').read_text().splitlines():
        if line.startswith('VmHWM:'):
            return int(line.split()[1]) / 1024
    return float('nan')


def _jpeg(stamp_ns, seed):
    img = np.random.default_rng(seed).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    msg = CompressedImage(format='jpeg', data=cv2.imencode('.jpg', img)[1].tobytes())
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
    return msg


def test_every_parameter_has_a_value_over_get_parameters(rig):
    probe = rig['probe']
    listed = probe.call(ListParameters, f'{NODE}/list_parameters',
                        ListParameters.Request(), 90)
    assert listed is not None, _read(rig)
    names = list(listed.result.names)
    assert {s.name for s in SPECS} <= set(names)
    got = probe.call(GetParameters, f'{NODE}/get_parameters',
                     GetParameters.Request(names=names))
    # rclpy answers nothing for the whole request if one of them has no value
    assert len(got.values) == len(names)
    assert all(v.type != ParameterType.PARAMETER_NOT_SET for v in got.values)
    one = probe.call(GetParameters, f'{NODE}/get_parameters',
                     GetParameters.Request(names=['camera_names']))
    assert one.values[0].type == ParameterType.PARAMETER_STRING_ARRAY
    assert list(one.values[0].string_array_value) == []


def test_refusals_name_the_parameter_the_value_and_what_is_allowed(rig):
    def set_(name, **value):
        req = SetParameters.Request(parameters=[Parameter(name=name,
                                                          value=ParameterValue(**value))])
        return rig['probe'].call(SetParameters, f'{NODE}/set_parameters', req).results[0]
    r = set_('sliding_window', type=ParameterType.PARAMETER_INTEGER, integer_value=8)
    assert not r.successful and 'sliding_window=8' in r.reason
    assert 'read-only' in r.reason and 'restart' in r.reason and 'Trying' not in r.reason
    r = set_('keyframe_interval', type=ParameterType.PARAMETER_STRING, string_value='two')
    assert not r.successful and "keyframe_interval='two'" in r.reason
    assert 'an integer in [1, 1000]' in r.reason and 'Wrong parameter type' not in r.reason
    r = set_('drop_rate_warn', type=ParameterType.PARAMETER_INTEGER, integer_value=1)
    assert r.successful  # a whole number where a float is declared is still taken


def test_status_names_carry_the_fqn_and_the_wait_is_no_start_up_time(rig):
    probe = rig['probe']
    probe.spin_for(WAIT_S)  # the node waits in unconfigured, as for a lifecycle manager
    node = _status(rig, 'node')
    assert node is not None and node[2]['state'] == 'unconfigured'
    _transition(rig, Transition.TRANSITION_CONFIGURE)
    since = len(rig['diag'])
    cam = _status(rig, 'camera camera', since)
    assert cam is not None and 'inactive' in cam[1]
    assert cam[2]['topic'] == '/robot1/cam/compressed'  # resolved and remapped already
    _transition(rig, Transition.TRANSITION_ACTIVATE)
    node = _status(rig, 'node', len(rig['diag']), lambda s: s[2]['state'] == 'active')
    elapsed = time.monotonic() - rig['started']
    waited = float(node[2]['waited_unconfigured'].split()[0])
    startup = float(node[2]['startup'].split()[0])
    assert waited >= WAIT_S and startup <= elapsed - WAIT_S, node[2]


def test_a_decompression_bomb_is_refused_and_the_frames_around_it_processed(rig):
    probe = rig['probe']
    assert probe.wait_for_subscribers(rig['jpeg'], 1, 30)
    rss = _peak_rss_mb(rig['proc'].pid)
    good = [10_000_000_000 + i * 100_000_000 for i in range(6)]
    bombs = [CompressedImage(format='png', data=png_bomb()),
             CompressedImage(format='jpeg', data=jpeg_declaring())]
    for i, stamp in enumerate(good):
        rig['jpeg'].publish(_jpeg(stamp, i))
        probe.spin_for(0.05)
        if i in (2, 3):  # between good frames
            bomb = bombs[i - 2]
            bomb.header.stamp.sec = 10 + i
            bomb.header.stamp.nanosec = 250_000_000
            rig['jpeg'].publish(bomb)
    assert probe.spin_until(lambda: len(rig['poses']) >= len(good), 60), _read(rig)
    assert [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in rig['poses']] == good
    cam = _status(rig, 'camera camera', len(rig['diag']),
                  lambda s: s[2].get('rejected_too_large') == '2')
    assert cam is not None, _read(rig)
    assert _peak_rss_mb(rig['proc'].pid) - rss < 300  # decoded, one would be 2.7 GB
    assert 'refused before decoding' in _read(rig)


def test_cleanup_takes_the_model_warnings_away_and_shutdown_ends_the_process(rig):
    _transition(rig, Transition.TRANSITION_DEACTIVATE)
    _transition(rig, Transition.TRANSITION_CLEANUP)
    node = _status(rig, 'node', len(rig['diag']),
                   lambda s: s[2]['state'] == 'unconfigured')
    assert node is not None and 'random weights' not in node[1] and node[0] == 0, node
    _transition(rig, Transition.TRANSITION_UNCONFIGURED_SHUTDOWN)
    assert rig['proc'].wait(20) == 0
    log = _read(rig)
    assert 'finalized (lifecycle shutdown): the process exits' in log
    assert 'Traceback' not in log and '[ERROR]' not in log
