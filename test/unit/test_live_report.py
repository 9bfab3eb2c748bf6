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

"""The live benchmark's report counts the rate it processed from what its counter saw."""

import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location('live_node', ROOT / 'benchmarks' / 'live_node.py')
live = importlib.util.module_from_spec(_spec)
sys.modules['live_node'] = live  # dataclasses look their module up
_spec.loader.exec_module(live)

NS = 1_000_000_000


def _record(frames, rate, kept_every, lag_s=0.07, warm_every=1, warmup=0):
    """Record a camera at ``rate``; every ``kept_every``-th frame gets a pose after ``lag_s``."""
    rec = live.CameraRecord(name='camera', topic='/camera/image_raw')
    for i in range(frames):
        stamp = 10 * NS + int(i * NS / rate)
        rec.stamps.append(stamp)
        every = warm_every if i < warmup else kept_every
        if i % every == 0:
            rec.pose_at[stamp] = stamp + int(lag_s * NS)
    return rec


def test_the_rate_is_that_of_the_poses_after_the_warm_up():
    # 30 Hz, one pose in three after a warm-up that processed every frame: 10 Hz, not more
    rec = _record(900, 30.0, kept_every=3, warm_every=1, warmup=150)
    assert live.processed_hz(rec, warmup=150) == pytest.approx(10.0, rel=0.01)
    assert live.processed_hz(rec, warmup=0) > 11.0  # the warm-up's frames would count


def test_without_two_poses_after_the_warm_up_there_is_no_rate():
    rec = _record(40, 15.0, kept_every=1)
    assert live.processed_hz(rec, warmup=39) is None
    assert live.processed_hz(live.CameraRecord('c', '/c'), warmup=0) is None


def test_each_block_reports_the_stages_tails_beside_their_medians():
    rec = _record(40, 15.0, kept_every=1)
    for s in rec.stamps:
        rec.image_at[s] = s + 2 * NS // 1000
    diag = {f'{st.value}_ms_p50': '1.0' for st in live.Stage}
    diag.update({f'{st.value}_ms_p99': '3.0 ms' for st in live.Stage}, model_ms_p99='17.5')
    rec.diag.append((0.0, diag))
    rows = live.block_rows(rec, warmup=0, block=40, node_diag=[])
    assert rows[0]['stage_ms_p99']['model'] == 17.5
    assert rows[0]['stage_ms_p99']['arrival'] == 3.0
    assert rows[0]['counter_arrival_ms_p99'] == pytest.approx(2.0)
    report = {'date': 'd', 'cameras': 1, 'rate_hz': 15.0, 'frames_per_camera': 40,
              'size': None, 'seconds_to_active': 1.0, 'node': {}, 'viewer': {},
              'cameras_report': {'camera': {'totals': live._totals(rec, 0), 'blocks': rows}}}
    text = live.text_report(report)
    assert 'stages p99 ms: arrival 3.0' in text and 'model 17.5' in text
