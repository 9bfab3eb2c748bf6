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
The parts of ``side_by_side.py``: the reference's profiler and our bench, timed in one call.

``settings`` (what both sides run), ``reference`` (its checkout, command line and printed
summary), ``processes`` (child processes with a log and a timeout, the versions they see),
``runs`` (one side's run for a setting), ``report`` (one setting's result, its text and the
results file). Nothing here imports our package at module level: the bench runs in a child.
"""
