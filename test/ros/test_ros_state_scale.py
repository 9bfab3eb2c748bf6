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
A metric camera stopped and resumed over DDS: the same poses in metres, the same track.

Every node runs the tiny model with ``scale_source: fixed`` (2.5 m per model unit, no TF
needed) and windows of 4 frames. Node A gets frames 0..K-1, saves and is stopped; node B
resumes A's file and gets K..N-1; node C gets 0..N-1 without a stop. B's poses and path
must be C's, in metres from B's first frame on (no "waiting", no restart of the track).
Node ``unscaled`` resumes the same file with ``scale_source: none``: its session goes on,
its outputs are in model units (B's over 2.5), and the track and map saved in metres are
not taken, which it says in one line.
"""

from functools import partial
from pathlib import Path
import subprocess

from conftest import dds_domain, dds_env, node_executable, stop_group, TINY_NODE_YAML
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe, status_of
from nav_msgs.msg import Path as PathMsg
import numpy as np
import pytest
from ros_images import pose_vector, random_image, stamp_of
from sensor_msgs.msg import Image
from std_srvs.srv import Trigger

DOMAIN = dds_domain(149)
ROOT = Path(__file__).resolve().parents[2]
N, K = 10, 5
STAMPS = [3_000_000_000 + i * 100_000_000 for i in range(N)]
SCALE = 2.5
# windows of 4 frames: frame 4 opens window 1, A saves inside it, B opens window 2
EXTRA = TINY_NODE_YAML + f"""    sliding_window: 2
    max_window_frames: 4
    diagnostics_period: 0.3
    path_period: 0.0
    scale_source: fixed
    fixed_scale: {SCALE}
    trajectory_dir: {{traj}}
"""
NODES = ('node_a', 'node_b', 'node_c', 'unscaled')


_image = partial(random_image, frame_id='metric_camera')
_stamp, _pose = stamp_of, pose_vector


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    """Run A (saved, stopped) and C; then B and ``unscaled``, both resumed from A's file."""
    tmp = tmp_path_factory.mktemp('metric_state')
    extra = tmp / 'extra.yaml'
    extra.write_text(EXTRA.format(traj=tmp / 'saved'))
    probe = Probe('metric_state_probe', domain_id=DOMAIN)
    procs, logs = {}, {}

    def start(name, *params):
        logs[name] = open(tmp / f'{name}.log', 'w+')
        args = ['-p', f"camera_topics:=['/metric_state/{name}']"]
        for p in params:
            args += ['-p', p]
        cmd = [str(node_executable()), '--ros-args', '--params-file',
               str(ROOT / 'config' / 'lingbot.yaml'), '--params-file', str(extra),
               '-r', f'__node:={name}', *args]
        procs[name] = subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=logs[name],
                                       stderr=subprocess.STDOUT, start_new_session=True)

    def log(name):
        logs[name].flush()
        return (tmp / f'{name}.log').read_text()

    def send(pub, stamps):
        for s in stamps:
            pub.publish(_image(s))
            probe.spin_for(0.05)

    pubs = {n: probe.publisher(Image, f'/metric_state/{n}') for n in NODES}
    rig = {'probe': probe, 'log': log, 'diag': probe.collect(DiagnosticArray, '/diagnostics'),
           'poses': {n: probe.collect(PoseStamped, f'/{n}/pose') for n in NODES},
           'paths': {n: probe.collect(PathMsg, f'/{n}/path') for n in NODES}}
    try:
        start('node_a')
        start('node_c')
        assert all(probe.wait_for_subscribers(pubs[n], 1, 120) for n in ('node_a', 'node_c')), \
            log('node_a') + log('node_c')
        send(pubs['node_a'], STAMPS[:K])
        send(pubs['node_c'], STAMPS)
        assert probe.spin_until(lambda: len(rig['poses']['node_a']) >= K, 120), log('node_a')
        rig['saved'] = probe.call(Trigger, '/node_a/save_state', Trigger.Request())
        stop_group(procs['node_a'])
        state = tmp / 'saved' / 'camera_state.safetensors'
        start('node_b', f'resume_state:={state}')
        start('unscaled', f'resume_state:={state}', 'scale_source:=none')
        assert all(probe.wait_for_subscribers(pubs[n], 1, 120) for n in ('node_b', 'unscaled')), \
            log('node_b') + log('unscaled')
        send(pubs['node_b'], STAMPS[K:])
        send(pubs['unscaled'], STAMPS[K:])
        for name, count in (('node_c', N), ('node_b', N - K), ('unscaled', N - K)):
            assert probe.spin_until(lambda: len(rig['poses'][name]) >= count, 120), log(name)
        yield rig
    finally:
        for name, proc in procs.items():
            stop_group(proc)
            logs[name].close()
        probe.close()


def _status(rig, node, key):
    found = []

    def fresh():
        for d in reversed(rig['diag']):
            s = status_of(d, f'/{node}: camera camera')
            if s is not None and key in s[2] and int(s[2]['frames_processed']) >= N - K:
                found[:] = [s]
                return True
        return False
    rig['probe'].spin_until(fresh, 20)
    return found[0] if found else None


def test_the_save_holds_the_metric_track(rig):
    saved = rig['saved']
    assert saved is not None and saved.success, rig['log']('node_a')
    assert f'{K} track poses, outputs in metres)' in saved.message, saved.message


def test_the_resumed_camera_goes_on_in_metres_as_one_that_never_stopped(rig):
    poses = rig['poses']
    c = {_stamp(m): _pose(m) for m in poses['node_c']}
    assert [_stamp(m) for m in poses['node_b']] == STAMPS[K:]
    for name, stamps in (('node_a', STAMPS[:K]), ('node_b', STAMPS[K:])):
        for m in poses[name]:
            np.testing.assert_allclose(_pose(m), c[_stamp(m)], atol=1e-4, err_msg=name)
    # metres indeed: the same session's poses in model units, times the scale
    unscaled = {_stamp(m): _pose(m) for m in poses['unscaled']}
    for m in poses['node_b']:
        got, model = _pose(m), unscaled[_stamp(m)]
        np.testing.assert_allclose(got[:3], SCALE * model[:3], atol=1e-4)
        np.testing.assert_allclose(got[3:], model[3:], atol=1e-6)
    assert np.linalg.norm(c[STAMPS[-1]][:3] - c[STAMPS[0]][:3]) > 0  # the camera moved
    assert 'the track and the map start over' not in rig['log']('node_b')


def test_the_resumed_path_holds_the_saved_metric_poses(rig):
    paths = rig['paths']
    assert rig['probe'].spin_until(lambda: paths['node_b'] and len(
        paths['node_b'][-1].poses) == N, 20), 'the path does not hold the saved poses'
    b, c = paths['node_b'][-1].poses, paths['node_c'][-1].poses
    assert [_stamp(p) for p in b] == [_stamp(p) for p in c] == STAMPS
    np.testing.assert_allclose([_pose(p) for p in b], [_pose(p) for p in c], atol=1e-4)


def test_diagnostics_say_the_scale_resumed_and_distances_in_metres(rig):
    status = _status(rig, 'node_b', 'resume_scale')
    assert status is not None, rig['log']('node_b')
    _, _, v = status
    assert v['resume_scale'] == f'restored: fitted, {SCALE:g} m per model unit, outputs in ' \
        'metres'
    assert v['resume_track'] == f'{K} poses restored'
    assert v['units'] == 'metre' and v['resume_distance_unit'] == 'm'
    assert 'scale resumed: fitted' in rig['log']('node_b')


def test_a_scale_the_node_cannot_take_leaves_the_metric_outputs_behind(rig):
    status = _status(rig, 'unscaled', 'resume_scale')
    assert status is not None, rig['log']('unscaled')
    _, _, v = status
    assert v['resume_scale'] == 'not restored: saved with scale_source fixed, none here'
    assert v['resume_track'].startswith('not restored: saved in metres')
    assert v['units'] == 'model'
    paths = rig['paths']['unscaled']
    assert rig['probe'].spin_until(lambda: paths and len(paths[-1].poses) == N - K, 20)
    warned = [ln for ln in rig['log']('unscaled').splitlines() if 'saved scale not restored' in ln]
    assert len(warned) == 1 and 'WARN' in warned[0], rig['log']('unscaled')
