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
What a person types at lingbot_node, and the one line they get back.

Each case starts the real executable in its own process (loopback DDS, a domain of its
own) and reads its output and exit code: bad YAML, bad values, empty lists, unknown keys,
whole numbers for floats, --help, and checkpoint files that are not checkpoints.
"""

import subprocess

from conftest import dds_domain, dds_env, node_executable
import pytest

DOMAIN = dds_domain(57)
EXE = node_executable()


def _run(*args, timeout=120):
    proc = subprocess.run([str(EXE), *args], env=dds_env(DOMAIN), capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


def _yaml(tmp_path, body, name='params.yaml'):
    path = tmp_path / name
    path.write_text('/**:\n  ros__parameters:\n' + body)
    return path


def test_help_prints_usage_and_starts_no_node():
    rc, out = _run('--help', timeout=60)
    assert rc == 0
    assert out.startswith('usage: lingbot_node') and '--ros-args' in out
    assert 'sliding_window' in out and 'config/lingbot.yaml' in out
    assert '[INFO]' not in out  # no node came up


def test_broken_yaml_is_one_line(tmp_path):
    bad = tmp_path / 'broken.yaml'
    bad.write_text('/**:\n  ros__parameters:\n    camera_topics: [a\n  b: : :\n')
    rc, out = _run('--ros-args', '--params-file', str(bad))
    lines = [line for line in out.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1, out
    assert lines[0].startswith('lingbot_node: cannot start:') and 'broken.yaml' in lines[0]
    assert 'Traceback' not in out


def test_missing_checkpoint_fails_configure_with_path_and_reason():
    missing = '/nonexistent/lingbot_map.pt'
    rc, out = _run('--ros-args', '-p', f'checkpoint:={missing}', '-r',
                   '__node:=lingbot_missing')
    assert rc == 1
    assert missing in out and 'no such file' in out and 'configure failed' in out


@pytest.mark.parametrize('content,says', [
    (b'not a checkpoint, just some notes\n', 'text file'),
    (b'', 'empty file'),
    (b'version https://git-lfs.github.com/spec/v1\noid sha256:' + b'ab' * 32
     + b'\nsize 4621277300\n', 'git lfs pull'),
])
def test_a_file_that_is_not_a_checkpoint_is_named_in_one_line(tmp_path, content, says):
    fake = tmp_path / 'lingbot_map.pt'
    fake.write_bytes(content)
    rc, out = _run('--ros-args', '-p', f'checkpoint:={fake}', '-r', '__node:=lingbot_fake')
    assert rc == 1 and 'Traceback' not in out, out
    (line,) = [line for line in out.splitlines() if str(fake) in line]
    assert 'configure failed: cannot load the model: checkpoint' in line
    assert says in line.lower()


def test_invalid_parameter_file_value_fails_with_the_parameter_named(tmp_path):
    bad = _yaml(tmp_path, '    keyframe_mode: sometimes\n')
    rc, out = _run('--ros-args', '--params-file', str(bad), '-r', '__node:=lingbot_badparam')
    assert rc == 1
    assert "keyframe_mode='sometimes' is invalid" in out and "'flow'" in out


def test_wrong_types_and_ranges_in_the_file_are_refused_in_the_nodes_words(tmp_path):
    bad = _yaml(tmp_path, '    keyframe_interval: two\n    scale_frames: 0\n'
                          '    pose_covariance: [0.1, 0.1, 0.1, 0.1, 0.1]\n')
    rc, out = _run('--ros-args', '--params-file', str(bad), '-r', '__node:=lingbot_words')
    assert rc == 1 and 'Traceback' not in out, out
    (line,) = [line for line in out.splitlines() if 'configure failed: invalid' in line]
    assert "keyframe_interval='two' is invalid: expected an integer in [1, 1000]" in line
    assert 'scale_frames=0 is invalid: expected an integer in [1, 64]' in line
    assert 'pose_covariance=[0.1, 0.1, 0.1, 0.1, 0.1] is invalid: expected 6 positive' in line
    for rclpy_words in ('Trying to set parameter', 'Invalid parameter value', 'array('):
        assert rclpy_words not in out, out


def test_a_covariance_refused_at_runtime_is_shown_as_a_list(tmp_path):
    """What ``ros2 param set`` sends arrives as array('d', ...): the refusal shows a list."""
    import sys
    script = (
        'import rclpy\n'
        'from rcl_interfaces.msg import Parameter as Msg, ParameterType, ParameterValue\n'
        'from rclpy.parameter import Parameter\n'
        'rclpy.init(args=["x", "--ros-args", "-p", "autostart:=false"])\n'
        'from lingbot_ros.ros.node import LingbotNode\n'
        'node = LingbotNode()\n'
        'def as_sent(values):\n'
        '    return Parameter.from_parameter_msg(Msg(name="pose_covariance", value='
        'ParameterValue(type=ParameterType.PARAMETER_DOUBLE_ARRAY, '
        'double_array_value=values)))\n'
        'bad = node.set_parameters_atomically([as_sent([0.1] * 5)])\n'
        'good = node.set_parameters_atomically([as_sent([0.2] * 6)])\n'
        'print("refused:", bad.successful, bad.reason)\n'
        'print("taken:", good.successful, list(node.get_parameter("pose_covariance").value))\n'
        'node.destroy_node()\n'
        'rclpy.shutdown()\n')
    proc = subprocess.run([sys.executable, '-c', script], env=dds_env(DOMAIN),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert 'refused: False pose_covariance=[0.1, 0.1, 0.1, 0.1, 0.1] is invalid: expected 6 ' \
        'positive numbers' in proc.stdout, proc.stdout
    assert 'taken: True [0.2, 0.2, 0.2, 0.2, 0.2, 0.2]' in proc.stdout, proc.stdout + proc.stderr


def test_a_model_that_cannot_be_imported_fails_configure_with_the_reason(tmp_path):
    import os
    import sys
    broken = tmp_path / 'site' / 'torch'
    broken.mkdir(parents=True)
    (broken / '__init__.py').write_text('raise ImportError("libtorch_cpu.so: cannot open '
                                        'shared object file")\n')
    path = os.pathsep.join([str(tmp_path / 'site')] + sys.path)
    proc = subprocess.run([sys.executable, '-m', 'lingbot_ros.ros.cli', '--ros-args', '-r',
                           '__node:=lingbot_notorch'], env=dds_env(DOMAIN, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and 'Traceback' not in out, out
    assert 'configure failed: cannot load the model: ImportError: libtorch_cpu.so' in out, out


LIFECYCLE = """
import time, rclpy
rclpy.init(args=['x', '--ros-args', '-p', 'autostart:=false', '-p', 'image_size:=56',
                 '-p', 'scale_frames:=2', '-p', 'device:=cpu', '-r', '__node:=lingbot_cycle'])
from lingbot_ros.ros.node import LingbotNode
node = LingbotNode()
for round_ in (1, 2):
    t0 = time.monotonic()
    node.trigger_configure()
    busy = time.monotonic() - t0
    time.sleep(IDLE)  # a person between two ros2 lifecycle set calls
    t0 = time.monotonic()
    node.trigger_activate()
    busy += time.monotonic() - t0
    print(f'round {round_}: busy {busy:.2f} s; startup {node.info.startup}', flush=True)
    node.trigger_deactivate()
    node.trigger_cleanup()
node.destroy_node()
rclpy.shutdown()
"""


def test_lifecycle_transitions_log_and_start_up_time_leaves_idle_time_out():
    import re
    import sys
    idle = 3.0
    proc = subprocess.run([sys.executable, '-c', LIFECYCLE.replace('IDLE', str(idle))],
                          env=dds_env(DOMAIN), capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rounds = re.findall(r'round (\d): busy ([\d.]+) s; startup ([\d.]+) s from (\S+ ?\S*) to '
                        r'active: (.*)', proc.stdout)
    assert [r[0] for r in rounds] == ['1', '2'], out
    for _, busy, total, since, parts in rounds:
        ready = re.match(r'process start to node ready ([\d.]+) s', parts)
        before = float(ready.group(1)) if ready else 0.0
        assert float(total) - before < float(busy) + 0.3, out  # the idle wait is not in it
        seconds = [float(x) for x in re.findall(r'(?:^|; )[^;(]*? ([\d.]+) s', parts)]
        assert abs(sum(seconds) - float(total)) < 0.2, out  # the parts add up
        assert re.search(r'activate ([\d.]+) s', parts) and \
            float(re.search(r'activate ([\d.]+) s', parts).group(1)) < 1.0, out
    assert [r[3] for r in rounds] == ['process start', 'configure'], out
    assert out.count('inactive: unsubscribed, worker stopped') == 2, out
    assert out.count('unconfigured: model, sessions and maps freed') == 2, out


def test_an_empty_camera_topics_list_is_refused_as_the_yaml_says(tmp_path):
    bad = _yaml(tmp_path, '    camera_topics: []\n')
    rc, out = _run('--ros-args', '--params-file', str(bad), '-r', '__node:=lingbot_empty')
    assert rc == 1 and 'Traceback' not in out
    assert 'camera_topics=[] is invalid: expected a non-empty list' in out


def test_whole_numbers_for_floats_and_unknown_keys(tmp_path):
    # stall_error_s is a float; 5 is what people write. sliding_windw is a typo. Both fine
    # to start with: the value is taken, the typo gets a WARN that names it. --help-like
    # quick exit: a checkpoint that does not exist stops it right after the parameters.
    params = _yaml(tmp_path, '    stall_error_s: 5\n    path_period: 1\n'
                             '    sliding_windw: 32\n    camera_names: []\n')
    rc, out = _run('--ros-args', '--params-file', str(params), '-p',
                   'checkpoint:=/nonexistent/x.pt', '-r', '__node:=lingbot_lenient')
    assert 'stall_error_s' not in out, out  # no type error
    assert "unknown parameter 'sliding_windw' ignored (did you mean 'sliding_window'?)" in out
    assert rc == 1 and 'no such file' in out  # it got as far as loading the model


def test_the_node_comes_up_without_importing_flashinfer_or_torch(tmp_path):
    """Importing FlashInfer imports torch (5-6 s on a GPU machine) before the node is ready."""
    import os
    import sys
    fake = tmp_path / 'site' / 'flashinfer'
    fake.mkdir(parents=True)
    (fake / '__init__.py').write_text('import torch  # as the real one does\n')
    script = (
        'import sys, rclpy\n'
        'rclpy.init(args=["x", "--ros-args", "-p", "autostart:=false"])\n'
        'from lingbot_ros.ros.node import LingbotNode\n'
        'node = LingbotNode()\n'
        'print("flashinfer missing:", "flashinfer" in node.info.missing)\n'
        'print("imported:", sorted(m for m in ("torch", "flashinfer") if m in sys.modules))\n'
        'node.destroy_node()\n'
        'rclpy.shutdown()\n')
    path = os.pathsep.join([str(tmp_path / 'site')] + sys.path)
    proc = subprocess.run([sys.executable, '-c', script], env=dds_env(DOMAIN, PYTHONPATH=path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert 'flashinfer missing: False' in proc.stdout  # found where it is installed
    assert 'imported: []' in proc.stdout, proc.stdout


def test_the_node_and_its_services_do_not_import_their_callers():
    """The imports run cli -> node -> services, never back (lazy and TYPE_CHECKING ones too)."""
    import ast
    from pathlib import Path
    ros = Path(__file__).resolve().parents[2] / 'lingbot_ros' / 'ros'

    def imported(name):
        tree = ast.parse((ros / f'{name}.py').read_text())
        return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
            a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert 'lingbot_ros.ros.cli' not in imported('node') | imported('services')
    assert 'lingbot_ros.ros.node' not in imported('services')
    assert 'lingbot_ros.ros.node' in imported('cli')  # the entry point builds the node
