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
The drift's report: the versions that ran, the comparison table, the notes, as plain text.

The JSON keeps everything (settings, per-frame errors, each run's facts); the text is what a
person reads: one row per comparison, the layer trace when asked for, and each run's status
and wall times.
"""

import importlib.metadata
import json
import math
from pathlib import Path
import platform
from typing import List, Optional, Sequence

from commits import ours_commit as find_ours_commit, reference_commit
from drift.layer_trace import TRACE_STRIDE
from drift.runs import config_fields, engine_config, RunKind, Settings

import numpy as np

import torch


def versions(reference: Optional[Path], ours_commit: Optional[str] = None) -> dict:
    """
    Return Python, torch, FlashInfer and numpy versions and both commits.

    ``ours_commit`` (``--ours-commit``) wins over what git says: the GPU machine's copy of
    the tree can carry a ``.git`` older than the tree itself. Both commits are found as
    every benchmark finds them (``commits.py``).
    """
    out = {'python': platform.python_version(), 'torch': torch.__version__,
           'cuda': torch.version.cuda, 'numpy': np.__version__, 'flashinfer': None}
    for dist in ('flashinfer-python', 'flashinfer'):
        try:
            out['flashinfer'] = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    ours = find_ours_commit(ours_commit)
    out['ours_commit'], out['ours_dirty'] = ours['commit'], ours['dirty']
    out['reference_commit'] = (reference_commit(reference)
                               if reference is not None else None)
    return out


def notes(runs: Sequence[RunKind], settings: Settings, baseline: RunKind) -> List[str]:
    """Return the notes that say how the runs ran (and what ``ours-shipped`` was here)."""
    out = [
        'Weights: seeded random (recipe under weights.recipe), released key names, float32; '
        'both sides load the same file strictly.',
        'Float32 runs: TF32 off. bf16 runs: PyTorch defaults (cuDNN convolutions of the '
        'float32 heads may use TF32), as deployed; ours-bf16-heads: the heads under bf16 '
        'autocast too (head_dtype compute); ours-bf16-heads16: under float16 autocast '
        '(head_dtype float16); ours-bf16-heads16-compiled: that with torch_compile on (on '
        'CUDA; elsewhere the engine says it is off).',
        f'Baseline: {baseline.value}' + ('' if baseline is RunKind.REF_FP32 else
                                         ' (ref-fp32 did not run)'),
    ]
    if RunKind.OURS_SHIPPED in runs:
        fields = config_fields(engine_config(RunKind.OURS_SHIPPED, settings, None))
        chosen = ', '.join(f'{k} {v}' for k, v in fields.items()
                           if k not in ('checkpoint', 'model_config', 'preset', 'device', 'seed'))
        out.append('ours-shipped: the engine configuration the node builds from its parameter '
                   "table's defaults, with this run's preset, weights and device; here "
                   f'{chosen}.')
    return out


def trace_table(rows: Sequence[dict], baseline: str) -> List[str]:
    """Return the trace rows as aligned text (relative distance from ``baseline``)."""
    runs = sorted({k for r in rows for k in r if k != 'module'})
    if not rows or not runs:
        return []
    head = f"{'module (scale call)':36s}" + ''.join(f'{r:>20s}' for r in runs)
    lines = [f'layer trace: ||run - {baseline}|| / ||{baseline}|| of each block output, '
             f'every {TRACE_STRIDE}th token', head, '-' * len(head)]
    for r in rows:
        lines.append(f"{r['module']:36s}"
                     + ''.join(f"{_num(r[k]) if k in r else '-':>20s}" for k in runs))
    return lines


def _num(x: float) -> str:
    if x is None or not math.isfinite(x):
        return '-'
    return f'{x:.4f}' if abs(x) >= 1e-3 or x == 0 else f'{x:.1e}'


COLUMNS = (('rot mean', 'rotation_mean_deg'), ('rot max', 'rotation_max_deg'),
           ('rot evict', 'rotation_mean_deg_evicting'), ('depth med%', 'depth_median_pct'),
           ('depth p90%', 'depth_p90_pct'), ('trans mean', 'translation_mean'),
           ('trans max', 'translation_max'), ('fov max', 'fov_max_rad'),
           ('enc max', 'pose_enc_max_abs'))


def table(comparisons: Sequence[dict]) -> List[str]:
    """Return the comparison rows as aligned plain text."""
    head = f"{'run':20s} {'against':10s}" + ''.join(f'{c:>11s}' for c, _ in COLUMNS)
    lines = [head, '-' * len(head)]
    for c in comparisons:
        s = c['summary']
        lines.append(f"{c['run']:20s} {c['against']:10s}"
                     + ''.join(f'{_num(s[k]):>11s}' for _, k in COLUMNS))
    return lines


def report_text(result: dict) -> str:
    """Return the plain-text report: settings, the drift table, wall times, notes."""
    s = result['settings']
    img = result['images']
    lines = [
        f"bf16 drift, {result['date']} on {result['device']}",
        f"{s['frames']} frames ping-ponged from {img['files']} images ({img['folder']}), "
        f"model grid {img['model_hw'][0]}x{img['model_hw'][1]}; preset {s['preset']}, "
        f"{s['scale_frames']} scale frames, window {s['sliding_window']} "
        f"({result['evictions']} evictions), every frame a keyframe, "
        f"{s['camera_iterations']} camera iterations, weight seed {s['seed']}",
        f"versions: {json.dumps(result['versions'])}",
        '',
        'rotation: degrees between camera rotations (mean, max, mean over frames from the '
        'first eviction on); depth: |d - d_ref| / |d_ref| over all pixels of all frames (%); '
        'translation: distance of T (model units); fov: radians',
        '',
    ]
    lines += table(result['comparisons'])
    if result.get('trace'):
        lines += [''] + trace_table(result['trace'], result['baseline'])
    lines += ['', f"{'run':20s} {'status':8s} {'load s':>8s} {'infer s':>8s} {'ms/frame':>9s} "
              f"{'child s':>8s}  back end"]
    for name, r in result['runs'].items():
        if r.get('skipped'):
            lines.append(f"{name:20s} skipped  {r['skipped']}")
            continue
        f = r.get('facts', {})
        status = ('reused' if r.get('resumed') else 'ok') if r.get('ok') else 'FAILED'
        lines.append(f"{name:20s} {status:8s} {f.get('load_s', '-'):>8} "
                     f"{f.get('inference_s', '-'):>8} {f.get('ms_per_frame', '-'):>9} "
                     f"{r.get('child_s', '-'):>8}  {f.get('backend', r.get('error', ''))}")
    lines += [''] + [f'note: {n}' for n in result['notes']]
    return '\n'.join(lines) + '\n'
