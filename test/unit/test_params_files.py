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

"""The parameter files and docs/parameters.md: rendered from the table, and in step with it."""

from pathlib import Path
import shutil

from lingbot_ros.ros import params_files
from lingbot_ros.streaming.parameters import parse, SPECS, Tier
import yaml

ROOT = Path(__file__).resolve().parents[2]
MAIN_MAX = 35  # what a robot engineer reads through; room is kept for a few more


def _values(name: str) -> dict:
    return yaml.safe_load((ROOT / 'config' / name).read_text())['/**']['ros__parameters']


def test_the_committed_files_are_what_the_table_renders():
    assert params_files.stale(ROOT) == [], \
        'run python -m lingbot_ros.ros.params_files --write and commit the result'


def test_each_parameter_is_in_exactly_one_file_with_its_default():
    main, advanced = _values('lingbot.yaml'), _values('advanced.yaml')
    assert not set(main) & set(advanced)
    assert set(main) | set(advanced) == {s.name for s in SPECS}
    assert len(main) <= MAIN_MAX
    defaults = parse({})
    for spec in SPECS:
        file_value = (main if spec.tier is Tier.MAIN else advanced)[spec.name]
        assert getattr(parse({spec.name: file_value}), spec.name) == \
            getattr(defaults, spec.name), spec.name
    assert parse({**main, **advanced}) == defaults


def test_every_parameter_has_its_comment_and_its_row():
    page = (ROOT / 'docs' / 'parameters.md').read_text()
    for spec in SPECS:
        text = (ROOT / 'config' / spec.tier.value).read_text()
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(spec.name + ':'))
        assert lines[at - 1].strip().startswith('#'), f'{spec.name} has no comment'
        assert ('[restart]' in lines[at - 1]) == spec.read_only, spec.name
        assert f'| `{spec.name}` |' in page, spec.name
    assert all(len(line) <= params_files.WIDTH for name in ('lingbot.yaml', 'advanced.yaml')
               for line in (ROOT / 'config' / name).read_text().splitlines())


def test_the_command_writes_the_files_and_then_finds_them_in_step(tmp_path, capsys):
    tree = tmp_path / 'tree'
    tree.mkdir()
    for name in ('setup.py', 'config', 'docs'):
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, tree / name)
    (tree / 'config' / 'advanced.yaml').write_text('# an old copy\n')
    (tree / 'docs' / 'parameters.md').unlink()
    assert params_files.main(['--root', str(tree)]) == 1
    err = capsys.readouterr().err
    assert 'config/advanced.yaml differs' in err and 'docs/parameters.md differs' in err
    assert 'config/lingbot.yaml' not in err
    assert params_files.main(['--root', str(tree), '--write']) == 0
    assert params_files.main(['--root', str(tree)]) == 0
    assert params_files.main(['--root', str(tmp_path)]) == 2  # not a source tree
