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
The launch file and the executable as launch_ros starts it.

launch_ros is not installable here: the launch file is checked by parsing it, and the
node is started with exactly the command line launch_ros builds from it. Where
launch_ros is installed, the launch file itself is loaded and described too.
"""

import ast
import os
from pathlib import Path
import signal
import subprocess
import sys

from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import GetState
from lingbot_ros.ros.probe import Probe, status_of
import pytest

DOMAIN = 52
ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / 'launch' / 'lingbot.launch.py'
EXE = Path(sys.executable).with_name('lingbot_node')
ARGUMENTS = {'params_file', 'namespace', 'image_topic', 'use_sim_time', 'log_level'}


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and getattr(n.func, 'id', getattr(n.func, 'attr', None)) == name]


def _constants(tree):
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            out[node.targets[0].id] = node.value.value
    return out


def test_launch_file_declares_described_arguments_and_the_installed_node():
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
    (node,) = _calls(tree, 'Node')
    kw = {k.arg: k.value for k in node.keywords}
    assert consts[kw['package'].id] == 'lingbot_ros'
    executable = consts[kw['executable'].id]
    setup = (ROOT / 'setup.py').read_text()
    assert f"'{executable} = lingbot_ros.ros.node:main'" in setup
    assert (ROOT / 'config' / consts['PARAMS_FILE']).is_file()
    assert "glob('config/*.yaml')" in setup and "glob('launch/*.launch.py')" in setup
    remaps = ast.unparse(kw['remappings'])
    assert "'image'" in remaps and 'image_topic' in remaps
    assert 'use_sim_time' in ast.unparse(kw['parameters'])


def _launch_ros_available():
    try:
        import launch  # noqa: F401
        import launch_ros  # noqa: F401
        from launch import LaunchDescription  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _launch_ros_available(),
                    reason='launch / launch_ros are not installed (not on PyPI); '
                           'they come with a ROS 2 distribution')
def test_launch_file_loads_with_launch_ros():
    import importlib.util
    from launch import LaunchDescription
    spec = importlib.util.spec_from_file_location('lingbot_launch', LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    desc = module.generate_launch_description()
    assert isinstance(desc, LaunchDescription)
    names = {a.name for a in desc.get_launch_arguments()}
    assert names == ARGUMENTS


def _env():
    return dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
                ROS_DOMAIN_ID=str(DOMAIN), PYTHONUNBUFFERED='1')


def test_executable_starts_as_launch_ros_starts_it(tmp_path):
    # what launch_ros runs for `ros2 launch lingbot_ros lingbot.launch.py
    # namespace:=robot image_topic:=/robot/camera/image_raw`
    cmd = [str(EXE), '--ros-args', '--log-level', 'info', '-r', '__node:=lingbot_node',
           '-r', '__ns:=/robot', '--params-file', str(ROOT / 'config' / 'lingbot.yaml'),
           '-p', 'use_sim_time:=false', '-r', 'image:=/robot/camera/image_raw']
    log = open(tmp_path / 'node.log', 'w+')
    proc = subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('launch_probe', domain_id=DOMAIN)
    try:
        diags = probe.collect(DiagnosticArray, '/diagnostics')
        state = None
        for _ in range(3):
            res = probe.call(GetState, '/robot/lingbot_node/get_state', GetState.Request(), 60)
            state = res and res.current_state.id
            if state == State.PRIMARY_STATE_ACTIVE:
                break
            probe.spin_for(2.0)
        assert state == State.PRIMARY_STATE_ACTIVE, _read(log)
        assert probe.spin_until(lambda: any(status_of(d, 'lingbot_ros: node') for d in diags),
                                20)
        node = [status_of(d, 'lingbot_ros: node') for d in diags][-1]
        assert node[2]['state'] == 'active' and 'random weights' in node[2]['model']
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


def _read(log):
    log.flush()
    log.seek(0)
    return log.read()


def test_missing_checkpoint_fails_configure_with_path_and_reason():
    missing = '/nonexistent/lingbot_map.pt'
    proc = subprocess.run([str(EXE), '--ros-args', '-p', f'checkpoint:={missing}',
                           '-r', '__node:=lingbot_missing'], env=_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert missing in out and 'no such file' in out and 'configure failed' in out


def test_invalid_parameter_file_value_fails_with_the_parameter_named(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text('/**:\n  ros__parameters:\n    keyframe_mode: sometimes\n')
    proc = subprocess.run([str(EXE), '--ros-args', '--params-file', str(bad),
                           '-r', '__node:=lingbot_badparam'], env=_env(),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1
    assert "keyframe_mode='sometimes' is invalid" in out and "'flow'" in out
