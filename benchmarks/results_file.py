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

r"""
The current figures of the live and side-by-side benchmarks: one entry per run, in one file.

``results/live.json`` and ``results/side_by_side.json`` hold ``{"runs": [...]}``; a rerun
replaces the entry with its key (live: ``name``; side by side: ``setting`` and ``config``),
so each file says what holds now and git keeps what held before. :func:`record` checks the
file and the new entry against the schema before it writes, and writes the file whole (a
temporary file beside it, then a rename): an interrupted run leaves the old file intact.

``live_node.py --record`` and ``side_by_side.py --record`` call it with their own reports;
by hand, from a report already written::

    python benchmarks/results_file.py live REPORT.json --name 15hz --config shipped \\
        --gpu 'NVIDIA H100 80GB HBM3' --commit SHA
    python benchmarks/results_file.py side-by-side side_by_side_default.json --config shipped
"""

import argparse
import dataclasses
from dataclasses import dataclass
import datetime
from enum import Enum
import json
import math
import os
from pathlib import Path
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Any, List, Optional, Sequence, Tuple, Union

RESULTS = Path(__file__).resolve().parent / 'results'
LIVE_FILE = RESULTS / 'live.json'
SIDE_BY_SIDE_FILE = RESULTS / 'side_by_side.json'
SHIPPED = 'shipped'  # the config name of a run with the package's own parameter file
_COMMIT = re.compile(r'[0-9a-f]{7,40}')
_CONFIG = re.compile(r'[a-z0-9][a-z0-9_+.-]*')


class SchemaError(ValueError):
    """A results file or a new entry that does not follow the schema; says where."""


class Setting(Enum):
    """The two settings side_by_side.py runs (its ``SETTINGS``)."""

    DEFAULT = 'default'   # 4 camera iterations, every frame a keyframe
    KF2_IT1 = 'kf2_it1'   # 1 camera iteration, keyframe interval 2


@dataclass(frozen=True)
class CameraFigures:
    """One camera of a live run: counts over the whole run, latencies after the warm-up."""

    counter_received: int   # frames the independent counter beside the node saw
    node_received: int      # frames the node's callback took
    processed: int          # frames the node processed (a pose each)
    e2e_ms_p50: float       # image stamp to pose at the counter
    e2e_ms_p99: float
    step_ms_p50: float      # the node's step, from /diagnostics


@dataclass(frozen=True)
class LiveRun:
    """One run of live_node.py: the node over DDS at a camera rate, counted beside it."""

    name: str
    config: str
    gpu: str
    commit: str
    date: str
    cameras: int
    rate_hz: float
    per_camera: Tuple[CameraFigures, ...]

    @property
    def key(self) -> Tuple[str, ...]:
        return (self.name,)


@dataclass(frozen=True)
class SideBySideRun:
    """One setting of side_by_side.py: the reference's profiler and our bench in one call."""

    setting: Setting
    config: str
    gpu: str
    commit: str
    date: str
    reference_ms_mid: float      # the reference's +-30-frame mean at mid-run
    reference_ms_overall: float
    ours_ms_steady: float        # our median once the window is full
    ours_ms_overall: float

    @property
    def key(self) -> Tuple[str, ...]:
        return (self.setting.value, self.config)


Run = Union[LiveRun, SideBySideRun]


# --------------------------------------------------------------------------- the schema


def _check(where: str, name: str, kind: Any, value: Any) -> Any:
    """Return ``value`` as field ``name`` holds it, or raise SchemaError saying why not."""
    at = f'{where}: {name}={value!r}'
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise SchemaError(f'{at} is not a whole number >= 0')
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise SchemaError(f'{at} is not a finite number >= 0')
        return float(value)
    if kind is Setting:
        try:
            return Setting(value)
        except ValueError:
            raise SchemaError(f'{at} is not one of '
                              + ', '.join(s.value for s in Setting)) from None
    if not isinstance(value, str) or not value:
        raise SchemaError(f'{at} is not a non-empty string')
    if name == 'commit' and not _COMMIT.fullmatch(value):
        raise SchemaError(f'{at} is not a commit (7 to 40 hex digits)')
    if name == 'config' and not _CONFIG.fullmatch(value):
        raise SchemaError(f'{at} is not a config name (lower case, digits, _ + . -)')
    if name == 'date':
        try:
            datetime.date.fromisoformat(value)
        except ValueError:
            raise SchemaError(f'{at} is not a date YYYY-MM-DD') from None
        if len(value) != 10:
            raise SchemaError(f'{at} is not a date YYYY-MM-DD')
    return value


_TYPES = {'counter_received': int, 'node_received': int, 'processed': int, 'cameras': int,
          'e2e_ms_p50': float, 'e2e_ms_p99': float, 'step_ms_p50': float, 'rate_hz': float,
          'reference_ms_mid': float, 'reference_ms_overall': float,
          'ours_ms_steady': float, 'ours_ms_overall': float, 'setting': Setting}


def _build(cls: Any, data: Any, where: str) -> Any:
    """Build ``cls`` from a JSON object with exactly its fields, each checked."""
    if not isinstance(data, dict):
        raise SchemaError(f'{where}: an object expected, got {type(data).__name__}')
    names = [f.name for f in dataclasses.fields(cls)]
    missing = [n for n in names if n not in data]
    unknown = sorted(set(data) - set(names))
    if missing or unknown:
        raise SchemaError(f'{where}: ' + '; '.join(
            part for part in (missing and 'missing ' + ', '.join(missing),
                              unknown and 'unknown ' + ', '.join(unknown)) if part))
    values = {}
    for n in names:
        if n == 'per_camera':
            cams = data[n]
            if not isinstance(cams, list) or not cams:
                raise SchemaError(f'{where}: per_camera is not a non-empty list')
            values[n] = tuple(_build(CameraFigures, c, f'{where}.per_camera[{i}]')
                              for i, c in enumerate(cams))
        else:
            values[n] = _check(where, n, _TYPES.get(n, str), data[n])
    run = cls(**values)
    if isinstance(run, LiveRun):
        if run.cameras != len(run.per_camera):
            raise SchemaError(f'{where}: cameras={run.cameras} but per_camera has '
                              f'{len(run.per_camera)}')
        if run.rate_hz <= 0:
            raise SchemaError(f'{where}: rate_hz={run.rate_hz} is not above 0')
    return run


def to_json(run: Run) -> dict:
    """Return the entry as it is written (the schema's field order)."""
    out = dataclasses.asdict(run)
    if isinstance(run, SideBySideRun):
        out['setting'] = run.setting.value
    else:
        out['per_camera'] = list(out['per_camera'])  # a JSON array, as it is read back
    return out


def load(path: Path, kind: type) -> List[Run]:
    """Return the runs of a results file (none when it does not exist); checks the schema."""
    path = Path(path)
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise SchemaError(f'{path}: not JSON ({exc})') from None
    if not isinstance(data, dict) or set(data) != {'runs'} or not isinstance(data['runs'], list):
        raise SchemaError(f'{path}: expected {{"runs": [...]}} and nothing else')
    runs = [_build(kind, r, f'{path.name} runs[{i}]') for i, r in enumerate(data['runs'])]
    keys = [r.key for r in runs]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise SchemaError(f'{path}: more than one entry for ' + ', '.join('/'.join(k)
                                                                          for k in twice))
    return runs


def record(path: Path, run: Run) -> List[Run]:
    """Put ``run`` in the file, in place of the entry with its key; return the file's runs."""
    path = Path(path)
    run = _build(type(run), to_json(run), 'new entry')  # the same checks as a read
    runs = load(path, type(run))
    for i, old in enumerate(runs):
        if old.key == run.key:
            runs[i] = run
            break
    else:
        runs.append(run)
    text = json.dumps({'runs': [to_json(r) for r in runs]}, indent=2) + '\n'
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
    try:
        with os.fdopen(fd, 'w') as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return runs


# --------------------------------------------------------------------------- from reports


def _whole(cam: str, totals: dict, key: str) -> int:
    value = totals.get(key)
    if value is None:
        raise SchemaError(f'camera {cam}: the node did not report {key}')
    return int(round(value))


def _blocks(cam: str, blocks: list, key: str) -> list:
    values = [b[key] for b in blocks if b.get(key) is not None]
    if not values:
        raise SchemaError(f'camera {cam}: no block after the warm-up has {key}')
    return values


def live_run(report: dict, name: str, config: str, gpu: str, commit: str) -> LiveRun:
    """
    Summarise a live_node.py report.

    Counts are the run's totals; latencies come from the blocks after the warm-up: the
    median of the blocks' p50 and the largest of their p99 (a block is 250-1,000 frames).
    """
    cams = []
    for cam, rep in report['cameras_report'].items():
        t, blocks = rep['totals'], rep['blocks']
        cams.append(CameraFigures(
            counter_received=int(t['counter_received']),
            node_received=_whole(cam, t, 'node_received'),
            processed=_whole(cam, t, 'node_processed'),
            e2e_ms_p50=round(statistics.median(_blocks(cam, blocks, 'pose_ms_p50')), 1),
            e2e_ms_p99=round(max(_blocks(cam, blocks, 'pose_ms_p99')), 1),
            step_ms_p50=round(statistics.median(_blocks(cam, blocks, 'step_ms_p50')), 1)))
    return LiveRun(name=name, config=config, gpu=gpu, commit=commit,
                   date=str(report['date'])[:10], cameras=int(report['cameras']),
                   rate_hz=float(report['rate_hz']), per_camera=tuple(cams))


def side_by_side_run(result: dict, config: str) -> SideBySideRun:
    """Summarise one setting's result of side_by_side.py (its ``combine``)."""
    ref, ours = result['reference'], result['ours']
    figures = {'reference_ms_mid': ref.get('ms_at_50pct'),
               'reference_ms_overall': ref.get('ms_per_frame_overall'),
               'ours_ms_steady': ours.get('steady_ms_median'),
               'ours_ms_overall': ours.get('ms_per_frame_overall')}
    absent = [k for k, v in figures.items() if v is None]
    if absent:
        raise SchemaError(f"setting {result['setting']}: no figure for " + ', '.join(absent)
                          + ' (a side that failed is not recorded)')
    return SideBySideRun(setting=Setting(result['setting']), config=config,
                         gpu=str(result['gpu']), commit=str(result['versions']['ours']),
                         date=str(result['date'])[:10],
                         **{k: round(float(v), 2) for k, v in figures.items()})


def gpu_name() -> str:
    """Return the first GPU's name as nvidia-smi gives it, or 'cpu' where there is none."""
    try:
        out = subprocess.run(['nvidia-smi', '--query-gpu=name', '--format=csv,noheader'],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return 'cpu'
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else 'cpu'


def head_commit(root: Path) -> Optional[str]:
    """Return the commit checked out at ``root``, or None where git cannot say."""
    try:
        out = subprocess.run(['git', '-C', str(root), 'rev-parse', 'HEAD'],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = out.stdout.strip()
    return sha if out.returncode == 0 and _COMMIT.fullmatch(sha) else None


# --------------------------------------------------------------------------- command line


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Record a report already written into its results file."""
    p = argparse.ArgumentParser(description=__doc__.strip().split('\n')[0])
    sub = p.add_subparsers(dest='kind', required=True)
    lv = sub.add_parser('live', help='a live_node.py report (PREFIX.json)')
    lv.add_argument('report', type=Path)
    lv.add_argument('--name', required=True, help='the run, e.g. 15hz, 30hz, 2cam_15hz')
    lv.add_argument('--gpu', default=None, help="default: nvidia-smi's name of this GPU")
    lv.add_argument('--commit', default=None, help='default: git HEAD of this repository')
    lv.add_argument('--results', type=Path, default=LIVE_FILE)
    sbs = sub.add_parser('side-by-side',
                         help='a side_by_side.py result (side_by_side_<setting>.json)')
    sbs.add_argument('report', type=Path)
    sbs.add_argument('--results', type=Path, default=SIDE_BY_SIDE_FILE)
    for q in (lv, sbs):
        q.add_argument('--config', required=True,
                       help=f"'{SHIPPED}' for the package's own parameter file, else a name for "
                            'what was set on top of it, e.g. compile+fp16_heads')
    args = p.parse_args(argv)
    try:
        report = json.loads(args.report.read_text())
        if args.kind == 'live':
            commit = args.commit or head_commit(RESULTS.parent.parent)
            if commit is None:
                raise SchemaError('no git commit here: pass --commit')
            run = live_run(report, args.name, args.config, args.gpu or gpu_name(), commit)
        else:
            run = side_by_side_run(report, args.config)
        runs = record(args.results, run)
    except (OSError, ValueError, KeyError) as exc:  # SchemaError is a ValueError
        print(f'results_file: {exc}', file=sys.stderr)
        return 1
    print(f'{args.results}: {len(runs)} run(s); recorded {"/".join(run.key)}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
