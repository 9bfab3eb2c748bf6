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

Three node processes run the tiny random-weight model on a small grid: raw input, raw
input in every advertised encoding (cv_bridge on where installed), and compressed input
on a remapped base topic; this process publishes images and reads what comes back. DDS
stays on loopback in a domain of its own. Optional pieces (tf2_ros) are checked where
they are installed and their absence is checked where they are not.
"""

from functools import partial
import os
from pathlib import Path
import signal
import subprocess
import time

from conftest import dds_domain, dds_env, node_executable, stop_groups, TINY_NODE_YAML
import cv2
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.convert import ENCODINGS
from lingbot_ros.ros.probe import Probe, status_of
from lingbot_ros.streaming.parameters import SPEC
from nav_msgs.msg import Odometry, Path as PathMsg
import numpy as np
import pytest
from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
from rcl_interfaces.srv import GetParameters, SetParameters
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_images import random_image, stamp_of
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_srvs.srv import Trigger
try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # tf2_msgs comes with tf2_ros, from a ROS distro
    TFMessage = None

DOMAIN = dds_domain(51)
ROOT = Path(__file__).resolve().parents[2]
EXE = node_executable()
RAW, COMP, ENC = 'lingbot_dds', 'lingbot_dds_jpeg', 'lingbot_dds_enc'
OVERRIDES = TINY_NODE_YAML + """    diagnostics_period: 0.3
    stall_error_s: 2.0
    publish_points: true
    publish_depth: true
    path_period: 0.0
    publish_map: true
    map_period: 0.1
    map_max_points: 200
    trajectory_dir: {traj}
"""
CAMERA_KEYS = ('frames_received', 'frames_processed', 'frames_dropped', 'frames_rejected',
               'keyframes', 'rollbacks', 'evictions', 'scale_pages', 'live_pages',
               'free_pages', 'special_tokens', 'special_pages', 'kv_used_mb',
               'kv_reserved_mb', 'window_index', 'input_rate_hz', 'processed_rate_hz',
               'step_ms_p50', 'step_ms_p99', 'latency_ms_p50', 'latency_ms_p99', 'backend',
               'dtype', 'device')


TOPICS = {RAW: '/dds/image', COMP: '/dds/cam/compressed', ENC: '/dds/enc'}
KEPT = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                  durability=DurabilityPolicy.TRANSIENT_LOCAL)
try:
    import tf2_ros  # noqa: F401
    HAVE_TF2 = True
except ImportError:
    HAVE_TF2 = False


def _start(name, extra, args, log):
    cmd = [str(EXE), '--ros-args', '--params-file', str(ROOT / 'config' / 'lingbot.yaml'),
           '--params-file', str(extra), '-r', f'__node:={name}', *args]
    return subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('dds')
    extra = tmp / 'overrides.yaml'
    extra.write_text(OVERRIDES.format(traj=tmp / 'traj'))
    logs = {n: open(tmp / f'{n}.log', 'w+') for n in (RAW, COMP, ENC)}
    procs = {RAW: _start(RAW, extra, ['-p', "camera_topics:=['/dds/image']"], logs[RAW]),
             # the default input 'image', remapped, with image_transport's /compressed
             COMP: _start(COMP, extra, ['-r', 'image:=/dds/cam',
                                        '-p', 'input_transport:=compressed'], logs[COMP]),
             ENC: _start(ENC, extra, ['-p', "camera_topics:=['/dds/enc']",
                                      '-p', 'use_cv_bridge:=true', '-p', 'publish_tf:=false',
                                      '-p', 'publish_points:=false',
                                      '-p', 'publish_depth:=false'], logs[ENC])}
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
           'enc': probe.publisher(Image, '/dds/enc'),
           'eposes': probe.collect(PoseStamped, f'/{ENC}/pose'),
           'tf': probe.collect(TFMessage, '/tf') if HAVE_TF2 else None,
           'map': probe.collect(PointCloud2, f'/{RAW}/map_points', KEPT),
           'diag': probe.collect(DiagnosticArray, '/diagnostics')}
    # every publisher matched before anything is sent: nothing published is lost
    ok = all(probe.wait_for_subscribers(rig[k], 1, 90) for k in ('image', 'jpeg', 'enc')) \
        and all(probe.wait_for_publishers(f'/{n}/pose', 1, 30) for n in (RAW, COMP, ENC))
    if not ok:
        for n, f in logs.items():
            f.seek(0)
            print(n, f.read())
    assert ok, 'the nodes did not come up'
    yield rig
    stop_groups(procs.values())
    probe.close()
    for f in logs.values():
        f.close()


_image = partial(random_image, frame_id='dds_camera')
_stamp = stamp_of


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
            s = status_of(d, f'/{node}: camera camera')  # <node>: <component>
            if s is not None and s[2].get('topic', '') == TOPICS[node]:
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
    assert all(p.header.frame_id == 'lingbot_map' for p in rig['poses'])
    for key in ('odom', 'info', 'points', 'depth'):
        assert [_stamp(m) for m in rig[key]] == stamps, key
    assert rig['odom'][-1].child_frame_id == 'dds_camera_lingbot'  # not the sensor's own frame
    # the stated covariance (pose_covariance / twist_covariance), never all zero
    cov = np.array(rig['odom'][-1].pose.covariance).reshape(6, 6)
    assert np.array_equal(cov, np.diag(SPEC['pose_covariance'].default))
    twist = np.array(rig['odom'][-1].twist.covariance).reshape(6, 6)
    assert np.array_equal(twist, np.diag(SPEC['twist_covariance'].default))
    assert rig['info'][-1].header.frame_id == 'dds_camera'
    assert rig['info'][-1].width == 64 and rig['info'][-1].height == 48
    assert rig['depth'][-1].encoding == '32FC1' and rig['points'][-1].width > 0
    # ~/path (sent as assembled bytes) holds exactly the poses ~/pose sent, in order
    assert rig['path'][-1].poses == rig['poses']
    for p in rig['poses']:
        q = p.pose.orientation
        assert abs(q.x ** 2 + q.y ** 2 + q.z ** 2 + q.w ** 2 - 1) < 1e-6


def test_diagnostics_carry_the_fields_and_levels(rig):
    probe, diags = rig['probe'], rig['diag']
    probe.spin_until(lambda: any(status_of(d, f'/{RAW}: node') for d in diags), 10)
    cam = _camera(rig, RAW, after=True)
    assert cam is not None
    level, message, values = cam
    for key in CAMERA_KEYS:
        assert key in values, key
    assert int(values['frames_received']) == 6 and int(values['frames_processed']) == 6
    assert int(values['frames_dropped']) == 0 and int(values['frames_rejected']) == 0
    assert values['device'] == 'cpu' and values['backend'] in ('sdpa', 'flashinfer')
    assert float(values['step_ms_p99']) >= float(values['step_ms_p50']) > 0
    nodes = [status_of(d, f'/{RAW}: node') for d in diags]
    node = [n for n in nodes if n is not None][-1]
    assert node[0] == 1 and 'random weights' in node[1]  # WARN: no checkpoint
    assert 'random weights' in node[2]['model']
    assert node[2]['made_by_session'] == 'depth, points'  # this process reads both
    # what is missing is what this environment lacks (tf2_ros comes with a ROS distro)
    assert ('tf2_ros' in node[2]['missing_optional']) == (not HAVE_TF2)
    hw = [s.hardware_id for d in diags for s in d.status]
    assert hw and all(h == 'cpu' for h in hw[-3:])


def test_the_accumulated_map_is_published_bounded_and_saved_as_ply(rig):
    from lingbot_ros.streaming.ply import read_ply
    probe = rig['probe']
    assert probe.spin_until(lambda: rig['map'] and _stamp(rig['map'][-1]) == _stamp(
        rig['poses'][-1]), 20)  # the last keyframe is in
    cloud = rig['map'][-1]
    assert [f.name for f in cloud.fields] == ['x', 'y', 'z', 'rgb', 'confidence']
    assert cloud.header.frame_id == 'lingbot_map' and 0 < cloud.width <= 200  # map_max_points
    _, _, v = _camera(rig, RAW, after=True)
    assert int(v['map_points']) == cloud.width and int(v['map_keyframes']) == 6
    assert int(v['map_dropped_points']) > 0  # 6 keyframes give more than 200 voxels
    res = probe.call(Trigger, f'/{RAW}/save_map', Trigger.Request())
    assert res.success, res.message
    files = res.message.replace('wrote ', '').split(', ')
    (ply,) = [Path(f) for f in files if f.endswith('_map.ply')]
    (tum,) = [Path(f) for f in files if f.endswith('.tum')]
    xyz, rgb, conf = read_ply(ply)
    assert xyz.shape == (cloud.width, 3) and rgb.shape == (cloud.width, 3)
    rec = np.frombuffer(bytes(cloud.data), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                                  ('rgb', '<u4'), ('c', '<f4')])
    np.testing.assert_array_equal(np.sort(xyz[:, 2]), np.sort(rec['z']))
    np.testing.assert_array_equal(np.sort(conf), np.sort(rec['c']))
    assert np.loadtxt(tum, ndmin=2).shape == (6, 8)


@pytest.mark.skipif(not HAVE_TF2, reason='tf2_ros is not installed (it comes with a ROS 2 '
                    'distribution; ../shared/ros-distro builds it)')
def test_tf_carries_each_pose_where_tf2_ros_is_installed(rig):
    tfs = [t for m in rig['tf'] for t in m.transforms if t.child_frame_id == 'dds_camera_lingbot']
    poses = {_stamp(p): p.pose for p in rig['poses']}
    assert len(tfs) >= 6
    for t in tfs:
        assert t.header.frame_id == 'lingbot_map'
        pose = poses[_stamp(t)]
        assert t.transform.translation.x == pytest.approx(pose.position.x)
        assert t.transform.rotation.w == pytest.approx(pose.orientation.w)


@pytest.mark.skipif(HAVE_TF2, reason='tf2_ros is installed here: TF is published')
def test_without_tf2_ros_the_node_says_so_and_publishes_no_tf(rig):
    _, _, values = [status_of(d, f'/{RAW}: node') for d in rig['diag']
                    if status_of(d, f'/{RAW}: node')][-1]
    assert 'tf2_ros not installed' in values['fallbacks']
    topics = dict(rig['probe'].node.get_topic_names_and_types())
    assert '/tf' not in topics


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
    assert jv['topic'] == '/dds/cam/compressed'  # remapped base + /compressed, resolved
    assert _alive(rig)
    assert any('camera <- /dds/cam/compressed' in line for line in _log(rig, COMP))


def _encoded(name, stamp_ns, h=48, w=64):
    """Build a frame of ``name`` with random content and a tight step."""
    enc = ENCODINGS[name]
    bpp = enc.channels * enc.bytes_per_channel
    rng = np.random.default_rng(stamp_ns)
    msg = Image(height=h, width=w, encoding=name, step=w * bpp)
    msg.data = rng.integers(0, 256, h * w * bpp, dtype=np.uint8).tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    msg.header.frame_id = 'enc_camera'
    return msg


README_ENCODINGS = ('rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8', 'yuv422', 'uyvy',
                    'yuv422_yuy2', 'yuyv', '8UC1', '8UC3', '8UC4', 'bayer_rggb8',
                    'bayer_bggr8', 'bayer_gbrg8', 'bayer_grbg8', 'bayer_rggb16',
                    'bayer_bggr16', 'bayer_gbrg16', 'bayer_grbg16')


def test_every_advertised_encoding_is_processed(rig):
    probe = rig['probe']
    stamps = [10_000_000_000 + i * 50_000_000 for i in range(len(README_ENCODINGS))]
    _send(rig, [_encoded(n, s) for n, s in zip(README_ENCODINGS, stamps)], key='enc')
    assert probe.spin_until(lambda: len(rig['eposes']) >= len(stamps), 60), _log(rig, ENC)
    assert [_stamp(p) for p in rig['eposes']] == stamps
    _, _, v = _camera(rig, ENC, after=True)
    assert v['frames_rejected'] == '0' and v['frames_processed'] == str(len(stamps))
    _, _, node = [status_of(d, f'/{ENC}: node') for d in rig['diag']
                  if status_of(d, f'/{ENC}: node')][-1]
    bridge = 'cv_bridge' not in node['missing_optional']
    assert node['image_conversion'].startswith('cv_bridge' if bridge else 'numpy')


def test_an_odd_frame_after_a_stamp_reset_never_locks_the_camera(rig):
    probe = rig['probe']
    before = len(rig['eposes'])
    # the looped bag's first frame is a broken 63 x 48 yuv422 one: rejected before any
    # converter, so it cannot fix the new session's size
    odd = Image(height=48, width=63, encoding='yuv422', step=126, data=bytes(48 * 126))
    odd.header.stamp.sec = 1
    _send(rig, [odd], key='enc')
    good = [2_000_000_000 + i * 50_000_000 for i in range(3)]
    _send(rig, [_encoded('yuv422', s) for s in good], key='enc')
    assert probe.spin_until(lambda: len(rig['eposes']) >= before + 3, 30), _log(rig, ENC)
    assert [_stamp(p) for p in rig['eposes'][before:]] == good
    # a valid frame of another size right after a reset does fix the session size; the
    # camera's own size then comes back for good and gets a new session (WARN), not a lock
    before = len(rig['eposes'])
    other = _encoded('rgb8', 1_000_000_000, h=32, w=32)
    after = [1_100_000_000 + i * 50_000_000 for i in range(6)]
    _send(rig, [other] + [_encoded('rgb8', s) for s in after], key='enc')
    assert probe.spin_until(lambda: _stamp(rig['eposes'][-1]) == after[-1], 30), \
        _log(rig, ENC)
    _, _, v = _camera(rig, ENC, after=True)
    assert int(v['rejected_size']) == 1 and int(v['rejected_size_change']) >= 1
    assert any('the camera now sends 64x48' in line for line in _log(rig, ENC))


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
    saved = np.load(tum[0].with_suffix('.npz'))
    assert saved['poses'].shape == (7, 4, 4)
    assert str(saved['map_convention']) == 'rep103'  # the parameter's value, not the enum's
    again = probe.call(Trigger, f'/{RAW}/save_trajectory', Trigger.Request())
    assert again.success, again.message  # within the same second: new files, none overwritten
    second = [p for p in again.message.replace('wrote ', '').split(', ') if p.endswith('.tum')]
    assert len(second) == 1 and Path(second[0]) != tum[0] and tum[0].exists()

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


def test_ctrl_c_ends_the_node_with_exit_status_0(rig):
    """Last in this file: it stops the compressed-input node, as a terminal's Ctrl-C does."""
    node = rig['procs'][COMP]
    assert node.poll() is None, _log(rig, COMP)[-15:]
    os.killpg(node.pid, signal.SIGINT)
    assert node.wait(30) == 0, _log(rig, COMP)[-15:]
    assert any('SIGINT: stopping' in line for line in _log(rig, COMP)), _log(rig, COMP)[-15:]
