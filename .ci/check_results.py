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
Fail a `colcon test` run that ran nothing, or that silently left test files out.

`colcon test-result` counts what pytest reported; a module-level skip under the
launch_testing plugin once reported "1 test, 1 skipped" for the whole suite and exit 0.
This reads the JUnit file and requires: no failures or errors, at least one test run,
and every test_*.py file under the test folder present with at least one collected test.
Usage: python .ci/check_results.py build/lingbot_ros/pytest.xml test
"""

from collections import Counter
from pathlib import Path
import sys
import xml.etree.ElementTree as ET


def main(junit: str, test_dir: str) -> int:
    root = ET.parse(junit).getroot()
    cases = list(root.iter('testcase'))
    files, outcome = Counter(), Counter()
    for case in cases:
        module = case.get('classname', '').split('.')
        name = next((p for p in module if p.startswith('test_')), '?')
        files[name] += 1
        kind = next((c.tag for c in case if c.tag in ('failure', 'error', 'skipped')), 'passed')
        outcome[kind] += 1
    expected = {p.stem for p in Path(test_dir).rglob('test_*.py')}
    missing = sorted(expected - set(files))
    print(f'check_results: {len(cases)} tests in {len(files)} files: '
          + ', '.join(f'{n} {k}' for k, n in sorted(outcome.items())))
    problems = []
    if outcome['passed'] == 0:
        problems.append('no test ran')
    if outcome['failure'] or outcome['error']:
        problems.append(f"{outcome['failure']} failed, {outcome['error']} errors")
    if missing:
        problems.append('test files with no collected test: ' + ', '.join(missing))
    for problem in problems:
        print(f'check_results: FAIL: {problem}', file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(*sys.argv[1:3]))
