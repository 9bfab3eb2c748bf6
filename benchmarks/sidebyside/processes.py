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
Child processes of the side by side: each in its own session, logged, killed on a timeout.

A side's output goes to the setting's log as it is printed, so a run that hangs or is
killed still leaves what it said; the versions and the GPU are asked of a child, as the
sides will see them (the parent never touches CUDA).
"""

import json
import os
from pathlib import Path
import shlex
import signal
import subprocess
import time
from typing import List, Optional

from sidebyside.reference import REFERENCE_MODULES


def tail(text: str, lines: int = 40) -> List[str]:
    """Return the last non-empty lines of a program's output."""
    return [ln for ln in text.splitlines() if ln.strip()][-lines:]


def run_logged(cmd: List[str], cwd: Path, env: dict, log: Path, title: str,
               timeout: float) -> dict:
    """
    Run ``cmd`` with its output appended to ``log``; kill its process group on timeout.

    Returns returncode (None when killed), timed_out, seconds and the output it printed.
    """
    with open(log, 'a', encoding='utf-8') as fh:
        fh.write(f'\n===== {title}\n$ cd {shlex.quote(str(cwd))} && {shlex.join(cmd)}\n')
        fh.flush()
        start_at = fh.tell()
    t0 = time.monotonic()
    timed_out, rc = False, None
    with open(log, 'a', encoding='utf-8') as fh:
        try:
            proc = subprocess.Popen(cmd, cwd=str(cwd), env=env, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            fh.write(f'could not start: {exc}\n')
            return {'returncode': None, 'timed_out': False, 'seconds': 0.0,
                    'output': f'could not start: {exc}'}
        try:
            rc = proc.wait(timeout=max(timeout, 1))
        except subprocess.TimeoutExpired:
            timed_out = True
            for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
            fh.write(f'\n[side_by_side] killed after {timeout:.0f} s (timeout)\n')
    seconds = time.monotonic() - t0
    with open(log, 'rb') as fh:
        fh.seek(start_at)
        output = fh.read().decode('utf-8', errors='replace')
    return {'returncode': rc, 'timed_out': timed_out, 'seconds': round(seconds, 1),
            'output': output}


def child_env(extra_path: Optional[Path] = None) -> dict:
    """Return the environment for a child: unbuffered output, ``extra_path`` importable."""
    env = dict(os.environ, PYTHONUNBUFFERED='1')
    if extra_path is not None:
        parts = [str(extra_path)] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p]
        env['PYTHONPATH'] = os.pathsep.join(parts)
    return env


_PROBE = r"""
import importlib.metadata as md, importlib.util as iu, json, platform
out = {'python': platform.python_version()}
try:
    import torch
    out['torch'] = torch.__version__
    out['cuda'] = torch.version.cuda
    if torch.cuda.is_available():
        out['gpu'] = torch.cuda.get_device_name(0)
        out['gpu_capability'] = '.'.join(map(str, torch.cuda.get_device_capability(0)))
except Exception as exc:
    out['torch_error'] = repr(exc)
for name in ('flashinfer-python', 'flashinfer'):
    try:
        out['flashinfer'] = md.version(name)
        break
    except md.PackageNotFoundError:
        pass
out['missing_for_reference'] = [m for m in MODULES if iu.find_spec(m) is None]
print('PROBE ' + json.dumps(out))
"""


def probe_versions(python: str, env: dict) -> dict:
    """Versions and GPU as the children will see them (asked in a child: no CUDA here)."""
    code = _PROBE.replace('MODULES', repr(REFERENCE_MODULES))
    try:
        proc = subprocess.run([python, '-c', code], env=env, capture_output=True, text=True,
                              timeout=180)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith('PROBE ')]
        info = json.loads(line[-1][6:]) if line else {'probe_error': tail(proc.stderr, 5)}
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        info = {'probe_error': repr(exc)}
    try:
        smi = subprocess.run(['nvidia-smi', '--query-gpu=name,driver_version',
                              '--format=csv,noheader'], capture_output=True, text=True,
                             timeout=30)
        if smi.returncode == 0 and smi.stdout.strip():
            info['nvidia_smi'] = smi.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return info
