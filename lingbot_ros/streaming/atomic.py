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
Files and folders that appear under their final name whole, or not at all.

Everything the package saves is written into a temporary beside its target (the same
folder, so the rename never crosses a file system), flushed and fsynced, then renamed
onto the final name, and the folder is fsynced: a process killed at any instant (SIGKILL,
power loss) leaves either no file, the previous one, or the complete new one under the
final name. A temporary is named ``.<final name>.<pid>.<random>.partial``; one whose
process no longer runs was left by a killed save, and the next save into that folder
removes it.
"""

from __future__ import annotations

from contextlib import contextmanager
import os
from pathlib import Path
import re
import secrets
import shutil
from typing import BinaryIO, Iterator, List, Union

PathLike = Union[str, Path]
TEMP_SUFFIX = '.partial'
_TEMP = re.compile(r'^\.(?P<final>.+)\.(?P<pid>\d+)\.[0-9a-f]{8}' + re.escape(TEMP_SUFFIX) + '$')


def temp_path(final: Path) -> Path:
    """Return a fresh temporary name beside ``final`` that names this process."""
    return final.with_name(f'.{final.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}')


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return True  # ours: a save in progress in another thread, or removed when it fails
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass  # another save removed it first


def remove_stale(folder: PathLike) -> List[Path]:
    """Remove the temporaries of killed saves in ``folder``; return what was removed."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for entry in entries:
        match = _TEMP.match(entry.name)
        if match is None or _running(int(match['pid'])):
            continue
        _remove(Path(entry.path))
        removed.append(Path(entry.path))
    return removed


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_file(path: PathLike) -> Iterator[BinaryIO]:
    """
    Yield a binary file to write; on a normal exit it replaces ``path`` whole.

    On an exception the temporary is removed and ``path`` is left as it was.
    """
    with atomic_path(path) as temp, open(temp, 'xb') as fh:
        yield fh


@contextmanager
def atomic_path(path: PathLike) -> Iterator[Path]:
    """
    Yield a temporary name for a writer that opens the file itself; it then becomes ``path``.

    For libraries that write by file name (safetensors): on a normal exit the file written
    under the temporary name is fsynced and replaces ``path`` whole; on an exception it is
    removed and ``path`` is left as it was.
    """
    path = Path(path)
    remove_stale(path.parent)
    temp = temp_path(path)
    try:
        yield temp
        _fsync(temp)
        os.replace(temp, path)
    except BaseException:
        _remove(temp)
        raise
    _fsync(path.parent, directory=True)


@contextmanager
def atomic_folder(path: PathLike) -> Iterator[Path]:
    """
    Yield an empty temporary folder to fill; on a normal exit it becomes ``path``, whole.

    A folder already at ``path`` is replaced (the caller decides whether it may be): it is
    moved aside, the new one renamed in, then the old one removed, so a kill in between
    leaves no folder under the final name, never a mixed one.
    """
    path = Path(path)
    remove_stale(path.parent)
    temp = temp_path(path)
    old = None
    try:
        temp.mkdir()
        yield temp
        for root, dirs, files in os.walk(temp):
            for name in files:
                _fsync(Path(root, name))
            _fsync(Path(root), directory=True)
        if path.exists() or path.is_symlink():
            old = temp_path(path)
            os.rename(path, old)
        os.rename(temp, path)
    except BaseException:
        _remove(temp)
        if old is not None and not path.exists():
            os.rename(old, path)  # the new folder did not make it: the old one stays
            old = None
        raise
    _fsync(path.parent, directory=True)
    if old is not None:
        _remove(old)
