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

``ros2 launch lingbot_ros lingbot.launch.py image_topic:=/camera/color/image_raw``.
By default the node configures and activates itself (``autostart:=true``); with
``autostart:=false`` it waits in ``unconfigured`` for a lifecycle manager (nav2's, or
``ros2 lifecycle set``). The package's share directory is found when the launch runs
(``FindPackageShare``), not when this file is imported. ``rviz:=true`` also starts rviz2
with ``config/lingbot.rviz`` where rviz2 is installed, and says so where it is not.
"""

import shutil

from launch import LaunchContext, LaunchDescription
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue
from launch_ros.substitutions import FindPackageShare

PACKAGE = 'lingbot_ros'
EXECUTABLE = 'lingbot_node'
PARAMS_FILE = 'lingbot.yaml'
RVIZ_FILE = 'lingbot.rviz'


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


def generate_launch_description() -> LaunchDescription:
    """Describe the arguments and the one lifecycle node."""
    default_params = PathJoinSubstitution([FindPackageShare(PACKAGE), 'config', PARAMS_FILE])
    arguments = [
        DeclareLaunchArgument('params_file', default_value=default_params,
                              description='YAML file with the lingbot_node parameters '
                                          '(see config/lingbot.yaml for every one).'),
        DeclareLaunchArgument('namespace', default_value='',
                              description='Namespace of the node and its topics.'),
        DeclareLaunchArgument('image_topic', default_value='image',
                              description='Camera image topic, remapped onto the node input '
                                          '"image" (one camera; list several in '
                                          'camera_topics instead). With input_transport '
                                          'compressed the node reads <image_topic>/compressed.'),
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
    node = LifecycleNode(
        package=PACKAGE,
        executable=EXECUTABLE,
        name=EXECUTABLE,
        namespace=LaunchConfiguration('namespace'),
        output='screen',
        emulate_tty=True,
        parameters=[LaunchConfiguration('params_file'), {
            'use_sim_time': ParameterValue(LaunchConfiguration('use_sim_time'), value_type=bool),
            'autostart': ParameterValue(LaunchConfiguration('autostart'), value_type=bool)}],
        remappings=[('image', LaunchConfiguration('image_topic'))],
        arguments=['--ros-args', '--log-level', LaunchConfiguration('log_level')],
    )
    rviz = OpaqueFunction(function=_rviz, condition=IfCondition(LaunchConfiguration('rviz')))
    return LaunchDescription(arguments + [node, rviz])
