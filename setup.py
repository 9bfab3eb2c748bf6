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

"""ament_python package definition; also installable with pip into a plain venv."""

from glob import glob
import os

from setuptools import find_packages, setup

PACKAGE = 'lingbot_ros'

# What a plain virtual environment needs that a ROS distro would otherwise provide.
# docs/development.md ("Dependencies and why") says why each one is there.
RUNTIME = [
    'numpy>=1.24',
    'torch>=2.4',
    'safetensors>=0.4',
    'opencv-python-headless>=4.8',
    'Pillow>=10',
    'tqdm>=4.60',
    'PyYAML>=6.0',
    'rosbags>=0.10',
    'huggingface_hub>=0.20',
]
ROS_WHEELS = [
    'ros-rclpy',
    'ros-rmw-fastrtps-cpp',
    'ros-sensor-msgs',
    'ros-geometry-msgs',
    'ros-nav-msgs',
    'ros-diagnostic-msgs',
    'ros-std-srvs',
    'ros-lifecycle-msgs',
    'ros-ament-index-python',
]
TEST = [
    'pytest>=7',
    'hypothesis>=6',
    'pycolmap>=3.12',
    'ros-ament-flake8',
    'ros-ament-pep257',
    'flake8',
    'flake8-builtins',
    'flake8-comprehensions',
    'flake8-docstrings',
    'flake8-import-order',
    'flake8-quotes',
    'pydocstyle',
    'colcon-core',
    'colcon-ros',
    'colcon-python-setup-py',
]

setup(
    name=PACKAGE,
    version='0.1.0',
    packages=find_packages(exclude=['test', 'test.*']),
    package_data={PACKAGE: ['data/*.json', 'data/*.md', 'data/*.xml', 'data/*/*']},
    data_files=[
        ('share/ament_index/resource_index/packages', ['resource/' + PACKAGE]),
        ('share/' + PACKAGE, ['package.xml']),
        (os.path.join('share', PACKAGE, 'launch'), glob('launch/*.launch.py')),
        (os.path.join('share', PACKAGE, 'config'), glob('config/*.yaml') + glob('config/*.rviz')),
        (os.path.join('share', PACKAGE), ['lingbot_ros/data/fastdds_large_images.xml']),
    ],
    install_requires=['setuptools'],
    extras_require={'runtime': RUNTIME, 'ros': ROS_WHEELS, 'test': TEST},
    zip_safe=False,
    maintainer='lingbot_ros maintainers',
    maintainer_email='maintainers@lingbot-ros.invalid',
    description='LingBot-Map streaming 3D reconstruction as a ROS 2 node.',
    license='Apache-2.0',
    tests_require=['pytest'],
    entry_points={
        'console_scripts': [
            'lingbot_node = lingbot_ros.ros.cli:main',
            'lingbot-ros-replay = lingbot_ros.tools.replay:main',
            'lingbot-ros-play = lingbot_ros.tools.play:main',
            'lingbot-ros-bench = lingbot_ros.tools.bench:main',
            'lingbot-ros-demo = lingbot_ros.tools.demo:main',
            'lingbot-ros-prepare = lingbot_ros.tools.prepare:main',
        ],
    },
)
