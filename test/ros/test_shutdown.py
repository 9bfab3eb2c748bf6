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

"""The stop latch of the node process: the first signal asks, later ones are only recorded."""

import os
import signal

from lingbot_ros.ros.shutdown import StopRequest


def test_the_first_signal_asks_for_the_stop_and_later_ones_change_nothing():
    # what was there before (Python's default, or SIG_IGN where the suite itself was
    # started in the background of a shell) is what restore() must leave
    before = signal.getsignal(signal.SIGINT)
    stop = StopRequest()
    assert stop.install()
    try:
        os.kill(os.getpid(), signal.SIGINT)   # a terminal's Ctrl-C ...
        os.kill(os.getpid(), signal.SIGINT)   # ... launch's own SIGINT
        os.kill(os.getpid(), signal.SIGTERM)  # ... and its SIGTERM: none raises
        assert stop.requested and stop.reason == 'SIGINT'
        assert stop.signals == ['SIGINT', 'SIGINT', 'SIGTERM']
        stop.request('lifecycle shutdown')
        assert stop.reason == 'SIGINT'  # the first reason stays
    finally:
        stop.restore()
    assert signal.getsignal(signal.SIGINT) == before


def test_after_the_stop_the_process_ignores_stop_signals():
    stop = StopRequest()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop.ignore_from_now()  # SIG_IGN survives interpreter exit; a Python handler not
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGINT)
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_lifecycle_shutdown_asks_without_a_signal():
    stop = StopRequest()
    stop.request('lifecycle shutdown')
    assert stop.requested and stop.reason == 'lifecycle shutdown' and stop.signals == []
