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

"""A call's stats: typed in the session, the fixtures' record when written out."""

import json
import math
from pathlib import Path

from lingbot_ros.streaming.call_stats import (Attended, CacheDecision, CallPhase, CallStats,
                                              Resident)
import pytest

DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity'


def _begun(phase=CallPhase.STREAM, decided=None) -> CallStats:
    return CallStats(call_index=13, window_index=0, frame_indices=(15,), phase=phase,
                     rope_time_index_start=9,
                     attended=Attended(agg_tokens_block0=186,
                                       camera_frames_per_iter=(10, 10, 10, 10)),
                     is_keyframe=decided)


def _after() -> Resident:
    return Resident(total_frames_processed=10, patch_frames_resident=7,
                    special_frames_resident=10, visible_kv_tokens=186, camera_frame_idx=16,
                    camera_cache_frames=(10, 10, 10, 10))


def test_the_record_is_the_fixtures_step_in_their_key_names():
    step = json.loads((DATA / 'keyframes' / 'kv_stats_paged.json').read_text())['steps'][-1]
    record = _begun(decided=True).finished(True, _after()).as_record()
    step['after_forward'].pop('paged')  # the reference's page counters: not ours to mirror
    assert record == step


def test_a_decision_known_before_the_forward_writes_no_flow():
    done = _begun(decided=False).finished(False, _after())
    assert done.decision is None and done.flow_px is None
    assert 'decision' not in done.as_record() and 'flow_magnitude' not in done.as_record()


@pytest.mark.parametrize('keep,want', [(True, CacheDecision.COMMIT),
                                       (False, CacheDecision.ROLLBACK)])
def test_a_decision_after_the_forward_is_named_by_the_enum(keep, want):
    done = _begun().finished(keep, _after(), flow_px=2.5)
    assert done.is_keyframe is keep and done.decision is want and done.flow_px == 2.5
    record = done.as_record()
    assert record['decision'] == want.value and record['flow_magnitude'] == 2.5


def test_an_open_call_has_no_after_and_is_unchanged_by_finishing():
    begun = _begun()
    assert 'after_forward' not in begun.as_record() and begun.is_keyframe is None
    begun.finished(True, _after(), math.nan)
    assert begun.after is None  # frozen: finishing returns a new record


def test_only_a_stream_call_continues_its_window():
    assert [p.first for p in CallPhase] == [True, False, True]
    assert [p.value for p in CallPhase] == ['scale', 'stream', 'reseed']
