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
lingbot_node over DDS, in its own process: poses, diagnostics, services, bad input.

Two node processes (raw and compressed input) run the tiny random-weight model on a
small grid; this process publishes images and reads what comes back. DDS stays on
loopback in a domain of its own.
"""

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

import cv2
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe, status_of
from nav_msgs.msg import Odometry, Path as PathMsg
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_srvs.srv import Trigger

DOMAIN = 51
ROOT = Path(__file__).resolve().parents[1]
EXE = Path(sys.executable).with_name('lingbot_node')
RAW, COMP = 'lingbot_dds', 'lingbot_dds_jpeg'
OVERRIDES = """
/**:
  ros__parameters:
    scale_frames: 2
    image_size: 56
    qos_reliability: reliable
    qos_depth: 50
    queue_size: 32
    diagnostics_period: 0.3
    stall_error_s: 2.0
    publish_points: true
    publish_depth: true
    path_period: 0.0
    trajectory_dir: {traj}
"""
CAMERA_KEYS = ('frames_received', 'frames_processed', 'frames_dropped', 'frames_rejected',
               'keyframes', 'rollbacks', 'evictions', 'scale_pages', 'live_pages',
               'free_pages', 'special_tokens', 'special_pages', 'kv_used_mb',
               'kv_reserved_mb', 'window_index', 'input_rate_hz', 'processed_rate_hz',
               'step_ms_p50', 'step_ms_p99', 'latency_ms_p50', 'latency_ms_p99', 'backend',
               'dtype', 'device')


def _env():
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               ROS_DOMAIN_ID=str(DOMAIN), PYTHONUNBUFFERED='1')
    env.pop('ROS_STATIC_PEERS', None)
    return env


def _start(name, extra, tmp, log):
    cmd = [str(EXE), '--ros-args', '--params-file', str(ROOT / 'config' / 'lingbot.yaml'),
           '--params-file', str(extra), '-r', f'__node:={name}'] + [
        a for t in tmp for a in ('-p', t)]
    return subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('dds')
    extra = tmp / 'overrides.yaml'
    extra.write_text(OVERRIDES.format(traj=tmp / 'traj'))
    logs = {n: open(tmp / f'{n}.log', 'w+') for n in (RAW, COMP)}
    procs = {RAW: _start(RAW, extra, ["camera_topics:=['/dds/image']"], logs[RAW]),
             COMP: _start(COMP, extra, ["camera_topics:=['/dds/cam']",
                                        'input_transport:=compressed'], logs[COMP])}
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('dds_probe', domain_id=DOMAIN)
    rig = {'probe': probe, 'procs': procs, 'logs': logs, 'tmp': tmp,
           'image': probe.publisher(Image, '/dds/image'),
           'jpeg': probe.publisher(CompressedImage, '/dds/cam/compressed'),
           'poses': probe.collect(PoseStamped, f'/{RAW}/pose'),
           'odom': probe.collect(Odometry, f'/{RAW}/odom'),
           'info': probe.collect(CameraInfo, f'/{RAW}/camera_info'),
           'points': probe.collect(PointCloud2, f'/{RAW}/points'),
           'depth': probe.collect(Image, f'/{RAW}/depth'),
           'path': probe.collect(PathMsg, f'/{RAW}/path'),
           'jposes': probe.collect(PoseStamped, f'/{COMP}/pose'),
           'diag': probe.collect(DiagnosticArray, '/diagnostics')}
    ok = probe.wait_for_subscribers(rig['image'], 1, 90) and \
        probe.wait_for_subscribers(rig['jpeg'], 1, 90)
    if not ok:
        for n, f in logs.items():
            f.seek(0)
            print(n, f.read())
    assert ok, 'the nodes did not come up'
    yield rig
    for p in procs.values():
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGINT)
    for p in procs.values():
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
    probe.close()
    for f in logs.values():
        f.close()


def _image(stamp_ns, h=48, w=64, seed=None, encoding='rgb8'):
    rng = np.random.default_rng(stamp_ns if seed is None else seed)
    msg = Image(height=h, width=w, encoding=encoding, step=w * 3)
    msg.data = rng.integers(0, 256, h * w * 3, dtype=np.uint8).tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = 'dds_camera'
    return msg


def _stamp(msg):
    return msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec


def _send(rig, msgs, pause=0.05, key='image'):
    for m in msgs:
        rig[key].publish(m)
        rig['probe'].spin_for(pause)


def _camera(rig, node, after=None):
    """Latest camera status of ``node`` (published after monotonic time ``after``)."""
    probe, diags = rig['probe'], rig['diag']
    start = len(diags)

    def fresh():
        for d in reversed(diags[start:] if after else diags):
            s = status_of(d, 'lingbot_ros: camera camera')
            if s is not None and s[2].get('topic', '').startswith(
                    '/dds/image' if node == RAW else '/dds/cam'):
                return s
        return None
    probe.spin_until(lambda: fresh() is not None, 10)
    return fresh()


def _alive(rig):
    return all(p.poll() is None for p in rig['procs'].values())


def test_n_frames_give_n_poses_with_the_same_stamps(rig):
    stamps = [1_000_000_000 + i * 100_000_000 for i in range(6)]
    _send(rig, [_image(s) for s in stamps])
    probe = rig['probe']
    assert probe.spin_until(lambda: len(rig['poses']) >= len(stamps), 60), rig['poses']
    probe.spin_for(0.5)
    assert [_stamp(p) for p in rig['poses']] == stamps
    assert all(p.header.frame_id == 'map' for p in rig['poses'])
    for key in ('odom', 'info', 'points', 'depth'):
        assert [_stamp(m) for m in rig[key]] == stamps, key
    assert rig['odom'][-1].child_frame_id == 'dds_camera_lingbot'  # not the sensor's own frame
    assert rig['info'][-1].header.frame_id == 'dds_camera'
    assert rig['info'][-1].width == 64 and rig['info'][-1].height == 48
    assert rig['depth'][-1].encoding == '32FC1' and rig['points'][-1].width > 0
    assert len(rig['path'][-1].poses) == len(stamps)
    for p in rig['poses']:
        q = p.pose.orientation
        assert abs(q.x ** 2 + q.y ** 2 + q.z ** 2 + q.w ** 2 - 1) < 1e-6


def test_diagnostics_carry_the_fields_and_levels(rig):
    probe, diags = rig['probe'], rig['diag']
    probe.spin_until(lambda: any(status_of(d, 'lingbot_ros: node') for d in diags), 10)
    cam = _camera(rig, RAW, after=True)
    assert cam is not None
    level, message, values = cam
    for key in CAMERA_KEYS:
        assert key in values, key
    assert int(values['frames_received']) == 6 and int(values['frames_processed']) == 6
    assert int(values['frames_dropped']) == 0 and int(values['frames_rejected']) == 0
    assert values['device'] == 'cpu' and values['backend'] in ('sdpa', 'flashinfer')
    assert float(values['step_ms_p99']) >= float(values['step_ms_p50']) > 0
    nodes = [status_of(d, 'lingbot_ros: node') for d in diags]
    node = [n for n in nodes if n is not None][-1]
    assert node[0] == 1 and 'random weights' in node[1]  # WARN: no checkpoint
    assert 'random weights' in node[2]['model'] and 'tf2_ros' in node[2]['missing_optional']
    hw = [s.hardware_id for d in diags for s in d.status]
    assert hw and all(h == 'cpu' for h in hw[-3:])


def test_bad_inputs_are_counted_and_the_node_lives(rig):
    base = 3_000_000_000
    bad = [
        _image(base, encoding='rgb16'),                               # unknown encoding
        Image(height=0, width=64, encoding='rgb8', step=192),          # zero size
        Image(height=48, width=63, encoding='yuv422', step=126,         # odd width
              data=bytes(48 * 126)),
    ]
    short = _image(base + 1)
    short.data = bytes(short.data)[:100]                              # truncated
    dup = _image(rig['poses'][-1].header.stamp.sec * 10 ** 9
                 + rig['poses'][-1].header.stamp.nanosec)              # duplicate stamp
    resized = _image(base + 2, h=40, w=64)                            # size change
    _send(rig, bad + [short, dup, resized])
    good = [base + 3, base + 4]
    _send(rig, [_image(s) for s in good])
    probe = rig['probe']
    assert probe.spin_until(lambda: _stamp(rig['poses'][-1]) == good[-1], 30)
    level, _, v = _camera(rig, RAW, after=True)
    assert v['rejected_encoding'] == '1' and v['rejected_size'] == '2'
    assert v['rejected_truncated'] == '1' and v['rejected_duplicate_stamp'] == '1'
    assert v['rejected_size_change'] == '1' and v['frames_rejected'] == '6'
    assert int(v['frames_processed']) == 8 and _alive(rig)

    ok = cv2.imencode('.jpg', np.random.default_rng(0).integers(
        0, 256, (48, 64, 3), dtype=np.uint8))[1].tobytes()

    def jpeg(stamp, data):
        m = CompressedImage(format='jpeg', data=data)
        m.header.stamp.sec, m.header.stamp.nanosec = divmod(stamp, 10 ** 9)
        return m
    _send(rig, [jpeg(10 ** 9, ok), jpeg(2 * 10 ** 9, ok[:len(ok) // 2]),
                jpeg(3 * 10 ** 9, ok[:4] + b'\x11' * 200 + b'\xff\xd9'),
                jpeg(4 * 10 ** 9, ok), jpeg(5 * 10 ** 9, ok)], key='jpeg')
    assert probe.spin_until(lambda: len(rig['jposes']) == 3, 30)
    assert [_stamp(p) for p in rig['jposes']] == [10 ** 9, 4 * 10 ** 9, 5 * 10 ** 9]
    _, _, jv = _camera(rig, COMP, after=True)
    assert jv['rejected_truncated'] == '1' and jv['rejected_corrupt'] == '1'
    assert _alive(rig)


def test_stamp_going_backwards_resets_that_session(rig):
    before = len(rig['poses'])
    stamps = [500_000_000, 600_000_000, 700_000_000]  # earlier than everything so far
    _send(rig, [_image(s) for s in stamps])
    probe = rig['probe']
    assert probe.spin_until(lambda: len(rig['poses']) >= before + 3, 30)
    assert [_stamp(p) for p in rig['poses'][before:]] == stamps
    _, _, v = _camera(rig, RAW, after=True)
    assert v['stamp_resets'] == '1' and int(v['session_resets']) >= 1
    # a new map: the path restarts with the new frames only
    assert probe.spin_until(lambda: _stamp(rig['path'][-1]) == stamps[-1], 10)
    assert len(rig['path'][-1].poses) == 3
    assert any('stamp jumped backwards' in line for line in _log(rig, RAW))


def _log(rig, name):
    f = rig['logs'][name]
    f.flush()
    f.seek(0)
    return f.read().splitlines()


def test_parameters_are_refused_with_a_reason_and_applied_when_valid(rig):
    probe = rig['probe']

    def set_(name, kind, **value):
        req = SetParameters.Request(parameters=[Parameter(
            name=name, value=ParameterValue(type=kind, **value))])
        res = probe.call(SetParameters, f'/{RAW}/set_parameters', req)
        assert res is not None
        return res.results[0]
    r = set_('keyframe_mode', ParameterType.PARAMETER_STRING, string_value='sometimes')
    assert not r.successful and 'keyframe_mode' in r.reason and "'flow'" in r.reason
    r = set_('keyframe_interval', ParameterType.PARAMETER_INTEGER, integer_value=0)
    assert not r.successful and 'keyframe_interval' in r.reason
    r = set_('scale_frames', ParameterType.PARAMETER_INTEGER, integer_value=3)
    assert not r.successful and 'read-only' in r.reason.lower() or 'read_only' in r.reason
    r = set_('keyframe_interval', ParameterType.PARAMETER_INTEGER, integer_value=2)
    assert r.successful
    got = probe.call(GetParameters, f'/{RAW}/get_parameters',
                     GetParameters.Request(names=['keyframe_interval', 'keyframe_mode']))
    assert got.values[0].integer_value == 2 and got.values[1].string_value == 'interval'
    # applied from the next frame: every 2nd streaming frame is now a rollback
    _, _, before = _camera(rig, RAW, after=True)
    start = 4_000_000_000
    _send(rig, [_image(start + i * 10 ** 8) for i in range(4)])
    probe.spin_until(lambda: _stamp(rig['poses'][-1]) == start + 3 * 10 ** 8, 30)
    _, _, after = _camera(rig, RAW, after=True)
    assert int(after['rollbacks']) - int(before['rollbacks']) == 2
    assert _alive(rig)


def test_reset_and_save_trajectory_services(rig):
    probe = rig['probe']
    res = probe.call(Trigger, f'/{RAW}/save_trajectory', Trigger.Request())
    assert res.success, res.message
    tum = [Path(p) for p in res.message.replace('wrote ', '').split(', ') if p.endswith('.tum')]
    assert len(tum) == 1 and tum[0].parent == rig['tmp'] / 'traj'
    rows = np.loadtxt(tum[0], ndmin=2)
    assert rows.shape == (7, 8)  # the 3 + 4 frames since the stamp reset
    assert rows[0, 0] == pytest.approx(0.5) and rows[-1, 0] == pytest.approx(4.3)
    assert np.load(tum[0].with_suffix('.npz'))['poses'].shape == (7, 4, 4)

    res = probe.call(Trigger, f'/{RAW}/reset', Trigger.Request())
    assert res.success and 'reset 1 session' in res.message
    empty = probe.call(Trigger, f'/{RAW}/save_trajectory', Trigger.Request())
    assert not empty.success and 'no poses yet' in empty.message
    before = len(rig['poses'])
    _send(rig, [_image(6_000_000_000), _image(6_100_000_000)])
    assert probe.spin_until(lambda: len(rig['poses']) == before + 2, 30)
    assert probe.spin_until(lambda: _stamp(rig['path'][-1]) == 6_100_000_000, 10)
    assert len(rig['path'][-1].poses) == 2  # a new map after the reset


def test_input_without_progress_is_an_error(rig):
    probe = rig['probe']
    probe.spin_for(2.5)  # longer than stall_error_s with nothing arriving: no error
    level, _, _ = _camera(rig, RAW, after=True)
    assert level != 2
    t0 = time.monotonic()
    while time.monotonic() - t0 < 3.0:  # only unusable frames for > stall_error_s
        rig['image'].publish(_image(7_000_000_000, encoding='bgr16'))
        probe.spin_for(0.1)
    level, message, _ = _camera(rig, RAW, after=True)
    assert level == 2 and 'no frame processed' in message
    _send(rig, [_image(8_000_000_000)])
    assert probe.spin_until(lambda: _stamp(rig['poses'][-1]) == 8_000_000_000, 30)
    level, _, _ = _camera(rig, RAW, after=True)
    assert level != 2 and _alive(rig)
