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
The bytecode of the Python modules the node loads, written ahead by ``lingbot-ros-prepare``.

The node loads a few thousand modules (torch, its compiler, FlashInfer, rclpy). Python
reads each from its cached bytecode when there is a valid one, and otherwise compiles the
source at every start, which costs seconds. Packages installed without bytecode (``pip
--no-compile``, images built with ``PYTHONDONTWRITEBYTECODE``, read-only site-packages)
leave every start paying it. :func:`write_missing` writes what is missing where Python
looks for it (beside the source, or under ``PYTHONPYCACHEPREFIX`` when that is set), and
says where it could not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import importlib.util
from pathlib import Path
import py_compile
import sys
import time
from typing import Dict, Iterable, List, Optional, Tuple

_FLAGS_TIMESTAMP = 0  # the pyc header's flags word for a timestamp-checked file


def loaded_sources(modules: Optional[Iterable] = None) -> List[Tuple[Path, Path]]:
    """
    Return (source, bytecode path) of each loaded module Python would cache bytecode for.

    ``modules`` defaults to everything in ``sys.modules``; built-in, frozen, extension and
    namespace modules have no source to compile and are left out.
    """
    found = {}
    for module in list(sys.modules.values() if modules is None else modules):
        spec = getattr(module, '__spec__', None)
        origin = getattr(spec, 'origin', None)
        if not origin or not getattr(spec, 'has_location', False) or \
                not origin.endswith('.py'):
            continue
        try:
            found[Path(origin)] = Path(importlib.util.cache_from_source(origin))
        except (NotImplementedError, ValueError):  # no cache tag / odd path: nothing to do
            continue
    return sorted(found.items())


def is_current(source: Path, cached: Path) -> bool:
    """Tell whether ``cached`` is bytecode this Python would load for ``source`` as it is."""
    try:
        with open(cached, 'rb') as f:
            header = f.read(16)
        st = source.stat()
    except OSError:
        return False
    if len(header) < 16 or header[:4] != importlib.util.MAGIC_NUMBER:
        return False
    flags = int.from_bytes(header[4:8], 'little')
    if flags != _FLAGS_TIMESTAMP:
        return True  # hash-based: Python checks it (or trusts it) itself
    mtime = int.from_bytes(header[8:12], 'little')
    size = int.from_bytes(header[12:16], 'little')
    return mtime == (int(st.st_mtime) & 0xFFFFFFFF) and size == (st.st_size & 0xFFFFFFFF)


@dataclass
class BytecodeReport:
    """What :func:`write_missing` found and did."""

    modules: int = 0
    missing: int = 0
    written: int = 0
    seconds: float = 0.0
    failed: Dict[str, str] = field(default_factory=dict)  # folder -> the first reason

    def text(self) -> str:
        """Say it in one line, with what to do about the folders that refused."""
        if not self.missing:
            return f'Python bytecode: all {self.modules} modules the node loads have theirs'
        line = (f'Python bytecode: {self.missing} of {self.modules} modules the node loads had '
                'no current bytecode (every start compiled them); wrote '
                f'{self.written} in {self.seconds:.1f} s')
        if self.failed:
            folders = sorted(self.failed)
            shown = ', '.join(f'{d} ({self.failed[d]})' for d in folders[:3])
            more = f' and {len(folders) - 3} more' if len(folders) > 3 else ''
            line += (f'; could not write under {shown}{more}: set PYTHONPYCACHEPREFIX to a '
                     'writable folder for this tool and for the node')
        return line


def write_missing(sources: Iterable[Tuple[Path, Path]]) -> BytecodeReport:
    """Compile each source whose bytecode is missing or stale into its bytecode path."""
    report, t0 = BytecodeReport(), time.monotonic()
    for source, cached in sources:
        report.modules += 1
        if is_current(source, cached):
            continue
        report.missing += 1
        folder = str(source.parent)
        if folder in report.failed:
            continue
        try:
            py_compile.compile(str(source), cfile=str(cached), doraise=True,
                               invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
            report.written += 1
        except (OSError, py_compile.PyCompileError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
                type(exc).__name__
            report.failed[folder] = reason
    report.seconds = time.monotonic() - t0
    return report


def node_modules() -> Optional[str]:
    """Load the node's modules (rclpy and the messages with it); return why not, or None."""
    try:
        importlib.import_module('lingbot_ros.ros.node')
    except Exception as exc:  # noqa: BLE001 (a machine without ROS still prepares the rest)
        return f'{type(exc).__name__}: {exc}'
    return None
