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
Fast DDS settings that camera-sized images need between processes on one host.

Fast DDS sends to a reader on the same host through shared memory, from a segment of 512 KB
by default. A 640x480 rgb8 image is 921,600 bytes: its fragments overwrite each other in that
segment and a best-effort reader loses frames before any callback sees them (measured here:
67 % of a 15 Hz camera arrived with the default, 100 % with a 64 MB segment;
``benchmarks/dds_images.py``). The segment that matters is the *sender's*: the camera
driver's for images in, the node's for depth and clouds out. So the node and
``lingbot-ros-play`` use the package's profile unless the environment names one already,
and the README tells how to give a camera driver the same.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

PROFILE = Path(__file__).resolve().parents[1] / 'data' / 'fastdds_large_images.xml'
PROFILE_VARIABLES = ('FASTDDS_DEFAULT_PROFILES_FILE', 'FASTRTPS_DEFAULT_PROFILES_FILE')


def use_large_image_profile(environ: Optional[dict] = None) -> Optional[str]:
    """
    Point Fast DDS at the package's profile, before rclpy starts; say what was done.

    Returns a line for the log, or None when nothing was changed: another RMW is chosen, the
    environment names a profile or builtin transports of its own, or the file is missing.
    """
    env = os.environ if environ is None else environ
    rmw = env.get('RMW_IMPLEMENTATION', 'rmw_fastrtps_cpp') or 'rmw_fastrtps_cpp'
    if not rmw.startswith('rmw_fastrtps'):
        return None
    if any(env.get(v) for v in PROFILE_VARIABLES) or env.get('FASTDDS_BUILTIN_TRANSPORTS'):
        return None
    if not PROFILE.is_file():
        return None
    env['FASTDDS_DEFAULT_PROFILES_FILE'] = str(PROFILE)
    return (f'Fast DDS: using {PROFILE} (a 64 MB shared-memory segment, so camera-sized '
            'images are not lost between processes); set FASTDDS_DEFAULT_PROFILES_FILE to '
            'use a profile of your own')
