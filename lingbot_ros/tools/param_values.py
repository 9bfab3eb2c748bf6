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
The node's parameters for a tool: a parameter file and ``--set NAME:=VALUE`` overrides.

``lingbot-ros-prepare`` and ``lingbot-ros-bench`` read the node's own parameter file, so what
they build or time is the configuration the node runs; the table's defaults fill the rest.
"""

from __future__ import annotations

import argparse
from typing import Any, Dict


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--params-file`` and ``--set`` to a tool's parser."""
    parser.add_argument('--params-file', default=None,
                        help="the node's parameter file (config/lingbot.yaml shape); the "
                             "parameter table's defaults fill what it leaves out")
    parser.add_argument('--set', action='append', default=[], metavar='NAME:=VALUE',
                        help='override one parameter, as -p does for the node (repeatable)')


def values(args: argparse.Namespace, prog: str) -> Dict[str, Any]:
    """Return name -> value from the file's ``ros__parameters`` sections, then ``--set``."""
    import yaml
    found: Dict[str, Any] = {}
    if args.params_file:
        with open(args.params_file) as fh:
            data = yaml.safe_load(fh) or {}
        for section in data.values():  # '/**' or the node's own name
            found.update((section or {}).get('ros__parameters', {}))
    for item in args.set:
        name, sep, text = item.partition(':=')
        if not sep:
            raise SystemExit(f'{prog}: --set {item!r}: expected NAME:=VALUE')
        found[name] = yaml.safe_load(text)
    return found
