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
The commits a benchmark records: ours and the reference's, found the same way by every script.

The GPU machine's copy of this tree can carry a ``.git`` older than the tree itself, or none,
so an explicit override wins, then git, then the ``COMMIT`` / ``OURS_COMMIT`` files that the
preparation of ``.reference/`` writes (see the top of ``side_by_side.py``). Standard library
only: the reference's processes import it too.
"""

from pathlib import Path
import subprocess
from typing import Optional

REPO = Path(__file__).resolve().parents[1]


def git(path: Path, *args: str) -> str:
    """Return what ``git -C path ARGS`` prints, or '' where git cannot say."""
    try:
        proc = subprocess.run(['git', '-C', str(path), *args], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ''
    return proc.stdout.strip() if proc.returncode == 0 else ''


def ours_commit(override: Optional[str] = None) -> dict:
    """Return this repository's commit and whether tracked files differ from it."""
    if override:
        return {'commit': override, 'dirty': None}
    sha = git(REPO, 'rev-parse', 'HEAD')
    if sha:
        status = git(REPO, 'status', '--porcelain', '--untracked-files=no')
        return {'commit': sha, 'dirty': bool(status)}
    for f in (REPO / '.reference' / 'OURS_COMMIT', REPO / 'OURS_COMMIT'):
        if f.is_file():
            return {'commit': f.read_text().strip(), 'dirty': None}
    return {'commit': 'unknown', 'dirty': None}


def reference_commit(path: Path, override: Optional[str] = None) -> str:
    """Return the reference's commit: override, its own git, a COMMIT file, or 'unknown'."""
    if override:
        return override
    if (path / '.git').exists():
        sha = git(path, 'rev-parse', 'HEAD')
        if sha:
            return sha
    if (path / 'COMMIT').is_file():
        return (path / 'COMMIT').read_text().strip() or 'unknown'
    return 'unknown'
