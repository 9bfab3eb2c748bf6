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

"""Frames lost before the node: counted from each publisher's sequence numbers."""

from lingbot_ros.ros.counters import CameraCounters
from lingbot_ros.ros.intake import MAX_WRITERS, SequenceGaps


def info(seq, gid=b'a'):
    return {'publication_sequence_number': seq,
            'publisher_gid': {'implementation_identifier': 'rmw_fastrtps_cpp', 'data': gid}}


def test_a_jump_in_the_numbering_counts_the_frames_in_between():
    gaps = SequenceGaps()
    assert [gaps.observe(info(s)) for s in (1, 2, 3, 7, 8, 10)] == [0, 0, 0, 3, 0, 1]


def test_a_writer_that_restarts_loses_nothing():
    gaps = SequenceGaps()
    assert [gaps.observe(info(s)) for s in (40, 41, 1, 2, 5)] == [0, 0, 0, 0, 2]


def test_writers_are_followed_one_by_one():
    gaps = SequenceGaps()
    seen = [gaps.observe(info(s, g)) for s, g in
            ((1, b'a'), (100, b'b'), (2, b'a'), (103, b'b'), (3, b'a'))]
    assert seen == [0, 0, 0, 2, 0]


def test_no_numbering_counts_nothing():
    gaps = SequenceGaps()
    for missing in (None, {}, {'publication_sequence_number': None},
                    {'publication_sequence_number': 0}):
        assert gaps.observe(missing) == 0


def test_the_writers_followed_are_bounded():
    gaps = SequenceGaps()
    for w in range(3 * MAX_WRITERS):
        gaps.observe(info(1, bytes([w])))
    assert len(gaps._last) == MAX_WRITERS
    # the newest writers are the ones kept: their next sample is counted against them
    assert gaps.observe(info(3, bytes([3 * MAX_WRITERS - 1]))) == 1


def test_lost_frames_count_in_the_drop_rate():
    counters = CameraCounters(10)
    counters.on_lost(0)
    assert counters.lost_before_node == 0 and counters.drop_rate() == 0.0
    counters.on_processed(0.0, None, None)
    counters.on_lost(3)
    assert counters.lost_before_node == 3
    assert counters.drop_rate() == 0.75
