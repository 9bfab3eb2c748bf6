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

"""lingbot-ros-prepare writes the bytecode an install left out, where Python will read it."""

import importlib
import importlib.util
import os
from pathlib import Path
import subprocess
import sys

from lingbot_ros.tools import bytecode
import pytest


@pytest.fixture
def package(tmp_path, monkeypatch):
    """Import a two-module package without writing its bytecode; return its modules."""
    root = tmp_path / 'src'
    (root / 'pkgbc').mkdir(parents=True)
    (root / 'pkgbc' / '__init__.py').write_text('VALUE = 1\n')
    (root / 'pkgbc' / 'inner.py').write_text('def f():\n    return 2\n')
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, 'dont_write_bytecode', True)
    modules = [importlib.import_module('pkgbc'), importlib.import_module('pkgbc.inner')]
    yield modules
    for name in ('pkgbc.inner', 'pkgbc'):
        sys.modules.pop(name, None)


def test_missing_bytecode_is_written_where_python_reads_it(package):
    sources = bytecode.loaded_sources(package)
    assert [s.name for s, _ in sources] == ['__init__.py', 'inner.py']
    assert not any(bytecode.is_current(s, c) for s, c in sources)
    report = bytecode.write_missing(sources)
    assert (report.modules, report.missing, report.written, report.failed) == (2, 2, 2, {})
    assert '2 of 2 modules' in report.text() and 'wrote 2' in report.text()
    for source, cached in sources:
        assert cached == Path(importlib.util.cache_from_source(str(source)))
        assert bytecode.is_current(source, cached)
    again = bytecode.write_missing(sources)
    assert (again.missing, again.written) == (0, 0)
    assert again.text() == 'Python bytecode: all 2 modules the node loads have theirs'


def test_an_edited_source_makes_its_bytecode_stale(package):
    sources = bytecode.loaded_sources(package)
    bytecode.write_missing(sources)
    source, cached = sources[1]
    source.write_text('def f():\n    return 20000\n')   # another size
    assert not bytecode.is_current(source, cached)
    assert bytecode.write_missing(sources).written == 1
    assert bytecode.is_current(source, cached)


def test_a_folder_that_refuses_is_named_with_what_to_do(package, tmp_path, monkeypatch):
    blocker = tmp_path / 'not_a_folder'
    blocker.write_text('')
    monkeypatch.setattr(sys, 'pycache_prefix', str(blocker))  # no folder can go under a file
    report = bytecode.write_missing(bytecode.loaded_sources(package))
    assert (report.missing, report.written) == (2, 0)
    assert list(report.failed) == [str(package[0].__spec__.origin.rsplit(os.sep, 1)[0])]
    assert 'could not write under' in report.text()
    assert 'PYTHONPYCACHEPREFIX' in report.text()


def test_a_start_after_it_compiles_no_source(package):
    """Python itself takes the written files: a fresh interpreter compiles nothing."""
    bytecode.write_missing(bytecode.loaded_sources(package))
    root = Path(package[0].__file__).parents[1]
    probe = ('import importlib.machinery as m, sys\n'
             'compiled = []\n'
             'real = m.SourceFileLoader.source_to_code\n'
             'm.SourceFileLoader.source_to_code = '
             'lambda self, *a, **k: compiled.append(a) or real(self, *a, **k)\n'
             'import pkgbc.inner\n'
             'print(len(compiled))\n')
    env = dict(os.environ, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE='1')
    env.pop('PYTHONPYCACHEPREFIX', None)
    out = subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == '0'


def test_modules_without_source_are_left_out():
    import math
    assert bytecode.loaded_sources([math, sys]) == []
