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
One setting's result: both sides' figures, their ratios, the versions; its JSON and text.

``side_by_side_<setting>.json`` keeps both records in full (commands, versions, the
reference's figures at 10, 50 and 90 % of the run); the text is the short table a person
reads; :func:`record` puts the figures in the results file the performance page reads.
"""

import json
from pathlib import Path
import sys
from typing import Optional

import results_file
from sidebyside.reference import reference_backend_label
from sidebyside.settings import (HEIGHT, SCALE_FRAMES, SETTINGS, SLIDING_WINDOW,
                                 STANDARD_FRAMES, WIDTH)

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
                     'frames_in_issue': STANDARD_FRAMES, 'shortened': frames < STANDARD_FRAMES,
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


def record(path: Path, result: dict, config: str) -> bool:
    """Put one setting's figures in the results file; False (and why) if they do not fit."""
    try:
        results_file.record(path, results_file.side_by_side_run(result, config))
    except results_file.SchemaError as exc:
        print(f'side_by_side: not recorded in {path}: {exc}', file=sys.stderr)
        return False
    print(f"side_by_side: recorded {result['setting']} ({config}) in {path}", flush=True)
    return True
