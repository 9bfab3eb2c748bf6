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

"""The package manifest and setup data say what a ROS 2 user and rosdep expect."""

from pathlib import Path
import xml.etree.ElementTree as ET

ROOT = Path(__file__).resolve().parents[2]

EXEC_DEPENDS = {'rclpy', 'sensor_msgs', 'geometry_msgs', 'nav_msgs', 'diagnostic_msgs',
                'std_srvs', 'lifecycle_msgs', 'cv_bridge', 'tf2_ros', 'launch', 'launch_ros',
                'python3-numpy', 'python3-opencv', 'python3-torch'}
TEST_DEPENDS = {'ament_copyright', 'ament_flake8', 'ament_pep257', 'python3-pytest'}


def _manifest():
    return ET.parse(ROOT / 'package.xml').getroot()


def test_package_xml_is_format_3_ament_python():
    root = _manifest()
    assert root.get('format') == '3'
    assert root.findtext('name') == 'lingbot_ros'
    assert root.findtext('license') == 'Apache-2.0'
    assert root.find('export/build_type').text == 'ament_python'


def test_package_xml_declares_runtime_and_test_dependencies():
    root = _manifest()
    exec_deps = {e.text for e in root.findall('exec_depend')}
    test_deps = {e.text for e in root.findall('test_depend')}
    assert EXEC_DEPENDS <= exec_deps, EXEC_DEPENDS - exec_deps
    assert TEST_DEPENDS <= test_deps, TEST_DEPENDS - test_deps


def test_setup_cfg_puts_scripts_where_ros2_run_looks():
    text = (ROOT / 'setup.cfg').read_text()
    assert 'script_dir=$base/lib/lingbot_ros' in text
    assert 'install_scripts=$base/lib/lingbot_ros' in text


def test_resource_marker_and_licence_exist():
    assert (ROOT / 'resource' / 'lingbot_ros').is_file()
    assert 'Apache License' in (ROOT / 'LICENSE').read_text()
