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

"""Start-up reporting: the phases' sum and the warm-up's breakdown, as the node logs them."""

from lingbot_ros.ros.startup import Phases, warm_up
from lingbot_ros.streaming.engine import WarmUpTimes


class _Engine:
    compiled_blocks = 3

    def __init__(self, fail: bool = False) -> None:
        self.fail, self.calls = fail, []

    def warm_up(self, cfg, hw, cameras=1) -> WarmUpTimes:
        self.calls.append((cfg, hw, cameras))
        if self.fail:
            raise RuntimeError('out of memory')
        return WarmUpTimes((('scale call', 0.25), ('scale call', 4.0),
                            ('first frame with depth', 2.5),
                            ('cameras after the first: scale call', 0.5)))


def test_the_warm_up_says_where_its_time_went_and_hands_the_parts_to_the_phases():
    said, warned = [], []
    engine = _Engine()
    parts = warm_up(engine, 'cfg', 2, said.append, warned.append)
    assert engine.calls[0][2] == 2 and not warned
    assert parts == {'scale call': 4.25, 'first frame with depth': 2.5,
                     'cameras after the first: scale call': 0.5}
    assert 'took 7.2 s (scale call 4.2 s, first frame with depth 2.5 s, cameras after the ' \
        'first: scale call 0.5 s)' in said[-1]
    phases = Phases(before=1.0)
    phases.mark('warm-up', parts)
    assert 'warm-up' in phases.text() and 'first frame with depth 2.50 s' in phases.text()


def test_a_failed_warm_up_warns_and_leaves_the_work_to_the_first_frames():
    said, warned = [], []
    assert warm_up(_Engine(fail=True), 'cfg', 1, said.append, warned.append) == {}
    assert len(warned) == 1 and 'out of memory' in warned[0] and 'first frames' in warned[0]
