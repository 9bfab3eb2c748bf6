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
Checkpoints by name: ``hf://<owner>/<repo>[@<revision>]/<file>`` or a local file.

So a launch file or a command line can say which published weights to use without a
manual download step: the first use fetches the file into the Hugging Face cache, every
later use reads it from there without touching the network. The file is looked up in
the cache first (``local_files_only``), then fetched; with ``HF_HUB_OFFLINE=1`` only
the cache is used. ``HF_HUB_CACHE`` / ``HF_HOME``, ``HF_HUB_OFFLINE`` and
``HF_ENDPOINT`` are read when a checkpoint is resolved, not when this module is
imported, so the environment of the moment decides. Only model repositories are meant;
a revision is a branch, a tag or a commit hash without ``/``.

Whatever the source, the resolved file's SHA-256 is computed (streamed, on a thread of
its own) so the node can log exactly which weights it runs. A failure is one line naming the
spec and the reason (:class:`HubError`); nothing here imports ROS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import hashlib
import os
from pathlib import Path
import re
import threading
from typing import Optional, Union

HF_PREFIX = 'hf://'
SPEC_FORM = 'hf://<owner>/<repo>[@<revision>]/<file path in the repo>'
SPEC_EXAMPLE = 'hf://owner/repo@v1.0/weights/model.safetensors'
_NAME = re.compile(r'^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9_])?$')  # owner or repo
_REVISION = re.compile(r'^[A-Za-z0-9._-]+$')
_TRUE = ('1', 'on', 'yes', 'true')
CHUNK_BYTES = 1 << 20


class HubError(RuntimeError):
    """A checkpoint that cannot be had; the one-line message names the spec and the reason."""


class HubSpecError(HubError, ValueError):
    """A malformed ``hf://`` spec; the message gives the value and the allowed form."""

    def __init__(self, spec: str, reason: str) -> None:
        """Keep the reason apart so a config check can phrase the message its own way."""
        super().__init__(f'checkpoint {spec!r} is malformed ({reason}): expected {SPEC_FORM}, '
                         f'e.g. {SPEC_EXAMPLE}')
        self.spec, self.reason = spec, reason


@dataclass(frozen=True)
class HubSpec:
    """The parts of an ``hf://`` spec."""

    owner: str
    repo: str
    filename: str                   # path inside the repository, '/'-separated
    revision: Optional[str] = None  # None: the default branch (main)

    @property
    def repo_id(self) -> str:
        """Return ``owner/repo``, as the hub names repositories."""
        return f'{self.owner}/{self.repo}'


class Digest:
    """
    A file's SHA-256, computed on a thread of its own from the moment it is made.

    Hashing a released checkpoint takes seconds, as long as the rest of a restart after
    the imports; beside the weight load (hashlib lets go of the GIL) it does not delay
    the node becoming active.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._done = threading.Event()
        self._value: Optional[str] = None
        self._error: Optional[str] = None
        threading.Thread(target=self._run, name='lingbot-sha256', daemon=True).start()

    def _run(self) -> None:
        try:
            self._value = sha256_file(self._path)
        except OSError as exc:
            self._error = f'cannot read {self._path}: {exc}'
        finally:
            self._done.set()

    def peek(self) -> Optional[str]:
        """Return the hex digest if it is known by now, else None (never waits)."""
        return self._value if self._done.is_set() else None

    @property
    def error(self) -> Optional[str]:
        """Why the file could not be hashed (None while hashing or once hashed)."""
        return self._error if self._done.is_set() else None

    def wait(self, timeout: Optional[float] = None) -> str:
        """Return the hex digest, waiting for it; :class:`HubError` if the file was unreadable."""
        if not self._done.wait(timeout):
            raise TimeoutError(f'sha256 of {self._path} not done within {timeout} s')
        if self._error is not None:
            raise HubError(f'checkpoint {self._path}: {self._error}')
        return self._value


@dataclass(frozen=True)
class ResolvedCheckpoint:
    """A checkpoint ready to read: the file, its digest (being computed) and its spec."""

    spec: str       # as given: a local path or an hf:// spec
    path: Path      # the file to read (for hf://, the cache's snapshot path, suffix kept)
    digest: Digest = field(compare=False)  # SHA-256 of the file's bytes, on its own thread

    @property
    def sha256(self) -> str:
        """Return the hex digest of the file's bytes (waits for it)."""
        return self.digest.wait()

    @property
    def from_hub(self) -> bool:
        """Whether the file came through the Hugging Face cache."""
        return is_hub_spec(self.spec)


def is_hub_spec(spec: str) -> bool:
    """Whether ``spec`` names a file on the Hugging Face hub (``hf://...``)."""
    return isinstance(spec, str) and spec.startswith(HF_PREFIX)


def parse_hub_spec(spec: str) -> HubSpec:
    """Split an ``hf://`` spec into its parts; raise :class:`HubSpecError` saying what is wrong."""
    def bad(reason: str) -> HubSpecError:
        return HubSpecError(spec, reason)

    if not is_hub_spec(spec):
        raise bad(f'it does not start with {HF_PREFIX}')
    parts = spec[len(HF_PREFIX):].split('/', 2)
    if len(parts) < 3:
        raise bad('owner, repository and file are all needed')
    owner, repo, filename = parts
    revision = None
    if '@' in repo:
        repo, revision = repo.split('@', 1)
        if not _REVISION.match(revision):
            raise bad(f'revision {revision!r} is not a branch, tag or commit without "/"')
    for what, name in (('owner', owner), ('repository', repo)):
        if not _NAME.match(name):
            raise bad(f'{what} {name!r} is not a hub name (letters, digits, "-", "_", ".")')
    segments = filename.split('/')
    if not filename or any(s in ('', '.', '..') for s in segments) or '\\' in filename \
            or any(c.isspace() for c in filename):
        raise bad(f'file {filename!r} is not a relative path inside the repository')
    return HubSpec(owner=owner, repo=repo, filename=filename, revision=revision)


def hub_cache_dir() -> Path:
    """Return the hub cache folder the environment names now (as huggingface_hub reads it)."""
    env = os.environ
    for name in ('HF_HUB_CACHE', 'HUGGINGFACE_HUB_CACHE'):
        if env.get(name):
            return Path(env[name]).expanduser()
    if env.get('HF_HOME'):
        return Path(env['HF_HOME']).expanduser() / 'hub'
    base = Path(env['XDG_CACHE_HOME']) if env.get('XDG_CACHE_HOME') else Path.home() / '.cache'
    return base / 'huggingface' / 'hub'


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` (or huggingface_hub's own offline switch) is on."""
    if os.environ.get('HF_HUB_OFFLINE', '').strip().lower() in _TRUE:
        return True
    try:
        from huggingface_hub import constants
    except ImportError:
        return False
    return bool(getattr(constants, 'HF_HUB_OFFLINE', False))


def sha256_file(path: Union[str, Path]) -> str:
    """Return the hex SHA-256 of a file, read in 1 MiB chunks (checkpoints are GBs)."""
    digest = hashlib.sha256()
    buffer = bytearray(CHUNK_BYTES)
    view = memoryview(buffer)
    with open(path, 'rb', buffering=0) as fh:
        while True:
            n = fh.readinto(buffer)
            if not n:
                break
            digest.update(view[:n])
    return digest.hexdigest()


def resolve_checkpoint(spec: str) -> ResolvedCheckpoint:
    """
    Return the local file of ``spec`` (downloading an ``hf://`` one on first use) and its digest.

    A local path is used as given. Raises :class:`HubError` with a one-line reason. The
    digest is computed on its own thread; ``.sha256`` waits for it.
    """
    path = locate_checkpoint(spec)
    return ResolvedCheckpoint(spec=spec, path=path, digest=Digest(path))


def locate_checkpoint(spec: str) -> Path:
    """Return the local file of ``spec`` (downloading an ``hf://`` one on first use)."""
    if is_hub_spec(spec):
        return _from_hub(parse_hub_spec(spec), spec)
    path = Path(spec)
    if not path.is_file():
        raise HubError(f'checkpoint {spec}: no such file')
    return path


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f'{type(exc).__name__}: {text[0]}' if text else type(exc).__name__


def _from_hub(hub: HubSpec, spec: str) -> Path:
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.utils import (EntryNotFoundError, HfHubHTTPError,
                                           LocalEntryNotFoundError, RepositoryNotFoundError,
                                           RevisionNotFoundError)
    except ImportError as exc:
        raise HubError(f'checkpoint {spec}: hf:// needs the huggingface_hub package '
                       "(pip install 'huggingface_hub>=0.20')") from exc
    cache = hub_cache_dir()
    where = f'{hub.filename} of {hub.repo_id}' + \
        (f' at revision {hub.revision}' if hub.revision else '')
    kwargs = {'repo_id': hub.repo_id, 'filename': hub.filename, 'revision': hub.revision,
              'cache_dir': str(cache)}
    try:
        return Path(hf_hub_download(**kwargs, local_files_only=True))
    except LocalEntryNotFoundError:
        pass  # not cached (yet)
    except (OSError, ValueError) as exc:
        raise HubError(f'checkpoint {spec}: cannot read the hub cache at {cache}: '
                       f'{_first_line(exc)}') from exc
    if hub_offline():
        raise HubError(f'checkpoint {spec}: {where} is not in the cache at {cache} and '
                       'HF_HUB_OFFLINE is set, so the hub is not asked')
    endpoint = os.environ.get('HF_ENDPOINT') or None
    try:
        return Path(hf_hub_download(**kwargs, endpoint=endpoint))
    except LocalEntryNotFoundError as exc:  # what a failed connection becomes
        cause = exc.__cause__ or exc
        raise HubError(f'checkpoint {spec}: {where} is not in the cache at {cache} and the '
                       f'hub cannot be reached ({_first_line(cause)})') from exc
    except RepositoryNotFoundError as exc:  # also gated repositories
        raise HubError(f'checkpoint {spec}: repository {hub.repo_id} is not on the hub or '
                       'needs a token (huggingface-cli login, or HF_TOKEN)') from exc
    except RevisionNotFoundError as exc:
        raise HubError(f'checkpoint {spec}: {hub.repo_id} has no revision '
                       f'{hub.revision}') from exc
    except EntryNotFoundError as exc:
        raise HubError(f'checkpoint {spec}: {hub.repo_id} has no file {hub.filename}'
                       + (f' at revision {hub.revision}' if hub.revision else '')) from exc
    except HfHubHTTPError as exc:
        raise HubError(f'checkpoint {spec}: the hub refused: {_first_line(exc)}') from exc
    except (OSError, ValueError) as exc:
        raise HubError(f'checkpoint {spec}: download into {cache} failed: '
                       f'{_first_line(exc)}') from exc
