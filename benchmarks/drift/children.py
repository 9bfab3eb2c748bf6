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
Each run in a child process of its own: the reference's imports never meet ours.

The parent writes the images, the weights and a job file into a work folder; a child
(``bf16_drift.py --child RUN --job FILE``) runs one kind and leaves its arrays
(``RUN.npz``) and facts (``RUN.json``) beside them. Its output goes both to the log and to
this process's stdout as it comes; on a timeout its whole process group is killed.
"""

import json
import os
from pathlib import Path
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, Optional, Sequence, Tuple

from commits import REPO
from drift.runs import config_fields, engine_config, RunKind, Settings, Side, skip_reason

import numpy as np

import torch

SCRIPT = Path(__file__).resolve().parents[1] / 'bf16_drift.py'


def child_main(run: RunKind, job_path: Path) -> int:
    """Run one ``run`` described by the job file; write its arrays and facts next to it."""
    job = json.loads(job_path.read_text())
    settings = Settings(**job['settings'])
    work = job_path.parent
    images = torch.from_numpy(np.load(work / 'images.npy'))
    weights = work / 'weights.safetensors'
    print(f'[{run.value}] {len(images)} frames {tuple(images.shape[-2:])} on '
          f'{settings.device}', flush=True)
    if run.side is Side.OURS:
        from drift.ours import run_ours
        arrays, facts = run_ours(run, settings, weights, images)
    else:
        from drift.reference import run_reference
        arrays, facts = run_reference(run, settings, weights, images, Path(job['reference']),
                                      job['reference_constructor_args'], job['draws'])
    np.savez(work / f'{run.value}.npz', **arrays)
    (work / f'{run.value}.json').write_text(json.dumps(facts, indent=1))
    print(f"[{run.value}] done: load {facts['load_s']} s, inference {facts['inference_s']} s "
          f"({facts['ms_per_frame']} ms/frame), {facts['backend']}", flush=True)
    return 0


def _pump(stream, log) -> None:
    for chunk in iter(lambda: stream.read1(65536), b''):
        log.write(chunk)
        log.flush()
        sys.stdout.buffer.write(chunk)
        sys.stdout.flush()


def run_child(run: RunKind, job: Path, log: Path, timeout: float) -> dict:
    """Run one child process; return its exit code, whether it timed out and its seconds."""
    cmd = [sys.executable, str(SCRIPT), '--child', run.value, '--job', str(job)]
    env = {**os.environ, 'PYTHONUNBUFFERED': '1'}
    t0 = time.monotonic()
    timed_out = False
    with open(log, 'ab') as fh:
        fh.write(f'\n===== {run.value}: {" ".join(cmd)}\n'.encode())
        proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        pump = threading.Thread(target=_pump, args=(proc.stdout, fh), daemon=True)
        pump.start()
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own process group
            rc = proc.wait()
        pump.join(timeout=10)
    return {'returncode': rc, 'timed_out': timed_out,
            'child_s': round(time.monotonic() - t0, 1)}


def reusable(run: RunKind, settings: Settings, work: Path, facts_path: Path) -> bool:
    """
    Say whether a finished run in ``work`` still stands for ``run``.

    The work folder's settings and weights were already checked; a kind's configuration is
    fixed by its name, but for ``ours-shipped``, whose configuration is the table's defaults
    of the code that runs now: its earlier run counts only if that is what it ran.
    """
    if run is not RunKind.OURS_SHIPPED:
        return True
    now = config_fields(engine_config(run, settings, work / 'weights.safetensors'))
    return json.loads(facts_path.read_text()).get('engine_config') == now


def run_all(runs: Sequence[RunKind], settings: Settings, reference: Optional[Path], work: Path,
            log: Path, timeout: float,
            resume: bool) -> Tuple[Dict[str, dict], Dict[RunKind, Dict[str, np.ndarray]]]:
    """Run (or with ``resume`` reuse) each run; return its record by name and its arrays."""
    records: Dict[str, dict] = {}
    arrays: Dict[RunKind, Dict[str, np.ndarray]] = {}
    for run in runs:
        reason = skip_reason(run, settings, reference)
        if reason is not None:
            print(f'[{run.value}] skipped: {reason}', flush=True)
            records[run.value] = {'skipped': reason}
            continue
        facts_path, npz_path = work / f'{run.value}.json', work / f'{run.value}.npz'
        if resume and npz_path.is_file() and facts_path.is_file() and \
                reusable(run, settings, work, facts_path):
            print(f'[{run.value}] reusing {npz_path}', flush=True)
            rec = {'returncode': 0, 'timed_out': False, 'resumed': True}
        else:
            npz_path.unlink(missing_ok=True)
            rec = run_child(run, work / 'job.json', log, timeout)
        rec['ok'] = rec['returncode'] == 0 and npz_path.is_file()
        if rec['ok']:
            rec['facts'] = json.loads(facts_path.read_text())
            with np.load(npz_path) as data:
                arrays[run] = {k: data[k] for k in data.files}
        else:
            rec['error'] = 'timed out' if rec['timed_out'] else f"exit {rec['returncode']}"
        records[run.value] = rec
    return records, arrays
