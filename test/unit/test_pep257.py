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

"""ament_pep257 (docstring conventions) over the package."""

from pathlib import Path

from ament_pep257.main import main
import pytest

ROOT = Path(__file__).resolve().parents[2]
PATHS = [str(ROOT / p) for p in ('lingbot_ros', 'test', 'launch', 'setup.py', 'benchmarks')
         if (ROOT / p).exists()]


@pytest.mark.linter
@pytest.mark.pep257
def test_pep257():
    rc = main(argv=PATHS)
    assert rc == 0, 'docstring style errors (printed above)'
