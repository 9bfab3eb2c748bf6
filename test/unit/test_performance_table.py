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

"""docs/performance.md is what benchmarks/performance_table.py makes of the committed results."""

import importlib.util
from pathlib import Path
import shutil
import sys

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'benchmarks'))
_spec = importlib.util.spec_from_file_location('performance_table',
                                               ROOT / 'benchmarks' / 'performance_table.py')
table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(table)
rf = table.rf


def test_the_committed_page_is_what_the_committed_results_make():
    page = (ROOT / 'docs' / 'performance.md').read_text()
    assert page == table.render(ROOT / 'benchmarks' / 'results'), (
        'docs/performance.md is stale: run python benchmarks/performance_table.py')


def test_a_new_run_shows_as_its_row_and_check_says_the_page_is_stale(tmp_path):
    results = tmp_path / 'results'
    shutil.copytree(ROOT / 'benchmarks' / 'results', results)
    page = tmp_path / 'performance.md'
    assert table.main(['--results', str(results), '--out', str(page)]) == 0
    assert table.main(['--results', str(results), '--out', str(page), '--check']) == 0
    rf.record(results / 'side_by_side.json', rf.SideBySideRun(
        setting=rf.Setting.KF2_IT1, config='shipped', gpu='NVIDIA H200', commit='abcdef0',
        date='2027-01-02', reference_ms_mid=50.0, reference_ms_overall=48.0,
        ours_ms_steady=20.0, ours_ms_overall=18.5))
    assert table.main(['--results', str(results), '--out', str(page), '--check']) == 1
    assert table.main(['--results', str(results), '--out', str(page)]) == 0
    row = ('| 1 camera iteration, keyframe interval 2 | `shipped` | NVIDIA H200 | abcdef0 | '
           '2027-01-02 | 50.0 (48.0) | 20.0 (18.5) | **2.50** |')
    assert row in page.read_text().splitlines()
