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
The parameter files and their page, rendered from the parameter table.

``config/lingbot.yaml`` (the main parameters), ``config/advanced.yaml`` (the advanced ones)
and ``docs/parameters.md`` (all of them, by group) are written from
:data:`~lingbot_ros.streaming.parameters.SPECS` and nothing else, comments included:
change the table, then run ``python -m lingbot_ros.ros.params_files --write`` in the source
tree. Without ``--write`` it says which committed files differ from the table (exit 1);
the tests run that check. ``config/lingbot_8gb.yaml`` is an overlay written by hand (it
says why each value differs), not rendered here.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import re
import sys
import textwrap
from typing import Dict, Optional, Sequence

from lingbot_ros.streaming.atomic import atomic_file
from lingbot_ros.streaming.parameters import Group, shown, Spec, SPECS, Tier
import yaml

ROOT = Path(__file__).resolve().parents[2]  # the source tree (setup.py beside lingbot_ros/)
WIDTH = 92  # of a YAML comment line
TABLE = 'lingbot_ros/streaming/parameters.py'
COMMAND = 'python -m lingbot_ros.ros.params_files --write'

MAIN_HEADER = f"""\
Main parameters of lingbot_node, with their defaults: what a robot engineer tunes.
Expert settings (memory, numerics, queues, thresholds) are in advanced.yaml;
docs/parameters.md describes every parameter. Copy this file, change what you need and
pass it with `ros2 launch lingbot_ros lingbot.launch.py params_file:=<file>` (or
`--ros-args --params-file <file>`); a parameter left out takes its default. Invalid values
are refused with a reason, at start-up and at runtime (`ros2 param set`). [restart] ones
are fixed when the node starts; the others apply from the next frame.
Rendered from the parameter table ({TABLE}) by
`{COMMAND}`."""

ADVANCED_HEADER = f"""\
Advanced parameters of lingbot_node, with their defaults: memory, numerics, queues and
thresholds. Left out of your files, each keeps the default below. To change some, pass a
file with them after the main one: `ros2 launch lingbot_ros lingbot.launch.py
params_file:=<main file> extra_params_file:=<this file, or your copy>` (or a second
`--params-file` after the first; the later file wins). config/lingbot_8gb.yaml is such a
file, for a GPU with 8 GB. [restart] ones are fixed when the node starts; the others apply
from the next frame.
Rendered from the parameter table ({TABLE}) by
`{COMMAND}`."""

PAGE_HEADER = f"""\
# Parameters

Every parameter of `lingbot_node`, by group. Rendered from the parameter table
(`{TABLE}`) by
`{COMMAND}`; a test fails when this page, `config/lingbot.yaml`
or `config/advanced.yaml` differs from the table.

- **main**: in `config/lingbot.yaml`, what a robot engineer tunes; **advanced**: in
  `config/advanced.yaml`, memory, numerics, queues and thresholds. A parameter left out of
  the files the node is given keeps the default below.
- **restart**: fixed when the node starts (read-only: `ros2 param set` refuses it; change
  the file and restart the node); **runtime**: `ros2 param set` applies it from the next
  frame.
- `config/lingbot_8gb.yaml` is an overlay for a GPU with 8 GB: only the values it changes,
  each with its reason. Load it after the main file
  (`params_file:=<main> extra_params_file:=<overlay>` with the launch file) or alone (the
  defaults fill the rest); [memory.md](memory.md) explains the budget.
- Values are checked when the node starts and when they change: a wrong type, a value out
  of range or an unknown choice is refused with the parameter, the value and what is
  allowed."""


def yaml_value(value: object) -> str:
    """Return a value as one YAML flow scalar or list, as the files write it."""
    return yaml.safe_dump([shown(value)], default_flow_style=True, width=1000).strip()[1:-1]


def _comment(text: str) -> list:
    """Wrap a comment; a bracketed range or list stays on one line."""
    text = re.sub(r'\[[^\]]*\]', lambda m: m.group(0).replace(' ', '\0'), text)
    return [line.replace('\0', ' ') for line in textwrap.wrap(
        text, WIDTH, initial_indent='    # ', subsequent_indent='    # ',
        break_on_hyphens=False)]


def render_yaml(tier: Tier) -> str:
    """Return ``config/<tier's file>``: the tier's parameters by group, each with its comment."""
    header = MAIN_HEADER if tier is Tier.MAIN else ADVANCED_HEADER
    lines = ['# ' + line for line in header.splitlines()] + ['/**:', '  ros__parameters:']
    for group in Group:
        specs = [s for s in SPECS if s.group is group and s.tier is tier]
        if not specs:
            continue
        lines += ['', f'    # ---- {group.value} ----']
        for spec in specs:
            restart = ' [restart]' if spec.read_only else ''
            lines += _comment(f'{spec.description} Allowed: {spec.allowed}.{restart}')
            lines.append(f'    {spec.name}: {yaml_value(spec.default)}')
    return '\n'.join(lines) + '\n'


def _cell(text: str) -> str:
    """Escape what a Markdown table cell would take for syntax."""
    return text.replace('|', '\\|').replace('<', '\\<').replace('>', '\\>')


def _row(spec: Spec) -> str:
    cells = [f'`{spec.name}`', f'`{yaml_value(spec.default)}`', _cell(spec.allowed),
             'restart' if spec.read_only else 'runtime',
             'main' if spec.tier is Tier.MAIN else 'advanced', _cell(spec.description)]
    return '| ' + ' | '.join(cells) + ' |'


def render_page() -> str:
    """Return ``docs/parameters.md``: every parameter by group, in one table per group."""
    lines = [PAGE_HEADER]
    for group in Group:
        lines += ['', f'## {group.value}', '',
                  '| parameter | default | allowed | change | file | description |',
                  '| --- | --- | --- | --- | --- | --- |']
        lines += [_row(s) for s in SPECS if s.group is group]
    return '\n'.join(lines) + '\n'


def rendered() -> Dict[str, str]:
    """Return path in the source tree -> the text the table renders for it."""
    return {'config/lingbot.yaml': render_yaml(Tier.MAIN),
            'config/advanced.yaml': render_yaml(Tier.ADVANCED),
            'docs/parameters.md': render_page()}


def stale(root: Path = ROOT) -> list:
    """Return the rendered files under ``root`` whose text differs from the table's."""
    out = []
    for name, text in rendered().items():
        path = root / name
        if not path.is_file() or path.read_text() != text:
            out.append(name)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Check the rendered files (exit 1 when one differs), or write them (``--write``)."""
    p = argparse.ArgumentParser(prog='python -m lingbot_ros.ros.params_files',
                                description=__doc__.strip().split('\n')[0])
    p.add_argument('--write', action='store_true', help='write the files from the table')
    p.add_argument('--root', type=Path, default=ROOT,
                   help='the source tree (default: the one this module is in)')
    args = p.parse_args(argv)
    if not (args.root / 'setup.py').is_file():
        print(f'{p.prog}: {args.root} is not the source tree (no setup.py)', file=sys.stderr)
        return 2
    if args.write:
        for name, text in rendered().items():
            with atomic_file(args.root / name) as fh:
                fh.write(text.encode())
            print(f'wrote {name}')
        return 0
    differ = stale(args.root)
    for name in differ:
        print(f'{name} differs from the parameter table: run {COMMAND}', file=sys.stderr)
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main())
