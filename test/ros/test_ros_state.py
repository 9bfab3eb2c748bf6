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
``~/save_state`` and ``resume_state`` over DDS: a node stopped and resumed equals one node.

Node A (tiny model, CPU, a window of 5 frames so that frames are evicted and new windows
open) gets frames 0..K-1, saves its state and is stopped with Ctrl-C; node B resumes
from A's file and gets frames K..N-1; node C gets 0..N-1. B's poses, path and map equal
C's. Every refusal (a state of other weights, of another structure, cut short, of a
newer format) fails configure in one line with ``resume_required`` (exit 1), and starts
a new map with a WARN without it.
"""

from functools import partial
import json
from pathlib import Path
import subprocess

from conftest import dds_domain, dds_env, node_executable, stop_group, TINY_NODE_YAML
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe, status_of
from nav_msgs.msg import Path as PathMsg
import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_images import pose_vector, random_image, stamp_of
from sensor_msgs.msg import Image, PointCloud2
from std_srvs.srv import Trigger

DOMAIN = dds_domain(147)
ROOT = Path(__file__).resolve().parents[2]
EXE = node_executable()
N, K = 12, 6          # frames in all; node A gets 0..K-1, node B K..N-1
STAMPS = [2_000_000_000 + i * 100_000_000 for i in range(N)]
# windows of 5 frames: frame 5 opens window 1; A saves after it, B opens windows 2 and 3
EXTRA = TINY_NODE_YAML + """    sliding_window: 2
    max_window_frames: 5
    diagnostics_period: 0.3
    path_period: 0.0
    publish_map: true
    map_period: 0.1
    map_voxel_size: 0.05
    trajectory_dir: {traj}
"""
KEPT = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                  durability=DurabilityPolicy.TRANSIENT_LOCAL)
BASIC = ROOT / 'test' / 'data' / 'parity' / 'basic'   # another structure (config.json)
FRESH = ('other_weights', 'other_structure', 'cut_short', 'newer')  # the lenient node's


_image = partial(random_image, frame_id='state_camera')
_stamp, _pose = stamp_of, pose_vector


class Rig:
    """The probe, the nodes' processes and logs, in one temporary folder."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.extra = tmp / 'extra.yaml'
        self.extra.write_text(EXTRA.format(traj=tmp / 'saved'))
        self.probe = Probe('state_probe', domain_id=DOMAIN)
        self.procs = {}

    def start(self, name, *params):
        log = open(self.tmp / f'{name}.log', 'w+')
        args = ['-p', f"camera_topics:=['/state/{name}']"] if not any(
            p.startswith('camera_topics') for p in params) else []
        for p in params:
            args += ['-p', p]
        cmd = [str(EXE), '--ros-args', '--params-file', str(ROOT / 'config' / 'lingbot.yaml'),
               '--params-file', str(self.extra), '-r', f'__node:={name}', *args]
        self.procs[name] = (subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log,
                                             stderr=subprocess.STDOUT,
                                             start_new_session=True), log)

    def log(self, name):
        log = self.procs[name][1]
        log.flush()
        return (self.tmp / f'{name}.log').read_text()

    def send(self, pub, stamps):
        for s in stamps:
            pub.publish(_image(s))
            self.probe.spin_for(0.05)

    def close(self):
        for proc, log in self.procs.values():
            stop_group(proc)
            log.close()
        self.probe.close()


def _rewrite(src, dst, version):
    """Copy a state file with another format version in its metadata."""
    from safetensors import safe_open
    from safetensors.torch import save_file
    with safe_open(str(src), framework='pt') as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    save_file(tensors, str(dst), metadata={**meta, 'version': str(version)})
    return dst


def _other_state(path, **engine):
    """Write a state of another engine: the node's structure and seed 1, or as given."""
    import torch
    from lingbot_ros.streaming.config import EngineConfig, StreamConfig
    from lingbot_ros.streaming.engine import Engine
    from lingbot_ros.streaming.state import save_session
    engine = Engine.load(EngineConfig(**{'preset': 'tiny', 'device': 'cpu', 'seed': 1,
                                         **engine}))
    session = engine.new_session('x', StreamConfig(scale_frames=2, image_size=56))
    session.run(torch.rand(3, 3, 28, 56, generator=torch.Generator().manual_seed(0)),
                stamps=range(3))
    save_session(session, path, engine.state_identity())
    return path


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    """Run A (saved, stopped) and C; then B (resumed) and every refusing node."""
    tmp = tmp_path_factory.mktemp('state')
    rig = Rig(tmp)
    probe = rig.probe
    rig.start('node_a')
    rig.start('node_c')
    pubs = {n: probe.publisher(Image, f'/state/{n}') for n in ('node_a', 'node_b', 'node_c')}
    pubs['fresh'] = probe.publisher(Image, '/state/cut_short')
    rig.poses = {n: probe.collect(PoseStamped, f'/{n}/pose') for n in ('node_a', 'node_b',
                                                                       'node_c')}
    rig.poses['fresh'] = probe.collect(PoseStamped, '/node_fresh/cut_short/pose')
    rig.paths = {n: probe.collect(PathMsg, f'/{n}/path') for n in ('node_b', 'node_c')}
    rig.maps = {n: probe.collect(PointCloud2, f'/{n}/map_points', KEPT)
                for n in ('node_b', 'node_c')}
    rig.diag = probe.collect(DiagnosticArray, '/diagnostics')
    try:
        up = all(probe.wait_for_subscribers(pubs[n], 1, 120) for n in ('node_a', 'node_c'))
        assert up, rig.log('node_a') + rig.log('node_c')
        rig.send(pubs['node_a'], STAMPS[:K])
        rig.send(pubs['node_c'], STAMPS)
        assert probe.spin_until(lambda: len(rig.poses['node_a']) >= K, 120), rig.log('node_a')
        rig.saved = probe.call(Trigger, '/node_a/save_state', Trigger.Request())
        stop_group(rig.procs['node_a'][0])
        rig.a_rc = rig.procs['node_a'][0].returncode
        state = tmp / 'saved' / 'camera_state.safetensors'
        # the refusals: files a node of this structure and weights cannot take
        cut = tmp / 'cut_short.state'
        cut.write_bytes(state.read_bytes()[:state.stat().st_size // 2])
        _rewrite(state, tmp / 'newer.state', 2)
        _other_state(tmp / 'other_weights.state')
        _other_state(tmp / 'other_structure.state', seed=0,
                     model_config=str(BASIC / 'config.json'))
        rig.start('node_b', f'resume_state:={state}')
        rig.start('refuse_structure', f'resume_state:={state}',
                  f"model_config:={BASIC / 'config.json'}")
        rig.start('refuse_cut', f'resume_state:={cut}')
        rig.start('refuse_newer', f"resume_state:={tmp / 'newer.state'}")
        rig.start('refuse_weights', f"resume_state:={tmp / 'other_weights.state'}")
        rig.start('node_fresh', f"resume_state:={tmp / '{camera}.state'}",
                  'resume_required:=false',
                  'camera_topics:=' + json.dumps([f'/state/{n}' for n in FRESH]))
        up = probe.wait_for_subscribers(pubs['node_b'], 1, 120) and \
            probe.wait_for_subscribers(pubs['fresh'], 1, 120)
        assert up, rig.log('node_b') + rig.log('node_fresh')
        assert probe.spin_until(lambda: len(rig.poses['node_c']) >= N, 120), rig.log('node_c')
        rig.send(pubs['node_b'], STAMPS[K:])
        rig.send(pubs['fresh'], STAMPS[:3])
        assert probe.spin_until(lambda: len(rig.poses['node_b']) >= N - K, 120), \
            rig.log('node_b')
        probe.spin_until(lambda: len(rig.poses['fresh']) >= 3, 60)
        for name in ('refuse_structure', 'refuse_cut', 'refuse_newer', 'refuse_weights'):
            rig.procs[name][0].wait(120)
        yield rig
    finally:
        rig.close()


def test_save_state_answers_with_the_file_and_its_size(rig):
    assert rig.saved is not None and rig.saved.success, rig.log('node_a')
    path = rig.tmp / 'saved' / 'camera_state.safetensors'
    assert rig.saved.message.startswith(f'wrote {path} (')
    mb = float(rig.saved.message.split('(')[1].split(' MB')[0])
    assert mb == pytest.approx(path.stat().st_size / 1e6, abs=0.06)
    assert f'frame {K}' in rig.saved.message and 'map voxels' in rig.saved.message
    assert rig.a_rc == 0  # node A stopped cleanly with Ctrl-C after the save
    assert not list(path.parent.glob('*.tmp*'))  # written whole: no temporary left


def test_the_resumed_node_gives_the_poses_of_one_node(rig):
    c = {_stamp(m): _pose(m) for m in rig.poses['node_c']}
    b = rig.poses['node_b']
    assert [_stamp(m) for m in b] == STAMPS[K:]
    assert [_stamp(m) for m in rig.poses['node_a']] == STAMPS[:K]
    for m in b:
        np.testing.assert_allclose(_pose(m), c[_stamp(m)], atol=1e-4)
    # and A's first half is C's too: the halves join into one run
    for m in rig.poses['node_a']:
        np.testing.assert_allclose(_pose(m), c[_stamp(m)], atol=1e-4)


def test_the_resumed_path_goes_on_from_the_saved_poses(rig):
    assert rig.probe.spin_until(lambda: rig.paths['node_b'] and len(
        rig.paths['node_b'][-1].poses) == N, 20), 'the path does not hold the saved poses'
    b, c = rig.paths['node_b'][-1].poses, rig.paths['node_c'][-1].poses
    assert [_stamp(p) for p in b] == [_stamp(p) for p in c] == STAMPS
    np.testing.assert_allclose([_pose(p) for p in b], [_pose(p) for p in c], atol=1e-4)


def test_the_resumed_map_goes_on_from_the_saved_voxels(rig):
    probe = rig.probe

    def last_stamp(name):
        return rig.maps[name] and _stamp(rig.maps[name][-1]) == STAMPS[-1]
    assert probe.spin_until(lambda: last_stamp('node_b') and last_stamp('node_c'), 20)
    fields = [('x', '<f4'), ('y', '<f4'), ('z', '<f4'), ('rgb', '<u4'), ('c', '<f4')]
    mb, mc = (np.frombuffer(bytes(rig.maps[n][-1].data), dtype=fields)
              for n in ('node_b', 'node_c'))
    assert mb.shape == mc.shape and mb.size > 0
    # the same voxels in the same order: the saved ones merged on as if never stopped
    for name, _ in fields:
        np.testing.assert_allclose(mb[name].astype(np.float64), mc[name], atol=1e-4,
                                   err_msg=name)


def _camera_status(rig, node, camera='camera', key='resume_state'):
    found = []

    def fresh():
        for d in reversed(rig.diag):
            s = status_of(d, f'/{node}: camera {camera}')
            if s is not None and key in s[2]:
                found[:] = [s]
                return True
        return False
    rig.probe.spin_until(fresh, 15)
    return found[0] if found else None


def test_diagnostics_say_where_the_resumed_stream_found_itself(rig):
    probe = rig.probe
    assert probe.spin_until(lambda: (s := _camera_status(rig, 'node_b')) is not None and int(
        s[2]['frames_processed']) >= N - K, 20)
    level, _, v = _camera_status(rig, 'node_b')
    assert v['resume_file'].endswith('camera_state.safetensors')
    assert v['resume_state'].startswith(('relocalised within ', 'far from the saved map: '))
    assert v['resume_report'].startswith(f'{N - K} of 10 resumed frames against ')
    assert float(v['resume_distance_median']) >= 0 and v['resume_distance_unit'] == 'model units'
    assert v['resume_map'].endswith('voxels restored')
    # the saved window went on: frames 8 and 11 opened windows 2 and 3, evicting on the way
    assert int(v['window_index']) == 3 and int(v['evictions']) > 0
    assert level == (1 if v['resume_state'].startswith('far') else 0)
    assert 'resumed from' in rig.log('node_b')


@pytest.mark.parametrize('node, words', [
    ('refuse_structure', 'model structure differs: '),
    ('refuse_cut', 'not a complete safetensors file'),
    ('refuse_newer', 'format version 2 is newer than this package reads (1)'),
    ('refuse_weights', "checkpoint differs: 'random:"),
])
def test_a_refused_state_fails_configure_in_one_line(rig, node, words):
    proc = rig.procs[node][0]
    assert proc.returncode == 1, rig.log(node)
    lines = [ln for ln in rig.log(node).splitlines() if 'configure failed: cannot resume' in ln]
    assert len(lines) == 1, rig.log(node)
    assert 'camera camera: state file ' in lines[0] and words in lines[0], lines[0]


def test_without_resume_required_each_refused_camera_starts_fresh(rig):
    log = rig.log('node_fresh')
    warned = [ln for ln in log.splitlines() if 'resume refused, starting a new map' in ln]
    assert len(warned) == len(FRESH), log
    assert all('WARN' in ln for ln in warned)
    words = {'other_weights': "checkpoint differs: 'random:",
             'other_structure': 'model structure differs: ',
             'cut_short': 'not a complete safetensors file',
             'newer': 'format version 2 is newer'}
    for camera in FRESH:
        level, message, v = _camera_status(rig, 'node_fresh', camera)
        assert level == 1 and message.startswith('resume: refused, started a new map: ')
        assert v['resume_state'].startswith('refused, started a new map: state file ')
        assert words[camera] in v['resume_state'], v['resume_state']
    # fresh indeed: its first poses are those of a node that never saw a state
    c = {_stamp(m): _pose(m) for m in rig.poses['node_c']}
    got = rig.poses['fresh']
    assert [_stamp(m) for m in got] == STAMPS[:3]
    for m in got:
        np.testing.assert_allclose(_pose(m), c[_stamp(m)], atol=1e-4)
