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
One side's run for one setting: its command, its process, and what it printed, as a record.

A record always says ``ok``; a run that failed keeps its error and the end of its output, and
a run with too little of the budget left is not started (and says so). Our side is
``lingbot-ros-bench`` run from this repository, so it times what the package ships.
"""

import json
from pathlib import Path
import shlex
import tempfile
import time
from typing import List, Optional

from commits import REPO
from sidebyside.processes import child_env, run_logged, tail
from sidebyside.reference import missing_modules, parse_reference_output, reference_command
from sidebyside.settings import HEIGHT, SCALE_FRAMES, SETTINGS, SLIDING_WINDOW, WIDTH


def ours_command(python: str, setting: str, frames: int, out_json: Path,
                 backend: str = 'auto', compile_blocks: bool = False,
                 head_dtype: Optional[str] = None) -> List[str]:
    """
    Return ``lingbot-ros-bench``'s command line for a setting (run from this repo).

    ``head_dtype`` (None: the bench's, which is the parameter table's default) is passed
    on as ``--head-dtype``.
    """
    s = SETTINGS[setting]
    return [python, '-m', 'lingbot_ros.tools.bench', '--preset', 'release', '--device', 'cuda',
            '--dtype', 'bfloat16', '--backend', backend, '--frames', str(frames),
            '--height', str(HEIGHT), '--width', str(WIDTH),
            '--scale-frames', str(SCALE_FRAMES), '--sliding-window', str(SLIDING_WINDOW),
            '--keyframe-interval', str(s['keyframe_interval']),
            '--camera-iterations', str(s['camera_iterations']), '--out', str(out_json)] + \
        (['--compile'] if compile_blocks else []) + \
        (['--head-dtype', head_dtype] if head_dtype else [])


def parse_ours_json(data: dict, dtype: str = 'bfloat16') -> dict:
    """Pick the figures to compare from ``lingbot-ros-bench --out``'s JSON."""
    r = data[dtype]
    keep = ('frames', 'ms_per_frame_overall', 'scale_call_ms', 'stream_ms_median',
            'steady_ms_median', 'steady_ms_p90', 'steady_fps', 'peak_memory_gib', 'gpu',
            'backend', 'backend_reason', 'cuda_graphs', 'torch_compile', 'warmup_s', 'model',
            'pipelined', 'head_dtype', 'heads_compute_in')
    out = {k: r[k] for k in keep if k in r}
    if out.get('ms_per_frame_overall'):
        out['fps_overall'] = 1e3 / out['ms_per_frame_overall']
    return out


def _no_time(timeout: float) -> str:
    """Say why a run was skipped: what --budget-s left it once the runs after it were kept."""
    return (f'not run: {max(timeout, 0):.0f} s of --budget-s left for it once the runs after '
            f'it kept their timeouts (30 s at least needed)')


def run_reference(args, setting: str, ref: Path, log: Path, timeout: float) -> dict:
    """Run the reference profiler for a setting; return its figures or its failure."""
    cmd = reference_command(args.python, setting, args.frames, args.reference_backend,
                            args.fa3)
    rec: dict = {'ok': False, 'command': shlex.join(cmd), 'cwd': str(ref),
                 'timeout_s': round(timeout)}
    if timeout < 30:
        rec['error'] = _no_time(timeout)
        return rec
    started = time.time()
    res = run_logged(cmd, ref, child_env(), log, f'reference {setting}', timeout)
    rec.update(returncode=res['returncode'], timed_out=res['timed_out'],
               seconds=res['seconds'])
    parsed = parse_reference_output(res['output'])
    key = f'{args.reference_backend}_bf16'
    run = parsed['runs'].get(key)
    if run is None and len(parsed['runs']) == 1:
        run = next(iter(parsed['runs'].values()))
    if run is not None:
        rec.update(run)
    rec['header'] = parsed['header']
    # The profiler also saves its summary under /tmp; keep it when this run wrote it.
    saved = Path(tempfile.gettempdir()) / (f'profile_results_{HEIGHT}x{WIDTH}_'
                                           f'{args.frames}f_bf16.json')
    try:
        if saved.stat().st_mtime >= started:
            rec['saved_summary'] = json.loads(saved.read_text()).get(key)
    except (OSError, ValueError):
        pass
    if res['returncode'] == 0 and run is not None:
        rec['ok'] = True
    else:
        missing = missing_modules(res['output'])
        if res['timed_out']:
            rec['error'] = f'timed out after {timeout:.0f} s'
        elif missing:
            rec['error'] = f'missing Python module: {missing[-1]}'
        elif res['returncode'] != 0:
            rec['error'] = f'exited with {res["returncode"]}'
        else:
            rec['error'] = 'exited 0 but printed no per-frame figure'
        if 'flashinfer not available' in res['output']:
            rec['error'] += ' (it printed: flashinfer not available)'
        rec['tail'] = tail(res['output'])
    return rec


def run_ours(args, setting: str, log: Path, timeout: float) -> dict:
    """Run ``lingbot-ros-bench`` for a setting; return its figures or its failure."""
    with tempfile.TemporaryDirectory() as tmp:
        out_json = Path(tmp) / 'ours.json'
        cmd = ours_command(args.python, setting, args.frames, out_json, args.ours_backend,
                           args.ours_compile, args.ours_head_dtype)
        shown = ours_command('python', setting, args.frames, Path('OUT.json'), args.ours_backend,
                             args.ours_compile, args.ours_head_dtype)
        rec: dict = {'ok': False, 'command': shlex.join(shown), 'cwd': str(REPO),
                     'timeout_s': round(timeout)}
        if timeout < 30:
            rec['error'] = _no_time(timeout)
            return rec
        res = run_logged(cmd, REPO, child_env(REPO), log, f'ours {setting}', timeout)
        rec.update(returncode=res['returncode'], timed_out=res['timed_out'],
                   seconds=res['seconds'])
        try:
            data = json.loads(out_json.read_text())
            rec.update(parse_ours_json(data))
            rec['ok'] = res['returncode'] == 0
            if not rec['ok']:   # its figures stand, but a run that did not end well is not counted
                ended = (f'timed out after {timeout:.0f} s' if res['timed_out']
                         else f'exited with {res["returncode"]}')
                rec['error'] = f'{ended} after it had written its results'
                rec['tail'] = tail(res['output'])
        except (OSError, ValueError, KeyError) as exc:
            rec['error'] = (f'timed out after {timeout:.0f} s' if res['timed_out']
                            else f'exited with {res["returncode"]}, no JSON ({exc!r})')
            rec['tail'] = tail(res['output'])
    return rec


def plan_timeouts(remaining: float, kind: str, pending_ours: int, reference_cap: float,
                  ours_cap: float) -> float:
    """Timeout of the next run: its cap, but never eating the time kept for ours."""
    if kind == 'ours':
        return min(ours_cap, remaining)
    return min(reference_cap, remaining - pending_ours * ours_cap)
