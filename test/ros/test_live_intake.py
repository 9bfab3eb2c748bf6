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
A camera's full frame rate reaches the node over DDS, and what does not is counted.

A 640x480 rgb8 image (921,600 bytes) does not fit Fast DDS's default 512 KB shared-memory
segment; a best-effort reader then loses frames before any callback runs. The node and
lingbot-ros-play use the package's Fast DDS profile, and the node counts gaps in each
publisher's sequence numbers as frames lost before the node.
"""

import os
from pathlib import Path
import subprocess
import sys

from conftest import dds_domain, dds_env, node_executable
from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros.ros.probe import Probe, status_of
import pytest

DOMAIN = dds_domain(123)
ROOT = Path(__file__).resolve().parents[2]
NAME = 'lingbot_intake'
TOPIC = '/intake/image_raw'
# 200 frames: at 60, the 99 % meant every frame, and the 2-core CI machine once lost one
# best-effort sample under load (59 of 60); 99 % of 200 lets two go, each one counted
FRAMES, RATE = 200, 15.0


def _node(log, env):
    cmd = [str(node_executable()), '--ros-args', '-r', f'__node:={NAME}',
           '-p', f'camera_topics:=[{TOPIC}]', '-p', 'image_size:=56', '-p', 'scale_frames:=2',
           '-p', 'publish_tf:=false', '-p', 'diagnostics_period:=0.2']
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def _player(env):
    exe = Path(sys.executable).with_name('lingbot-ros-play')
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-m', 'lingbot_ros.tools.play']
    return subprocess.run(cmd + ['scene', '--width', '640', '--height', '480', '--topic', TOPIC,
                                 '--rate', str(RATE), '--count', str(FRAMES), '--quiet',
                                 '--wait', '60'], env=env, timeout=120, capture_output=True)


def _camera(probe, diags):
    """Return the newest camera status values of the node (None before the first)."""
    for d in reversed(diags):
        s = status_of(d, f'/{NAME}: camera camera')
        if s is not None:
            return s[2]
    return None


def _run(tmp_path, player_env):
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('intake_probe', domain_id=DOMAIN)
    diags = probe.collect(DiagnosticArray, '/diagnostics')
    log = open(tmp_path / 'node.log', 'w+')
    node = _node(log, dds_env(DOMAIN))
    try:
        assert probe.spin_until(lambda: (_camera(probe, diags) or {}).get('topic') == TOPIC,
                                90), 'the node did not start'
        played = _player(player_env)
        assert played.returncode == 0, played.stderr.decode()[-2000:]

        def settled():
            c = _camera(probe, diags) or {}
            return int(c.get('frames_received', 0)) + int(c.get('frames_lost_before_node', 0)) \
                >= FRAMES
        probe.spin_until(settled, 15)
        probe.spin_for(0.5)
        return _camera(probe, diags)
    finally:
        node.terminate()
        node.wait(30)
        probe.close()
        log.seek(0)
        text = log.read()
        log.close()
        assert 'Traceback' not in text, text[-3000:]


def test_a_640x480_camera_at_15_hz_is_received_in_full(tmp_path):
    cam = _run(tmp_path, dds_env(DOMAIN))
    received, lost = int(cam['frames_received']), int(cam['frames_lost_before_node'])
    assert received >= 0.99 * FRAMES, cam
    # a frame lost between two taken ones is counted; one lost before the first or after the
    # last taken has no number on the other side to reveal it (the CI run at 842d332: 199
    # received, the missing one at an end), so up to the missing ones, never more
    assert 0 <= lost <= FRAMES - received, cam


def test_frames_lost_on_the_way_are_counted(tmp_path):
    # the player without the package's profile: Fast DDS's own shared-memory segment
    cam = _run(tmp_path, dds_env(DOMAIN, FASTDDS_BUILTIN_TRANSPORTS='DEFAULT'))
    received, lost = int(cam['frames_received']), int(cam['frames_lost_before_node'])
    # never more than was sent: no frame counted twice, nor one counted both ways
    assert received + lost <= FRAMES, cam
    # a frame lost after the last one taken has no later number to reveal it (under load the
    # whole tail can go that way), so the count can fall short, never over
    if lost == 0:
        pytest.skip(f'{received} of {FRAMES} arrived, no gap between them: nothing to count')
    assert received < FRAMES
