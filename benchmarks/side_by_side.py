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
#
# ---------------------------------------------------------------------------------------------
# Making the reference runnable on the GPU machine (nothing of it is ever committed here).
#
# Here, once, from the root of this repository. REF is a checkout of Robbyant/lingbot-map, or
# its git directory (a bare mirror works: files are taken from its HEAD). Only the profiler,
# the model package without its viewer, the licence and pyproject travel: 33 files, 451,306
# bytes at commit 4cd9860 (no images, videos, paper or weights: the profiler builds the model
# with random weights and feeds it random images).
#
#   REF=/path/to/lingbot-map
#   grep -qxF /.reference/ .git/info/exclude || echo /.reference/ >> .git/info/exclude
#   rm -rf .reference && mkdir .reference
#   git -C "$REF" archive HEAD gct_profile.py pyproject.toml LICENSE.txt \
#       lingbot_map/__init__.py lingbot_map/aggregator lingbot_map/heads lingbot_map/layers \
#       lingbot_map/models lingbot_map/utils | tar -x -C .reference
#   git -C "$REF" rev-parse HEAD > .reference/COMMIT
#   git rev-parse HEAD > .reference/OURS_COMMIT    # the device copy may have no .git
#   ../shared/device/fetch-wheels.sh                # -> .whl.tar.xz (about 21 MB)
#
# The only wheels the GPU machine lacks for both sides are FlashInfer's two (cp312,
# manylinux): flashinfer-python==0.6.18.post1 (py3-none-any) and apache-tvm-ffi==0.1.15.post2.
# Everything else the reference imports on the profiler's path (torch, numpy, einops, tqdm,
# scipy, huggingface_hub, typing_extensions) is already there.
#
# Then one device call, carry [".whl.tar.xz", ".reference"], timeout 600:
#
#   rm -rf .site .whl; tar -xJf .whl.tar.xz && python3 -m pip install -q --no-index \
#   --no-deps --no-compile --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD \
#   MAX_JOBS=16 PYTHONUNBUFFERED=1 || exit; python3 benchmarks/side_by_side.py \
#   --reference .reference --out $OUT
#
# and copy what comes back (side_by_side_<setting>.{json,txt}) into benchmarks/results/, or
# pass --record --config CONFIG to update results/side_by_side.json too. Both settings at the
# full 300 frames take about 5 minutes with the reference's torch.compile and FlashInfer's first
# kernel build included, so --frames needs no shortening. Without a GPU, --dry-run prints the
# commands it would run.
# ---------------------------------------------------------------------------------------------

"""
Side by side: the reference implementation's own profiler and ours, in one run.

Runs the reference's ``gct_profile.py`` from a checkout given by ``--reference`` as an
external program (the way its users run it: torch.compile, FlashInfer, bf16, seeded random
weights, random images), then ``lingbot-ros-bench`` with the same settings, each in a
subprocess with a timeout, and writes ``side_by_side_<setting>.json`` and ``.txt`` (both
ms/frame figures, their ratio, GPU, date, versions) and ``.log`` (both outputs) into ``--out``.
When the reference cannot run (a missing package, a crash, a timeout) the failure and the last
lines of its output are recorded and ours still runs. With ``--record --config CONFIG`` each
setting's figures also go into ``results/side_by_side.json`` (``results_file.py``).
"""

import argparse
import datetime
import json
import os
from pathlib import Path
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file  # noqa: E402,I100 (the side-by-side results file; standard library only)

REPO = Path(__file__).resolve().parents[1]

# The issue's settings: 378x504 images, 8 scale frames, window 64, bf16, 300 frames.
HEIGHT, WIDTH, SCALE_FRAMES, SLIDING_WINDOW = 378, 504, 8, 64
ISSUE_FRAMES = 300
SETTINGS = {
    'default': {'keyframe_interval': 1, 'camera_iterations': 4,
                'label': '4 camera iterations, every frame a keyframe'},
    'kf2_it1': {'keyframe_interval': 2, 'camera_iterations': 1,
                'label': '1 camera iteration, keyframe interval 2'},
}

# What identifies the reference checkout, and the profiler flags this script passes.
REFERENCE_FILES = ('gct_profile.py', 'lingbot_map/models/gct_stream.py',
                   'lingbot_map/aggregator/stream.py', 'lingbot_map/layers/flashinfer_cache.py')
PROFILER_FLAGS = ('--backend', '--dtype', '--img_h', '--img_w', '--num_frames',
                  '--sliding_window', '--camera_num_iterations', '--keyframe_interval')
# Third-party modules the reference imports on the profiler's path.
REFERENCE_MODULES = ('torch', 'numpy', 'einops', 'tqdm', 'scipy', 'huggingface_hub',
                     'typing_extensions', 'flashinfer')

NOTES = [
    'Both sides ran on the same GPU in the same command, one after the other, each in its own '
    'process: random weights, bf16, 378x504, 8 scale frames, window 64. "overall" = (the scale '
    'call + every streaming frame) / all frames, on both sides.',
    'Reference: its own profiler, unmodified; per-frame CUDA-event time of the forward only '
    '(input copy excluded, point head dropped, outputs left on the GPU); Gaussian-noise images; '
    'torch.compile warm-up before timing.',
    'Ours: lingbot-ros-bench wall-clock per call after a synchronize, including the copies of '
    'pose, depth and confidence to the host; a panned random texture; one untimed warm-up run.',
]


class NotAReferenceCheckout(ValueError):
    """``--reference`` does not point at a usable checkout of Robbyant/lingbot-map."""


# --------------------------------------------------------------------------- the reference


def check_reference(path: Path, fa3: bool = False) -> Path:
    """Return the checkout's resolved path, or raise ``NotAReferenceCheckout`` saying why."""
    path = Path(path).expanduser()
    hint = ('--reference must be a folder holding a checkout of Robbyant/lingbot-map '
            '(its gct_profile.py and lingbot_map/ package); see the top of this script')
    if not path.is_dir():
        raise NotAReferenceCheckout(f'{path}: no such folder. {hint}')
    if (path / 'HEAD').is_file() and (path / 'objects').is_dir():
        raise NotAReferenceCheckout(
            f'{path} is a git directory without files. Make a checkout first, e.g. '
            f'git -C {path} archive HEAD gct_profile.py lingbot_map | tar -x -C .reference')
    missing = [f for f in REFERENCE_FILES if not (path / f).is_file()]
    if missing:
        raise NotAReferenceCheckout(f'{path} lacks {", ".join(missing)}. {hint}')
    text = (path / 'gct_profile.py').read_text(errors='replace')
    flags = PROFILER_FLAGS + (('--fa3',) if fa3 else ())
    absent = [f for f in flags if f"'{f}'" not in text and f'"{f}"' not in text]
    if 'GCTStream' not in text or absent:
        raise NotAReferenceCheckout(
            f'{path / "gct_profile.py"} is not the expected profiler (missing: '
            f'{", ".join(absent) or "GCTStream"}). {hint}')
    return path.resolve()


def reference_command(python: str, setting: str, frames: int, backend: str = 'flashinfer',
                      fa3: bool = False) -> List[str]:
    """Return the reference profiler's command line (run with the checkout as cwd)."""
    s = SETTINGS[setting]
    cmd = [python, 'gct_profile.py', '--backend', backend, '--dtype', 'bf16',
           '--img_h', str(HEIGHT), '--img_w', str(WIDTH), '--num_frames', str(frames),
           '--sliding_window', str(SLIDING_WINDOW),
           '--camera_num_iterations', str(s['camera_iterations']),
           '--keyframe_interval', str(s['keyframe_interval'])]
    return cmd + (['--fa3'] if fa3 else [])


_HEADER = re.compile(r'GCTStream FPS profiling\s*\|\s*(?P<h>\d+)\D(?P<w>\d+)\s*\|\s*'
                     r'(?P<n>\d+) frames\s*\|\s*sw=(?P<sw>\d+)\s*\|\s*kf_int=(?P<kf>\d+)')
_RUN = re.compile(r'\[(?P<key>\w+)\]\s+\((?P<total>\d+) total frames: (?P<scale>\d+) scale '
                  r'\+ (?P<stream>\d+) streaming\)')
_TOTAL = re.compile(r'total time:\s*(?P<s>[\d.]+)\s*s\s*\((?P<p1>[\d.]+)\s*ms phase1\s*\+\s*'
                    r'(?P<p2>[\d.]+)\s*ms phase2\)')
_PER_FRAME = re.compile(r'per frame\s*:\s*(?P<ms>[\d.]+)\s*ms\b.*?(?P<fps>[\d.]+)\s*FPS')
_WINDOW = re.compile(r'frame\s+(?P<frame>\d+)\s+\((?P<pct>\d+)%\):\s*(?P<ms>[\d.]+)\s*ms')
_MISSING = re.compile(r"No module named '(?P<name>[\w.]+)'")


def parse_reference_output(text: str) -> dict:
    """
    Read the reference profiler's printed summary.

    Returns ``{'header': {...}, 'runs': {key: {...}}}`` with, per run (``flashinfer_bf16``
    and the like): frames, ms/frame and FPS overall, phase-1 ms, and the windowed ms at
    10/50/90 % of the streaming frames. Runs without a parsable overall figure are left out.
    """
    out: dict = {'header': {}, 'runs': {}}
    m = _HEADER.search(text)
    if m:
        out['header'] = {'height': int(m['h']), 'width': int(m['w']), 'frames': int(m['n']),
                         'sliding_window': int(m['sw']), 'keyframe_interval': int(m['kf'])}
    starts = list(_RUN.finditer(text))
    for i, m in enumerate(starts):
        section = text[m.end():starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        per_frame = _PER_FRAME.search(section)
        if not per_frame:
            continue
        run = {'total_frames': int(m['total']), 'scale_frames': int(m['scale']),
               'streaming_frames': int(m['stream']),
               'ms_per_frame_overall': float(per_frame['ms']),
               'fps_overall': float(per_frame['fps'])}
        total = _TOTAL.search(section)
        if total:
            run.update(total_s=float(total['s']), phase1_ms=float(total['p1']),
                       phase2_ms=float(total['p2']))
        for w in _WINDOW.finditer(section):
            run[f"ms_at_{w['pct']}pct"] = float(w['ms'])
            run[f"frame_at_{w['pct']}pct"] = int(w['frame'])
        out['runs'][m['key']] = run
    return out


def reference_commit(path: Path, override: Optional[str] = None) -> str:
    """Return the reference's commit: override, its own git, a COMMIT file, or 'unknown'."""
    if override:
        return override
    if (path / '.git').exists():
        sha = _git(path, 'rev-parse', 'HEAD')
        if sha:
            return sha
    if (path / 'COMMIT').is_file():
        return (path / 'COMMIT').read_text().strip() or 'unknown'
    return 'unknown'


# --------------------------------------------------------------------------- ours


def ours_command(python: str, setting: str, frames: int, out_json: Path,
                 backend: str = 'auto', compile_blocks: bool = False,
                 head_dtype: Optional[str] = None) -> List[str]:
    """
    Return ``lingbot-ros-bench``'s command line for a setting (run from this repo).

    ``head_dtype`` (None: the bench's default, float32 heads as the reference's) is passed
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


def ours_commit(override: Optional[str] = None) -> dict:
    """Return this repository's commit and whether tracked files differ from it."""
    if override:
        return {'commit': override, 'dirty': None}
    sha = _git(REPO, 'rev-parse', 'HEAD')
    if sha:
        status = _git(REPO, 'status', '--porcelain', '--untracked-files=no')
        return {'commit': sha, 'dirty': bool(status)}
    for f in (REPO / '.reference' / 'OURS_COMMIT', REPO / 'OURS_COMMIT'):
        if f.is_file():
            return {'commit': f.read_text().strip(), 'dirty': None}
    return {'commit': 'unknown', 'dirty': None}


# --------------------------------------------------------------------------- running


def _git(path: Path, *args: str) -> str:
    try:
        proc = subprocess.run(['git', '-C', str(path), *args], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ''
    return proc.stdout.strip() if proc.returncode == 0 else ''


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
        missing = _MISSING.findall(res['output'])
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


# --------------------------------------------------------------------------- results


def reference_backend_label(backend: str, fa3: bool) -> str:
    """Name the reference's attention path (its --fa3 only affects FlashInfer)."""
    if backend != 'flashinfer':
        return backend
    return 'flashinfer fa3' if fa3 else 'flashinfer fa2'


def combine(setting: str, frames: int, reference: dict, ours: dict, env_info: dict,
            commits: dict, date: str, backend: str = 'flashinfer', fa3: bool = False) -> dict:
    """Assemble one setting's result: both figures, the ratios, GPU, date and versions."""
    s = SETTINGS[setting]

    def ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
        return round(a / b, 4) if a and b else None

    ref_ms, ours_ms = reference.get('ms_per_frame_overall'), ours.get('ms_per_frame_overall')
    return {
        'setting': setting,
        'description': (f'bf16, {HEIGHT}x{WIDTH}, {SCALE_FRAMES} scale frames, window '
                        f"{SLIDING_WINDOW}, {s['label']}, {frames} frames"),
        'date': date,
        'gpu': env_info.get('gpu') or ours.get('gpu'),
        'versions': {'python': env_info.get('python'), 'torch': env_info.get('torch'),
                     'cuda': env_info.get('cuda'), 'flashinfer': env_info.get('flashinfer'),
                     'nvidia_smi': env_info.get('nvidia_smi'),
                     'ours': commits['ours'].get('commit'),
                     'ours_dirty': commits['ours'].get('dirty'),
                     'reference': commits['reference']},
        'settings': {'height': HEIGHT, 'width': WIDTH, 'scale_frames': SCALE_FRAMES,
                     'sliding_window': SLIDING_WINDOW, 'dtype': 'bfloat16',
                     'camera_iterations': s['camera_iterations'],
                     'keyframe_interval': s['keyframe_interval'], 'frames': frames,
                     'frames_in_issue': ISSUE_FRAMES, 'shortened': frames < ISSUE_FRAMES,
                     'reference_backend': reference_backend_label(backend, fa3)},
        'reference_ms_per_frame': ref_ms,
        'ours_ms_per_frame': ours_ms,
        'ratio_reference_over_ours': ratio(ref_ms, ours_ms),
        # Approximate: the reference's +-30-frame mean at mid-run vs our median once the
        # window is full.
        'ratio_mid_reference_over_ours_steady': ratio(reference.get('ms_at_50pct'),
                                                      ours.get('steady_ms_median')),
        'missing_for_reference': env_info.get('missing_for_reference'),
        'reference': reference,
        'ours': ours,
        'notes': NOTES,
    }


def _fmt(v: Optional[float], spec: str = '.1f') -> str:
    return '-' if v is None else format(v, spec)


def render_text(r: dict) -> str:
    """Return the short text table for one setting's result."""
    v, ref, ours = r['versions'], r['reference'], r['ours']
    lines = [
        f"side by side, {r['setting']}: {r['description']}",
        f"{r['gpu'] or 'GPU unknown'}, {r['date']}; torch {v['torch']}, CUDA {v['cuda']}, "
        f"FlashInfer {v['flashinfer']}",
        f"reference {str(v['reference'])[:12]} ({r['settings']['reference_backend']}), "
        f"ours {str(v['ours'])[:12]}" + (' (uncommitted changes)' if v['ours_dirty'] else '')
        + (f", torch_compile {ours['torch_compile']}" if ours.get('torch_compile') else '')
        + (f", heads in {ours['heads_compute_in']}" if ours.get('heads_compute_in') else ''),
        '',
        f"{'':24s}{'ms/frame overall':>18s}{'FPS':>8s}{'mid/steady ms':>15s}",
        f"{'reference':24s}{_fmt(ref.get('ms_per_frame_overall'), '.2f'):>18s}"
        f"{_fmt(ref.get('fps_overall')):>8s}{_fmt(ref.get('ms_at_50pct'), '.2f'):>15s}",
        f"{'ours':24s}{_fmt(ours.get('ms_per_frame_overall'), '.2f'):>18s}"
        f"{_fmt(ours.get('fps_overall')):>8s}{_fmt(ours.get('steady_ms_median'), '.2f'):>15s}",
        f"{'reference / ours':24s}{_fmt(r['ratio_reference_over_ours'], '.3f'):>18s}"
        f"{'':>8s}{_fmt(r['ratio_mid_reference_over_ours_steady'], '.3f'):>15s}",
    ]
    if r['settings']['shortened']:
        lines.append(f"(shortened: {r['settings']['frames']} frames instead of "
                     f"{r['settings']['frames_in_issue']})")
    for side, rec in (('reference', ref), ('ours', ours)):
        if not rec.get('ok'):
            lines.append(f"{side} FAILED: {rec.get('error', 'unknown')}")
            lines += ['  | ' + ln for ln in rec.get('tail', [])[-8:]]
    return '\n'.join(lines) + '\n'


def write_result(out: Path, r: dict) -> Path:
    """Write ``side_by_side_<setting>.json`` and ``.txt``; return the JSON's path."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"side_by_side_{r['setting']}.json"
    path.write_text(json.dumps(r, indent=2, default=str) + '\n')
    path.with_suffix('.txt').write_text(render_text(r))
    return path


def plan_timeouts(remaining: float, kind: str, pending_ours: int, reference_cap: float,
                  ours_cap: float) -> float:
    """Timeout of the next run: its cap, but never eating the time kept for ours."""
    if kind == 'ours':
        return min(ours_cap, remaining)
    return min(reference_cap, remaining - pending_ours * ours_cap)


# --------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    p = argparse.ArgumentParser(prog='side_by_side.py', description=__doc__.split('\n')[1])
    p.add_argument('--reference', type=Path, required=True,
                   help='checkout of Robbyant/lingbot-map (e.g. .reference)')
    p.add_argument('--out', type=Path, required=True, help='folder for the results')
    p.add_argument('--setting', choices=sorted(SETTINGS) + ['both'], default='both')
    p.add_argument('--frames', type=int, default=ISSUE_FRAMES,
                   help=f'frames per run, both sides (standard: {ISSUE_FRAMES})')
    p.add_argument('--fa3', action='store_true',
                   help="pass --fa3 to the reference (FlashInfer's SM90 kernel)")
    p.add_argument('--reference-backend', choices=['flashinfer', 'sdpa'], default='flashinfer')
    p.add_argument('--ours-backend', choices=['auto', 'sdpa', 'flashinfer'], default='auto')
    p.add_argument('--ours-compile', action='store_true',
                   help="ours with torch_compile on (the reference's profiler compiles too)")
    # imported here: bf16_drift.py imports this module in the reference's processes too
    from lingbot_ros.streaming.config import HeadDtype
    p.add_argument('--ours-head-dtype', choices=[h.value for h in HeadDtype], default=None,
                   help="ours' head_dtype: what the camera and depth heads compute in "
                   "(default: the bench's, float32 as the reference's)")
    p.add_argument('--python', default=sys.executable, help='interpreter for both sides')
    p.add_argument('--budget-s', type=float, default=540,
                   help='wall-clock budget of the whole command')
    p.add_argument('--reference-timeout-s', type=float, default=300)
    p.add_argument('--ours-timeout-s', type=float, default=180)
    p.add_argument('--reference-commit', default=None, help='override the detected commit')
    p.add_argument('--ours-commit', default=None, help='override the detected commit')
    p.add_argument('--dry-run', action='store_true', help='print the commands, run nothing')
    p.add_argument('--record', action='store_true',
                   help="also put each setting's figures in the side-by-side results file, in "
                        'place of the entry of that setting and config (needs --config)')
    p.add_argument('--config', default=None,
                   help=f"with --record: '{results_file.SHIPPED}' for our bench as the package "
                        'ships, else a name for what --ours-* changed (e.g. compile+fp16_heads)')
    p.add_argument('--results', type=Path, default=results_file.SIDE_BY_SIDE_FILE,
                   help='the side-by-side results file (default: %(default)s)')
    return p


def record(path: Path, result: dict, config: str) -> bool:
    """Put one setting's figures in the results file; False (and why) if they do not fit."""
    try:
        results_file.record(path, results_file.side_by_side_run(result, config))
    except results_file.SchemaError as exc:
        print(f'side_by_side: not recorded in {path}: {exc}', file=sys.stderr)
        return False
    print(f"side_by_side: recorded {result['setting']} ({config}) in {path}", flush=True)
    return True


def main(argv: Optional[List[str]] = None) -> int:
    """Run both sides for the chosen settings; write JSON and text; 0 when all ran."""
    t0 = time.monotonic()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.record and not args.config:
        parser.error('--record needs --config')
    if args.frames <= SCALE_FRAMES + 2:
        print(f'--frames must exceed {SCALE_FRAMES + 2}', file=sys.stderr)
        return 2
    try:
        ref = check_reference(args.reference, args.fa3)
    except NotAReferenceCheckout as exc:
        print(f'side_by_side: {exc}', file=sys.stderr)
        return 2
    settings = list(SETTINGS) if args.setting == 'both' else [args.setting]
    if args.dry_run:
        for s in settings:
            ref_cmd = reference_command('python', s, args.frames, args.reference_backend,
                                        args.fa3)
            print(f'{s} reference: cd {shlex.quote(str(ref))} && {shlex.join(ref_cmd)}')
            our_cmd = ours_command('python', s, args.frames, Path('OUT.json'), args.ours_backend,
                                   args.ours_compile, args.ours_head_dtype)
            print(f'{s} ours:      cd {shlex.quote(str(REPO))} && {shlex.join(our_cmd)}')
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    env_info = probe_versions(args.python, child_env(REPO))
    commits = {'ours': ours_commit(args.ours_commit),
               'reference': reference_commit(ref, args.reference_commit)}
    print(f'side_by_side: {json.dumps(env_info)}; ours {commits["ours"]}, '
          f'reference {commits["reference"]}', flush=True)
    all_ok = True
    for i, s in enumerate(settings):
        log = args.out / f'side_by_side_{s}.log'
        log.write_text(f'side_by_side {s}, {date}\n')
        pending_ours = len(settings) - i
        remaining = args.budget_s - (time.monotonic() - t0)
        reference = run_reference(args, s, ref, log, plan_timeouts(
            remaining, 'reference', pending_ours, args.reference_timeout_s,
            args.ours_timeout_s))
        remaining = args.budget_s - (time.monotonic() - t0)
        ours = run_ours(args, s, log, plan_timeouts(
            remaining, 'ours', pending_ours - 1, args.reference_timeout_s,
            args.ours_timeout_s))
        result = combine(s, args.frames, reference, ours, env_info, commits, date,
                         args.reference_backend, args.fa3)
        path = write_result(args.out, result)
        print(render_text(result) + f'-> {path}', flush=True)
        all_ok = all_ok and reference['ok'] and ours['ok']
        if args.record:
            all_ok = record(args.results, result, args.config) and all_ok
    return 0 if all_ok else 1


if __name__ == '__main__':
    sys.exit(main())
