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

"""The ROS floor's report: per block, the relay's times and the counter's, from stamps."""

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'benchmarks'))  # ros_floor imports live_node beside it
_spec = importlib.util.spec_from_file_location('ros_floor', ROOT / 'benchmarks' / 'ros_floor.py')
floor = importlib.util.module_from_spec(_spec)
sys.modules['ros_floor'] = floor
_spec.loader.exec_module(floor)

MS = 1_000_000


def test_blocks_split_arrival_sends_and_the_way_out_after_the_warm_up():
    rec = floor.live_node.CameraRecord('camera', '/live/camera/image_raw')
    relayed = {}
    for i in range(30):
        stamp = 10**12 + i * 66 * MS
        rec.stamps.append(stamp)
        warm = 50 if i < 10 else 0  # the warm-up's frames are slow: they must not count
        relayed[stamp] = (stamp + (2 + warm) * MS, stamp + (5 + warm) * MS)
        rec.image_at[stamp] = stamp + 3 * MS
        rec.pose_at[stamp] = stamp + 4 * MS
        if i != 20:  # one frame's last message never came
            rec.last_at[stamp] = stamp + 7 * MS
    rows = floor.blocks(rec, relayed, warmup=10, block=10)
    got = [(r['first_frame'], r['frames'], r['relayed']) for r in rows]
    assert got == [(10, 10, 10), (20, 10, 10)]
    for r in rows:
        assert r['relay_arrival_ms']['p50'] == pytest.approx(2.0)
        assert r['relay_send_ms']['p50'] == pytest.approx(3.0)
        assert r['pose_ms']['p99'] == pytest.approx(4.0)
        assert r['last_ms']['p50'] == pytest.approx(7.0)
        assert r['counter_arrival_ms']['p50'] == pytest.approx(3.0)
    text = floor.text_report({'date': 'd', 'rate_hz': 15.0, 'frames': 30, 'size': '640x480',
                              'points': 6400, 'depth': True, 'threads': True,
                              'counter_saw': 30, 'relayed': 30, 'viewer': {}, 'blocks': rows})
    assert "through the node's threads" in text and '7.0/7.0' in text


def test_a_short_last_block_is_left_out():
    rec = floor.live_node.CameraRecord('camera', '/c')
    rec.stamps = [10**12 + i * MS for i in range(14)]
    assert len(floor.blocks(rec, {}, warmup=0, block=10)) == 1  # 4 < half a block
    assert floor.blocks(rec, {}, warmup=0, block=10)[0]['relayed'] == 0
