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

"""A clean copy of the package builds with colcon into the layout ROS 2 tools expect."""

import os
from pathlib import Path
import shutil
import subprocess
import sys

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXECUTABLES = ('lingbot_node', 'lingbot-ros-replay', 'lingbot-ros-play', 'lingbot-ros-demo',
               'lingbot-ros-bench')


def _tracked_files():
    out = subprocess.run(['git', 'ls-files', '--cached', '--others', '--exclude-standard'],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.fixture(scope='module')
def install_tree(tmp_path_factory):
    here = str(Path(sys.executable).parent)
    colcon = shutil.which('colcon', path=here) or shutil.which('colcon')
    if colcon is None:
        pytest.skip('colcon is not installed')
    if shutil.which('git') is None or not (ROOT / '.git').exists():
        pytest.skip('needs a git checkout to know the package files')
    ws = tmp_path_factory.mktemp('ws')
    src = ws / 'src' / 'lingbot_ros'
    for rel in _tracked_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, src / rel)
    env = dict(os.environ, PATH=f'{Path(sys.executable).parent}{os.pathsep}{os.environ["PATH"]}')
    result = subprocess.run([colcon, 'build', '--base-paths', 'src'], cwd=ws, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return ws / 'install' / 'lingbot_ros'


def test_colcon_installs_share_files(install_tree):
    share = install_tree / 'share' / 'lingbot_ros'
    assert (share / 'package.xml').is_file()
    assert (install_tree / 'share' / 'ament_index' / 'resource_index' / 'packages'
            / 'lingbot_ros').is_file()
    launch = sorted(p.name for p in (share / 'launch').glob('*.launch.py'))
    config = sorted(p.name for p in (share / 'config').iterdir())
    assert launch == sorted(p.name for p in (ROOT / 'launch').glob('*.launch.py'))
    assert config == sorted(p.name for p in (ROOT / 'config').iterdir())
    assert 'lingbot.launch.py' in launch and 'lingbot.yaml' in config
    assert 'lingbot.rviz' in config


def test_colcon_installs_executables_for_ros2_run(install_tree):
    lib = install_tree / 'lib' / 'lingbot_ros'
    for name in EXECUTABLES:
        exe = lib / name
        assert exe.is_file() and os.access(exe, os.X_OK), name


def test_colcon_installs_the_python_package(install_tree):
    found = list(install_tree.glob('lib/python*/site-packages/lingbot_ros/__init__.py'))
    assert found, 'lingbot_ros package not installed'
    for layer in ('model', 'cache', 'streaming', 'ros', 'tools'):
        assert (found[0].parent / layer / '__init__.py').is_file(), layer
