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
The robot's tree over DDS: a node in its own process fits the metric scale and places map -> odom.

Two node processes run the tiny random-weight model, each with two cameras that see the
same images: ``probe``, which never gets a scale input and so publishes the model's own
poses and depth (model units), and ``robot``, which drives ``map -> odom``. Identical
sessions on identical images give identical outputs, so the test turns the probe's
outputs into the robot's sensor inputs: an odometry that is the model's own track times a
known scale in another rigid frame, through a static ``base_link -> camera`` lever arm
(node ``odom``), and a registered depth image that is the model's own depth times a known
factor (node ``depth``). Without tf2_ros (the PyPI environment) the odometry node says
the source is unavailable and publishes in model units as before.
"""

import os
from pathlib import Path
import subprocess

from conftest import dds_domain, dds_env, node_executable, stop_groups, TINY_NODE_YAML
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe, status_of
from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.trajectory import invert_rigid, matrix_to_quat, quat_to_matrix
from nav_msgs.msg import Odometry
import numpy as np
import pytest
from ros_images import random_image, stamp_of
from sensor_msgs.msg import Image
try:
    from geometry_msgs.msg import TransformStamped
    from tf2_msgs.msg import TFMessage
    import tf2_ros  # noqa: F401
    HAVE_TF2 = True
except ImportError:  # tf2 comes with a ROS distro
    HAVE_TF2 = False

DOMAIN = dds_domain(144)
ROOT = Path(__file__).resolve().parents[2]
ODOM, DEPTH = 'lingbot_scale_odom', 'lingbot_scale_depth'
FRAME_ID = 'scale_cam'
FRAMES = 24
T0_NS = 100_000_000_000
STAMPS = [T0_NS + i * 100_000_000 for i in range(FRAMES)]
FUTURE_S = 0.1  # map_to_odom_future_s
# the camera's optical frame in base_link: ahead, above, looking forward (x right, y down)
LEVER = rigid(np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]]),
              np.array([0.25, -0.05, 0.4]))
# odom <- the probe's map frame: any rigid transform will do
ODOM_FROM_MAP = rigid(quat_to_matrix(np.array([0.1, -0.2, 0.3, 0.9])), np.array([2.0, -1.0, 0.3]))
NODE_YAML = TINY_NODE_YAML + """    diagnostics_period: 0.3
    camera_topics: ['/scale/{name}/probe', '/scale/{name}/robot']
    camera_names: ['probe', 'robot']
    publish_base_pose: true
    scale_source: {source}
"""
ODOM_YAML = f"""    map_to_odom_camera: robot
    map_frame: map
    publish_map_to_odom: true
    map_to_odom_future_s: {FUTURE_S}
"""
DEPTH_YAML = """    publish_depth: true
    depth_topics: ['/scale/{name}/probe_depth', '/scale/{name}/robot_depth']
"""


def _start(name, source, tmp, log, extra):
    path = tmp / f'{name}.yaml'
    path.write_text(NODE_YAML.format(name=name, source=source) + extra)
    cmd = [str(node_executable()), '--ros-args', '--params-file',
           str(ROOT / 'config' / 'lingbot.yaml'), '--params-file', str(path),
           '-r', f'__node:={name}']
    return subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('scale')
    logs = {n: open(tmp / f'{n}.log', 'w+') for n in (ODOM, DEPTH)}
    procs = {ODOM: _start(ODOM, 'odometry', tmp, logs[ODOM], ODOM_YAML),
             DEPTH: _start(DEPTH, 'depth', tmp, logs[DEPTH],
                           DEPTH_YAML.format(name=DEPTH))}
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('scale_probe', domain_id=DOMAIN)
    rig = {'probe': probe, 'procs': procs, 'logs': logs,
           'diag': probe.collect(DiagnosticArray, '/diagnostics')}
    for node in (ODOM, DEPTH):
        for cam in ('probe', 'robot'):
            rig[node, cam, 'image'] = probe.publisher(Image, f'/scale/{node}/{cam}')
            rig[node, cam, 'pose'] = probe.collect(PoseStamped, f'/{node}/{cam}/pose')
            rig[node, cam, 'odom'] = probe.collect(Odometry, f'/{node}/{cam}/odom')
        rig[node, 'robot', 'base'] = probe.collect(Odometry, f'/{node}/robot/base_odom')
    for cam in ('probe', 'robot'):
        rig[DEPTH, cam, 'depth'] = probe.collect(Image, f'/{DEPTH}/{cam}/depth')
    rig['robot_depth'] = probe.publisher(Image, f'/scale/{DEPTH}/robot_depth')
    if HAVE_TF2:
        rig['tf'] = probe.collect(TFMessage, '/tf')
        rig['tf_pub'] = probe.publisher(TFMessage, '/tf')
        rig['static'] = tf2_ros.StaticTransformBroadcaster(probe.node)
        rig['static'].sendTransform(_transform(LEVER, 0, 'base_link', FRAME_ID))
    ok = all(probe.wait_for_subscribers(rig[n, c, 'image'], 1, 120)
             for n in (ODOM, DEPTH) for c in ('probe', 'robot')) and \
        probe.wait_for_subscribers(rig['robot_depth'], 1, 30)
    if not ok:
        _print_logs(rig)
    assert ok, 'the nodes did not come up'
    yield rig
    stop_groups(procs.values())
    probe.close()
    for f in logs.values():
        f.close()


def _print_logs(rig):
    for name, f in rig['logs'].items():
        f.seek(0)
        print(name, f.read())


def _transform(matrix, stamp_ns, parent, child):
    t = TransformStamped()
    t.header.stamp.sec, t.header.stamp.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    t.header.frame_id, t.child_frame_id = parent, child
    t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = \
        (float(v) for v in matrix[:3, 3])
    q = matrix_to_quat(matrix[:3, :3])
    t.transform.rotation.x, t.transform.rotation.y, t.transform.rotation.z, \
        t.transform.rotation.w = (float(v) for v in q)
    return t


def _image(stamp_ns, seed):
    return random_image(stamp_ns, FRAME_ID, seed=seed)


_stamp = stamp_of


def _matrix(pose):
    p, q = pose.position, pose.orientation
    return rigid(quat_to_matrix(np.array([q.x, q.y, q.z, q.w])), np.array([p.x, p.y, p.z]))


def _tf_matrix(t):
    p, q = t.transform.translation, t.transform.rotation
    return rigid(quat_to_matrix(np.array([q.x, q.y, q.z, q.w])), np.array([p.x, p.y, p.z]))


def _camera(rig, node, cam):
    """Return the latest camera status ``(level, message, values)`` of a node's camera."""
    for d in reversed(rig['diag']):
        s = status_of(d, f'/{node}: camera {cam}')
        if s is not None:
            return s
    return None


def _states(rig, node, cam):
    """Return the scale states the camera's statuses showed, in order, without repeats."""
    out = []
    for d in rig['diag']:
        s = status_of(d, f'/{node}: camera {cam}')
        if s is not None and (not out or out[-1] != s[2].get('scale_state')):
            out.append(s[2].get('scale_state'))
    return out


def _probe_run(rig, node, want_depth=False):
    """Send the probe camera every frame; return its poses (and depths) by stamp."""
    probe = rig['probe']
    for i, stamp in enumerate(STAMPS):
        rig[node, 'probe', 'image'].publish(_image(stamp, i))
        probe.spin_for(0.05)
    poses, depths = rig[node, 'probe', 'pose'], rig.get((node, 'probe', 'depth'), [])
    ok = probe.spin_until(lambda: len(poses) >= FRAMES and (
        not want_depth or len(depths) >= FRAMES), 120)
    if not ok:
        _print_logs(rig)
    assert ok, (len(poses), len(depths))
    return ({_stamp(p): _matrix(p.pose) for p in poses},
            {_stamp(d): np.frombuffer(bytes(d.data), np.float32).reshape(d.height, d.width)
             for d in depths})


@pytest.mark.skipif(not HAVE_TF2, reason='tf2_ros is not installed (it comes with a ROS 2 '
                    'distribution; ../shared/ros-distro builds it)')
def test_odometry_fits_the_scale_and_map_to_odom_composes_to_the_base_pose(rig):
    probe = rig['probe']
    model, _ = _probe_run(rig, ODOM)
    positions = np.stack([model[s][:3, 3] for s in STAMPS])
    scale = 1.5 / np.sqrt(np.mean(np.sum((positions - positions.mean(0)) ** 2, -1)))
    odom_base = {}
    for s in STAMPS:  # the model's own track in metres, in odom, carried by the lever arm
        camera = model[s].copy()
        camera[:3, 3] *= scale
        odom_base[s] = ODOM_FROM_MAP @ camera @ invert_rigid(LEVER)
    rig['tf_pub'].publish(TFMessage(transforms=[_transform(odom_base[s], s, 'odom', 'base_link')
                                                for s in STAMPS]))
    probe.spin_for(1.0)
    for i, stamp in enumerate(STAMPS):
        rig[ODOM, 'robot', 'image'].publish(_image(stamp, i))
        probe.spin_for(0.05)
    bases = rig[ODOM, 'robot', 'base']
    m2o = [t for m in rig['tf'] for t in m.transforms
           if (t.header.frame_id, t.child_frame_id) == ('map', 'odom')]

    def done():
        return len(rig[ODOM, 'robot', 'pose']) and \
            _stamp(rig[ODOM, 'robot', 'pose'][-1]) == STAMPS[-1]
    assert probe.spin_until(done, 120), _print_logs(rig)
    probe.spin_for(1.0)
    m2o = [t for m in rig['tf'] for t in m.transforms
           if (t.header.frame_id, t.child_frame_id) == ('map', 'odom')]
    assert m2o and bases, (len(m2o), len(bases))
    base_at = {_stamp(b): _matrix(b.pose.pose) for b in bases}
    future = int(round(FUTURE_S * 1e9))
    m2o_at = {_stamp(t) - future: _tf_matrix(t) for t in m2o}  # future-dated
    assert set(m2o_at) == set(base_at)
    for image_stamp, t in m2o_at.items():
        composed = t @ odom_base[image_stamp]
        np.testing.assert_allclose(composed, base_at[image_stamp], atol=1e-6)
        # the odometry is exact: map stays where odom was when the scale arrived
        np.testing.assert_allclose(t, np.eye(4), atol=2e-3)
    assert all(b.header.frame_id == 'map' and b.child_frame_id == 'base_link' for b in bases)
    # withheld until then: nothing of the robot camera in the map frame before the scale
    robot = rig[ODOM, 'robot', 'pose']
    assert 0 < len(robot) < FRAMES and all(p.header.frame_id == 'map' for p in robot)
    assert all(p.header.frame_id == 'map_probe' for p in rig[ODOM, 'probe', 'pose'])
    # its camera in metres: the model's pose times the scale, in the anchored map
    for p in robot:
        s = _stamp(p)
        np.testing.assert_allclose(_matrix(p.pose), m2o_at[s] @ odom_base[s] @ LEVER,
                                   atol=1e-6)
    cov = np.array(rig[ODOM, 'robot', 'odom'][-1].pose.covariance).reshape(6, 6)
    assert np.all(np.diag(cov) > 0) and not np.allclose(np.diag(cov), 0.01)  # the fit's
    # no map -> camera edge of the robot camera: map -> odom -> base_link -> camera instead
    edges = {(t.header.frame_id, t.child_frame_id) for m in rig['tf'] for t in m.transforms}
    assert ('map', f'{FRAME_ID}_lingbot') not in edges
    assert ('map_probe', f'{FRAME_ID}_lingbot') in edges
    probe.spin_for(1.0)
    states = _states(rig, ODOM, 'robot')
    assert states[0] == 'waiting for motion' and states[-1] == 'fitted', states
    _, _, values = _camera(rig, ODOM, 'robot')
    assert float(values['scale']) == pytest.approx(scale, rel=1e-3)
    assert values['units'] == 'metre' and values['base_transform'] == 'known'
    assert values['map_to_odom'] == 'broadcast' and values['scale_source'] == 'odometry'
    _, _, other = _camera(rig, ODOM, 'probe')
    assert other['scale_state'] == 'waiting for motion' and other['units'] == 'model'
    assert other['map_to_odom'] == 'driven by camera robot'


@pytest.mark.skipif(HAVE_TF2, reason='tf2_ros is installed here: the odometry scale runs')
def test_without_tf2_the_odometry_source_is_unavailable_and_outputs_stay_model_units(rig):
    probe = rig['probe']
    model, _ = _probe_run(rig, ODOM)
    for i, stamp in enumerate(STAMPS):
        rig[ODOM, 'robot', 'image'].publish(_image(stamp, i))
        probe.spin_for(0.05)
    robot = rig[ODOM, 'robot', 'pose']
    assert probe.spin_until(lambda: len(robot) >= FRAMES, 120), _print_logs(rig)
    for p in robot:  # as today: the model's poses, model units
        np.testing.assert_allclose(_matrix(p.pose), model[_stamp(p)], atol=1e-9)
    assert np.array_equal(np.diag(np.array(rig[ODOM, 'robot', 'odom'][-1].pose.covariance)
                                  .reshape(6, 6)), [0.01] * 6)  # the stated covariance
    assert not rig[ODOM, 'robot', 'base']
    probe.spin_for(1.0)
    level, message, values = _camera(rig, ODOM, 'robot')
    assert level == 1 and 'unavailable' in message and 'tf2_ros' in message
    assert values['scale_state'] == 'unavailable' and values['units'] == 'model'
    assert values['map_to_odom'].startswith('unavailable')
    nodes = [status_of(d, f'/{ODOM}: node') for d in rig['diag']]
    node = [n for n in nodes if n is not None][-1]
    assert 'scale_source odometry unavailable' in node[2]['fallbacks']


def test_a_depth_image_of_the_models_own_depth_gives_its_factor(rig):
    probe = rig['probe']
    model, depths = _probe_run(rig, DEPTH, want_depth=True)
    valid = np.concatenate([d[np.isfinite(d) & (d > 0)] for d in depths.values()])
    factor = 2.0 / float(np.median(valid))  # sensor depths around 2 m, within its range
    for i, stamp in enumerate(STAMPS):
        sensor = depths[stamp] * np.float32(factor)
        msg = Image(height=sensor.shape[0], width=sensor.shape[1], encoding='32FC1',
                    step=sensor.shape[1] * 4)
        msg.data = np.nan_to_num(sensor, nan=0.0).astype('<f4').tobytes()
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 1_000_000_000)
        msg.header.frame_id = FRAME_ID
        rig['robot_depth'].publish(msg)
        probe.spin_for(0.02)
        rig[DEPTH, 'robot', 'image'].publish(_image(stamp, i))
        probe.spin_for(0.1)
    robot = rig[DEPTH, 'robot', 'pose']
    assert probe.spin_until(lambda: len(robot) >= FRAMES, 120), _print_logs(rig)
    probe.spin_for(1.0)
    states = _states(rig, DEPTH, 'robot')
    assert states[0] == 'waiting for depth' and states[-1] == 'fitted', states
    _, _, values = _camera(rig, DEPTH, 'robot')
    fitted = float(values['scale'])
    assert fitted == pytest.approx(factor, rel=0.01)
    assert values['units'] == 'metre' and values['scale_source'] == 'depth'
    # once metric, the robot's depth and poses are the model's times the fitted scale
    last = STAMPS[-1]
    np.testing.assert_allclose(_matrix(robot[-1].pose)[:3, 3], fitted * model[last][:3, 3],
                               rtol=1e-5, atol=1e-9)
    robot_depth = {_stamp(d): np.frombuffer(bytes(d.data), np.float32).reshape(d.height, d.width)
                   for d in rig[DEPTH, 'robot', 'depth']}
    np.testing.assert_allclose(robot_depth[last], depths[last] * np.float32(fitted), rtol=1e-3)
