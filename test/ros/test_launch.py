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
The launch file, and the executable as launch_ros starts it.

Everywhere: the launch file is parsed and the node is started with exactly the command
line launch_ros builds from it. Where launch_ros and ros2cli are installed (a ROS 2
distro, or ../shared/ros-distro), the launch file is loaded and really run with
``ros2 launch``: the node comes up as a lifecycle node, active by default, or waiting
for a lifecycle manager with ``autostart:=false``.
"""

import ast
import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
import time

from conftest import dds_domain, dds_env, node_executable
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from lingbot_ros.ros.probe import Probe, status_of
from lingbot_ros.streaming.parameters import SPEC, SPECS
import numpy as np
import pytest

DOMAIN = dds_domain(52)
ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ROOT / 'launch' / 'lingbot.launch.py'
EXE = node_executable()
ARGUMENTS = {'params_file', 'extra_params_file', 'namespace', 'image_topic', 'camera_topics',
             'camera_names', 'autostart', 'rviz', 'use_sim_time', 'log_level'}
FAST = """
/**:
  ros__parameters:
    image_size: 56
    scale_frames: 2
    diagnostics_period: 0.2
"""


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, 'id', getattr(n.func, 'attr', None)) == name]


def _constants(tree):
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            out[node.targets[0].id] = node.value.value
    return out


def test_launch_file_declares_described_arguments_and_a_lifecycle_node():
    tree = ast.parse(LAUNCH.read_text())
    assert any(isinstance(n, ast.FunctionDef) and n.name == 'generate_launch_description'
               for n in tree.body)
    declared = {}
    for call in _calls(tree, 'DeclareLaunchArgument'):
        name = call.args[0].value
        kw = {k.arg: k.value for k in call.keywords}
        desc = kw['description']
        text = desc.value if isinstance(desc, ast.Constant) else ast.unparse(desc)
        declared[name] = text
        assert 'default_value' in kw, name
    assert set(declared) == ARGUMENTS
    assert all(len(t) > 15 for t in declared.values())
    consts = _constants(tree)
    (node,) = _calls(tree, 'LifecycleNode')
    assert [ast.unparse(c.keywords[0].value) for c in _calls(tree, 'Node')] == ["'rviz2'"]
    kw = {k.arg: k.value for k in node.keywords}
    # the node's exit is watched: an error exit ends the launch with one
    (watch,) = _calls(tree, 'OnProcessExit')
    assert {k.arg: ast.unparse(k.value) for k in watch.keywords}['target_action'] == 'node'
    assert consts[kw['package'].id] == 'lingbot_ros'
    executable = consts[kw['executable'].id]
    setup = (ROOT / 'setup.py').read_text()
    assert f"'{executable} = lingbot_ros.ros.cli:main'" in setup
    assert (ROOT / 'config' / consts['PARAMS_FILE']).is_file()
    assert "glob('config/*.yaml')" in setup and "glob('launch/*.launch.py')" in setup
    assert "glob('config/*.rviz')" in setup and (ROOT / 'config' / consts['RVIZ_FILE']).is_file()
    remaps = ast.unparse(kw['remappings'])
    assert "'image'" in remaps and 'image_topic' in remaps
    (built,) = [n for n in ast.walk(tree) if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == ast.unparse(kw['parameters'])]
    parameters = ast.unparse(built.value)
    assert 'use_sim_time' in parameters and "'autostart'" in parameters
    # the share directory is a substitution resolved at launch time, not at import
    assert _calls(tree, 'FindPackageShare') and not _calls(tree, 'get_package_share_directory')


def _has(*modules):
    try:
        for m in modules:
            __import__(m)
    except ImportError:
        return False
    return True


NEEDS_LAUNCH = pytest.mark.skipif(
    not _has('launch', 'launch_ros'),
    reason='launch / launch_ros are not installed (not on PyPI; they come with a ROS 2 '
           'distribution; ../shared/ros-distro builds them)')
ROS2 = shutil.which('ros2', path=str(Path(sys.executable).parent)) or shutil.which('ros2')
NEEDS_ROS2 = pytest.mark.skipif(
    ROS2 is None or not _has('launch', 'launch_ros', 'ros2launch'),
    reason='ros2 launch is not installed (ros2cli and ros2launch come with a ROS 2 '
           'distribution; ../shared/ros-distro builds them)')


@NEEDS_LAUNCH
def test_launch_file_loads_without_the_package_installed():
    import importlib.util
    from launch import LaunchContext, LaunchDescription
    from launch.actions import OpaqueFunction
    from launch_ros.actions import LifecycleNode
    spec = importlib.util.spec_from_file_location('lingbot_launch', LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    desc = module.generate_launch_description()  # no ament index lookup happens here
    assert isinstance(desc, LaunchDescription)
    assert {a.name for a in desc.get_launch_arguments()} == ARGUMENTS
    # the node is built when the launch runs, from the arguments given
    context = LaunchContext()
    context.launch_configurations.update({
        'params_file': str(ROOT / 'config' / 'lingbot.yaml'),
        'extra_params_file': str(ROOT / 'config' / 'lingbot_8gb.yaml'), 'namespace': '',
        'image_topic': 'image', 'camera_topics': '', 'camera_names': '', 'autostart': 'true',
        'use_sim_time': 'false', 'log_level': 'info', 'rviz': 'false'})
    built = [a for e in desc.entities if isinstance(e, OpaqueFunction)
             for a in (e.execute(context) or [])]
    assert [type(e) for e in built if isinstance(e, LifecycleNode)] == [LifecycleNode]
    assert module._camera_list('camera_topics', '[/cam_front/image_raw, /cam_rear/image_raw]') \
        == ['/cam_front/image_raw', '/cam_rear/image_raw']
    assert module._camera_list('camera_names', 'front') == ['front']
    for bad in ('[]', '[1, 2]', '[a', '{a: b}'):
        with pytest.raises(ValueError, match='camera_names'):
            module._camera_list('camera_names', bad)


def _launch(ament_env, tmp_path, *args, domain=DOMAIN, name='launch.log', text=FAST):
    params = tmp_path / 'fast.yaml'
    params.write_text(text)
    keep = ('AMENT_PREFIX_PATH', 'PATH', 'PYTHONPATH')
    env = dds_env(domain, **{k: v for k, v in ament_env.items() if k in keep})
    log = open(tmp_path / name, 'w+')
    proc = subprocess.Popen([ROS2, 'launch', 'lingbot_ros', 'lingbot.launch.py',
                             f'params_file:={params}', *args],
                            env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    return proc, log


def _state(probe, node, timeout=60):
    res = probe.call(GetState, f'{node}/get_state', GetState.Request(), timeout)
    return res and res.current_state.id


def _stop(proc, log):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        rc = proc.wait(40)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.wait(10)
    return rc


@NEEDS_ROS2
def test_ros2_launch_starts_an_active_lifecycle_node(ament_env, tmp_path):
    extra = tmp_path / 'extra.yaml'  # loaded after params_file: its values win
    extra.write_text('/**:\n  ros__parameters:\n    diagnostics_period: 0.25\n'
                     '    path_max_length: 500\n')
    proc, log = _launch(ament_env, tmp_path, 'namespace:=robot',
                        'image_topic:=/robot/camera/image_raw', f'extra_params_file:={extra}')
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('launch_probe', domain_id=DOMAIN)
    try:
        diags = probe.collect(DiagnosticArray, '/diagnostics')
        assert probe.spin_until(lambda: _state(probe, '/robot/lingbot_node', 5)
                                == State.PRIMARY_STATE_ACTIVE, 120), _read(log)
        assert probe.spin_until(
            lambda: _last_active(diags, '/robot/lingbot_node') is not None, 20)
        # status names carry the node's fully qualified name: <node>: <component>
        cam = status_of(_last_active(diags, '/robot/lingbot_node'),
                        '/robot/lingbot_node: camera camera')
        assert cam[2]['topic'] == '/robot/camera/image_raw'  # the resolved, remapped name
        topics = dict(probe.node.get_topic_names_and_types())
        assert 'sensor_msgs/msg/Image' in topics.get('/robot/camera/image_raw', [])
        assert '/robot/lingbot_node/transition_event' in topics  # a managed node
        # ros2 param dump lists every parameter (one without a value made it print {})
        env = dds_env(DOMAIN, **{k: v for k, v in ament_env.items()
                                 if k in ('AMENT_PREFIX_PATH', 'PATH', 'PYTHONPATH')})
        import yaml
        # a fresh CLI process must discover the node's parameter services first; on a loaded
        # 2-core machine its wait ran out once (empty output, CI): ask again before failing
        for _ in range(3):
            dump = subprocess.run([ROS2, 'param', 'dump', '/robot/lingbot_node'], env=env,
                                  capture_output=True, text=True, timeout=60)
            dumped = yaml.safe_load(dump.stdout)
            if dumped:
                break
        assert dumped, dump.stdout + dump.stderr
        values = dumped['/robot/lingbot_node']['ros__parameters']
        assert {s.name for s in SPECS} <= set(values), dump.stdout + dump.stderr
        assert values['camera_names'] == [] and values['map_frame'] == 'lingbot_map'
        assert (values['image_size'], values['diagnostics_period'],
                values['path_max_length']) == (56, 0.25, 500)  # both files, in order
    finally:
        rc = _stop(proc, log)
        probe.close()
    assert rc == 0, _read(log)


@NEEDS_ROS2
def test_ros2_launch_takes_several_cameras_as_arguments(ament_env, tmp_path):
    proc, log = _launch(ament_env, tmp_path, 'namespace:=rig',
                        'camera_topics:=[/cam_front/image_raw, /cam_rear/image_raw]',
                        'camera_names:=[front, rear]', name='cameras.log')
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('cameras_probe', domain_id=DOMAIN)
    try:
        diags = probe.collect(DiagnosticArray, '/diagnostics')
        assert probe.spin_until(lambda: _last_active(diags, '/rig/lingbot_node') is not None,
                                120), _read(log)
        last = _last_active(diags, '/rig/lingbot_node')
        for name, topic in (('front', '/cam_front/image_raw'), ('rear', '/cam_rear/image_raw')):
            cam = status_of(last, f'/rig/lingbot_node: camera {name}')
            assert cam is not None and cam[2]['topic'] == topic, _read(log)
        topics = dict(probe.node.get_topic_names_and_types())
        assert '/rig/lingbot_node/front/pose' in topics and '/rig/lingbot_node/rear/pose' in topics
    finally:
        rc = _stop(proc, log)
        probe.close()
    assert rc == 0, _read(log)


BAD_FILES = {
    'a wrong type': ('    keyframe_interval: two\n', 1,
                     "configure failed: invalid parameters: keyframe_interval='two' is invalid: "
                     'expected an integer in [1, 1000]'),
    'out of range': ('    scale_frames: 0\n', 1,
                     'configure failed: invalid parameters: scale_frames=0 is invalid: expected '
                     'an integer in [1, 64]'),
    'broken YAML': ('    camera_topics: [a\n  b: : :\n', 2, 'cannot start: '),
}


@NEEDS_ROS2
@pytest.mark.parametrize('case', sorted(BAD_FILES))
def test_ros2_launch_fails_with_the_nodes_own_words_on_a_bad_parameter_file(ament_env, tmp_path,
                                                                            case):
    body, code, words = BAD_FILES[case]
    proc, log = _launch(ament_env, tmp_path, text='/**:\n  ros__parameters:\n' + body,
                        name='bad.log')
    try:
        rc = proc.wait(120)
    finally:
        _stop(proc, log)
    text = _read(log)
    assert rc != 0, text  # ros2 launch itself fails, not only the node
    (line,) = [ln for ln in text.splitlines() if ln.startswith('[ERROR] [lingbot.launch]:')]
    assert line.startswith(f'[ERROR] [lingbot.launch]: lingbot_node stopped with exit code '
                           f'{code}: ') and words in line, text
    for rclpy_words in ('Trying to set parameter', 'Invalid parameter value'):
        assert rclpy_words not in text, text


def test_the_rviz_view_shows_the_map_path_pose_and_depth_in_the_map_frame():
    import yaml
    view = yaml.safe_load((ROOT / 'config' / 'lingbot.rviz').read_text())
    manager = view['Visualization Manager']
    # our own map frame, never nav2's 'map' (REP-105)
    assert manager['Global Options']['Fixed Frame'] == SPEC['map_frame'].default \
        == 'lingbot_map'
    shown = {d['Class'].split('/')[-1]: d['Topic']['Value'] for d in manager['Displays']
             if 'Topic' in d}
    assert shown == {'PointCloud2': '/lingbot_node/map_points', 'Path': '/lingbot_node/path',
                     'Pose': '/lingbot_node/pose', 'Image': '/lingbot_node/depth'}
    cloud = next(d for d in manager['Displays'] if d['Class'].endswith('PointCloud2'))
    assert cloud['Color Transformer'] == 'RGB8'  # the map's packed colour
    assert cloud['Topic']['Durability Policy'] == 'Transient Local'  # the last map, at once


@NEEDS_ROS2
def test_ros2_launch_autostart_false_waits_for_a_lifecycle_manager(ament_env, tmp_path):
    # rviz:=true as well: rviz2 is started where installed, and named as missing where not
    proc, log = _launch(ament_env, tmp_path, 'autostart:=false', 'rviz:=true')
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('manager_probe', domain_id=DOMAIN)
    try:
        assert _state(probe, '/lingbot_node', 120) == State.PRIMARY_STATE_UNCONFIGURED, \
            _read(log)
        probe.spin_for(1.0)  # it stays there on its own
        assert _state(probe, '/lingbot_node') == State.PRIMARY_STATE_UNCONFIGURED
        for transition in (Transition.TRANSITION_CONFIGURE, Transition.TRANSITION_ACTIVATE):
            req = ChangeState.Request(transition=Transition(id=transition))
            res = probe.call(ChangeState, '/lingbot_node/change_state', req, 120)
            assert res is not None and res.success, _read(log)
        assert _state(probe, '/lingbot_node') == State.PRIMARY_STATE_ACTIVE
        rviz = shutil.which('rviz2') is not None
        assert rviz or 'rviz2 is not installed' in _read(log)
    finally:
        rc = _stop(proc, log)
        probe.close()
    assert rc == 0, _read(log)


def test_executable_starts_as_launch_ros_starts_it(tmp_path):
    # what launch_ros runs for `ros2 launch lingbot_ros lingbot.launch.py
    # namespace:=robot image_topic:=/robot/camera/image_raw`
    cmd = [str(EXE), '--ros-args', '--log-level', 'info', '-r', '__node:=lingbot_node',
           '-r', '__ns:=/robot', '--params-file', str(ROOT / 'config' / 'lingbot.yaml'),
           '-p', 'use_sim_time:=false', '-p', 'autostart:=true',
           '-r', 'image:=/robot/camera/image_raw']
    log = open(tmp_path / 'node.log', 'w+')
    proc = subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('launch_probe', domain_id=DOMAIN)
    try:
        diags = probe.collect(DiagnosticArray, '/diagnostics')
        state = None
        for _ in range(3):
            state = _state(probe, '/robot/lingbot_node')
            if state == State.PRIMARY_STATE_ACTIVE:
                break
            probe.spin_for(2.0)
        assert state == State.PRIMARY_STATE_ACTIVE, _read(log)
        assert probe.spin_until(
            lambda: _last_active(diags, '/robot/lingbot_node') is not None, 20)
        node = status_of(_last_active(diags, '/robot/lingbot_node'),
                         '/robot/lingbot_node: node')
        assert 'random weights' in node[2]['model']
        startup = node[2]['startup']  # where the start-up time went, by phase
        assert 'from process start to active' in startup and 'model ' in startup
        topics = dict(probe.node.get_topic_names_and_types())
        assert 'sensor_msgs/msg/Image' in topics.get('/robot/camera/image_raw', [])
        assert '/robot/lingbot_node/pose' in topics
        assert proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
        rc = proc.wait(30)
        probe.close()
    assert rc == 0, _read(log)  # a clean shutdown on SIGINT


def _last_active(diags, name):
    """Return the newest diagnostics array whose status of node ``name`` says 'active'."""
    for d in reversed(diags):
        node = status_of(d, f'{name}: node')
        if node is not None and node[2]['state'] == 'active':
            return d
    return None


def _read(log):
    log.flush()
    log.seek(0)
    return log.read()


CTRL_C_DOMAIN = dds_domain(122)
CTRL_C_RUNS = int(os.environ.get('LINGBOT_CTRL_C_RUNS', '2'))  # the bar: 10


@NEEDS_ROS2
def test_ctrl_c_on_ros2_launch_while_frames_are_processed_exits_cleanly(ament_env, tmp_path):
    """SIGINT to the launch's process group, as a terminal's Ctrl-C sends it."""
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import Image
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('ctrl_c_probe', domain_id=CTRL_C_DOMAIN)
    camera = probe.publisher(Image, '/robot1/camera/image_raw')
    poses = probe.collect(PoseStamped, '/robot1/lingbot_node/pose')
    rng = np.random.default_rng(0)
    stamp = [1_000_000_000]

    def send():
        msg = Image(height=48, width=64, encoding='rgb8', step=64 * 3)
        msg.data = rng.integers(0, 256, 48 * 64 * 3, dtype=np.uint8).tobytes()
        stamp[0] += 100_000_000
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp[0], 1_000_000_000)
        camera.publish(msg)
        probe.spin_for(0.1)  # about 10 Hz: the worker is busy when the signal comes
    try:
        for run in range(CTRL_C_RUNS):
            proc, log = _launch(ament_env, tmp_path, 'namespace:=robot1',
                                'image_topic:=/robot1/camera/image_raw',
                                domain=CTRL_C_DOMAIN, name=f'ctrl_c_{run}.log')
            seen = len(poses)
            deadline = time.monotonic() + 120
            while len(poses) < seen + 3 and time.monotonic() < deadline and proc.poll() is None:
                send()
            assert len(poses) >= seen + 3, _read(log)  # processing when Ctrl-C comes
            os.killpg(proc.pid, signal.SIGINT)
            deadline = time.monotonic() + 40
            while proc.poll() is None and time.monotonic() < deadline:
                send()  # frames keep coming while the node stops
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait(10)
            text = _read(log)
            assert rc == 0, f'run {run}: exit {rc}\n{text}'
            for bad in ('Traceback', 'KeyboardInterrupt', '[ERROR]', 'terminate called',
                        'exit code -'):
                assert bad not in text, f'run {run}: {bad!r} in the log\n{text}'
            assert 'process has finished cleanly' in text, text
    finally:
        probe.close()
