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
Start lingbot_node as a managed (lifecycle) node with a parameter file.

``ros2 launch lingbot_ros lingbot.launch.py image_topic:=/camera/color/image_raw``, or for
several cameras ``camera_topics:="[/cam_front/image_raw, /cam_rear/image_raw]"
camera_names:="[front, rear]"`` (they override the parameter file's lists).
``params_file`` (default: the package's ``config/lingbot.yaml``) is loaded first, then
``extra_params_file`` if given, whose values win: advanced parameters, or an overlay such
as ``config/lingbot_8gb.yaml``. A parameter neither file names keeps its default. By default
the node configures and activates itself (``autostart:=true``); with ``autostart:=false``
it waits in ``unconfigured`` for a lifecycle manager (nav2's, or ``ros2 lifecycle set``).
The package's share directory is found when the launch runs (``FindPackageShare``), not
when this file is imported. ``rviz:=true`` also starts rviz2 with ``config/lingbot.rviz``
where rviz2 is installed, and says so where it is not.

When the node stops on its own with an error (a parameter it refuses, a checkpoint it
cannot load), the launch says so in one ERROR line that repeats the node's reason, and
``ros2 launch`` ends with a non-zero exit status instead of 0.
"""

import re
import shutil
from typing import List

from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, RegisterEventHandler
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit, OnProcessIO
from launch.events.process import ProcessExited, ProcessIO
import launch.logging
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = 'lingbot_ros'
EXECUTABLE = 'lingbot_node'
PARAMS_FILE = 'lingbot.yaml'
RVIZ_FILE = 'lingbot.rviz'
CAMERA_LISTS = ('camera_topics', 'camera_names')
# what the node prints when it stops on an error of its own (cli.py, node.py)
NODE_ERROR = re.compile(r'((?:configure failed|activate refused|cannot start): .*)')
ANSI = re.compile(r'\x1b\[[0-9;]*m')  # emulate_tty's colours


class NodeStopped(RuntimeError):
    """lingbot_node ended on its own with an error: the launch ends with one too."""


def _rviz_installed() -> bool:
    try:
        from ament_index_python.packages import get_package_prefix
        get_package_prefix('rviz2')
        return True
    except Exception:  # noqa: BLE001 (PackageNotFoundError, no ament index at all)
        return shutil.which('rviz2') is not None


def _rviz(context: LaunchContext) -> list:
    """Start rviz2 with our view where it is installed; otherwise say how to get it."""
    if not _rviz_installed():
        return [LogInfo(msg='rviz:=true, but rviz2 is not installed here (it comes with '
                            'ros-<distro>-rviz2 / the desktop install); the node runs '
                            'without it')]
    view = PathJoinSubstitution([FindPackageShare(PACKAGE), 'config', RVIZ_FILE])
    return [Node(package='rviz2', executable='rviz2', name='lingbot_rviz', output='screen',
                 arguments=['-d', view.perform(context)])]


def _camera_list(name: str, text: str) -> List[str]:
    """Read a launch argument such as ``[/cam_front/image_raw, /cam_rear/image_raw]``."""
    import yaml
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f'{name}:={text!r} is not a list: {exc}') from None
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not value or \
            not all(isinstance(v, str) and v for v in value):
        raise ValueError(f'{name}:={text!r} is invalid: expected a list of names, e.g. '
                         '"[/cam_front/image_raw, /cam_rear/image_raw]"')
    return value


class _ExitWatch:
    """Remember the node's own error line; end the launch with it if the node fails."""

    def __init__(self) -> None:
        self.reason = ''

    def output(self, event: ProcessIO) -> None:
        for line in ANSI.sub('', event.text.decode(errors='replace')).splitlines():
            found = NODE_ERROR.search(line)
            if found:
                self.reason = found.group(1).strip()

    def exited(self, event: ProcessExited, context: LaunchContext) -> None:
        if event.returncode == 0 or context.is_shutdown:
            return  # a clean exit, or one the launch itself asked for (Ctrl-C)
        reason = self.reason or 'see its output above'
        launch.logging.get_logger('lingbot.launch').error(
            f'{EXECUTABLE} stopped with exit code {event.returncode}: {reason}')
        raise NodeStopped(f'{EXECUTABLE} exited with code {event.returncode} (see the error '
                          'above); the launch ends')


def _node(context: LaunchContext) -> list:
    """Build the lifecycle node (cameras from the arguments, if given) and its exit watch."""
    files = [LaunchConfiguration('params_file')]
    extra = LaunchConfiguration('extra_params_file').perform(context).strip()
    if extra:  # after the main file: its values win
        files.append(extra)
    parameters = files + [{
        'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool),
        'autostart': ParameterValue(LaunchConfiguration('autostart'), value_type=bool)}]
    cameras = {}
    for name in CAMERA_LISTS:
        text = LaunchConfiguration(name).perform(context).strip()
        if text:
            cameras[name] = _camera_list(name, text)
    if cameras:  # over the parameter file's lists
        parameters.append(cameras)
    node = LifecycleNode(
        package=PACKAGE,
        executable=EXECUTABLE,
        name=EXECUTABLE,
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=parameters,
        remappings=[('image', LaunchConfiguration('image_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )
    watch = _ExitWatch()
    return [RegisterEventHandler(OnProcessIO(target_action=node, on_stdout=watch.output,
                                             on_stderr=watch.output)),
            RegisterEventHandler(OnProcessExit(target_action=node, on_exit=watch.exited)),
            node]


def generate_launch_description() -> LaunchDescription:
    """Describe the arguments and the one lifecycle node."""
    default_params = PathJoinSubstitution([FindPackageShare(PACKAGE), 'config', PARAMS_FILE])
    arguments = [
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='YAML file with the lingbot_node parameters '
                                          '(config/lingbot.yaml: the main ones).'),
        DeclareLaunchArgument('extra_params_file', default_value='',
                              description='A second parameter file, loaded after '
                                          'params_file (its values win): advanced '
                                          'parameters (config/advanced.yaml lists them) or '
                                          'an overlay such as config/lingbot_8gb.yaml.'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='Namespace of the node and its topics.'),
        DeclareLaunchArgument('image_topic', default_value='image',
                              description='Camera image topic, remapped onto the node input '
                                          '"image" (one camera; camera_topics for several). '
                                          'With input_transport compressed the node reads '
                                          '<image_topic>/compressed.'),
        DeclareLaunchArgument('camera_topics', default_value='',
                              description='Several cameras: their image topics, e.g. '
                                          '"[/cam_front/image_raw, /cam_rear/image_raw]" '
                                          "(empty: the parameter file's camera_topics)."),
        DeclareLaunchArgument('camera_names', default_value='',
                              description='One name per camera_topics entry, e.g. "[front, '
                                          'rear]" (empty: the parameter file\'s, or names '
                                          'derived from the topics).'),
        DeclareLaunchArgument('autostart', default_value='true',
                              description='Configure and activate on start; false leaves the '
                                          'node unconfigured for a lifecycle manager.'),
        DeclareLaunchArgument('rviz', default_value='false',
                              description='Also start rviz2 with config/lingbot.rviz (the '
                                          'map, path, pose and depth), where installed.'),
        DeclareLaunchArgument('use_sim_time', default_value='false',
                              description='Use /clock (true when playing a bag with --clock).'),
        DeclareLaunchArgument('log_level', default_value='info',
                              description='Logger level: debug, info, warn, error or fatal.'),
    ]
    rviz = OpaqueFunction(function=_rviz, condition=IfCondition(LaunchConfiguration('rviz')))
    return LaunchDescription(arguments + [OpaqueFunction(function=_node), rviz])
