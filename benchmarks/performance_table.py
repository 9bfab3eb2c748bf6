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
Write docs/performance.md from the results files, so the page says what the files hold.

Reads ``results/side_by_side.json`` and ``results/live.json`` (through ``results_file.py``,
which checks their schema) and every ``results/bf16_drift*.json``. ``--check`` writes nothing
and exits 1 when the page differs from what the files make (a test runs the same
comparison). Run it after recording a result::

    python benchmarks/performance_table.py          # -> docs/performance.md
"""

import argparse
import json
from pathlib import Path
import sys
import textwrap
from typing import List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file as rf  # noqa: E402,I100

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / 'docs' / 'performance.md'
SETTING_WORDS = {rf.Setting.DEFAULT: '4 camera iterations, every frame a keyframe',
                 rf.Setting.KF2_IT1: '1 camera iteration, keyframe interval 2'}

HEAD = """\
# Performance

<!-- Made by benchmarks/performance_table.py from benchmarks/results/*.json: edit those, or
rerun the benchmarks, then run the script; a test keeps this page and the files in step. -->

The current figures, one row per run; each run's command, and how to rerun it, is in
[benchmarks/README.md](../benchmarks/README.md), and the history is in git. All runs use
seeded random weights (speed does not depend on their values). `config` says what ran:
`shipped` is the package's own parameter file alone; any other name says what was set on
top of the parameter file of that commit (`compile+fp16_heads`: `torch_compile: true` and
`head_dtype: float16`; `eager+fp32_heads`: neither). Compare times only within one GPU.
"""


def _f(value: float, digits: int = 1) -> str:
    return f'{value:.{digits}f}'


def _g(value: float) -> str:
    return f'{value:.1e}' if abs(value) < 0.01 else f'{value:.3f}'


def _text(words: str) -> str:
    return textwrap.fill(words, width=96)


def _row(cells: Sequence[str]) -> str:
    return '| ' + ' | '.join(cells) + ' |'


def side_by_side_section(runs: List[rf.SideBySideRun]) -> List[str]:
    """Table the model's speed beside the reference's own profiler, timed in the same call."""
    out = ['## Model speed, beside the reference', '', _text(
           'Release structure, bf16, 378x504, 8 scale frames, window 64, 300 frames: the '
           "reference's own profiler and `lingbot-ros-bench` one after the other in one "
           "command on one GPU (`benchmarks/side_by_side.py`). The reference's figure is its "
           'mean around mid-run, ours the median once the window is full; "overall" is all '
           'frames, the scale call included, on both sides.'), '',
           _row(['setting', 'config', 'GPU', 'commit', 'date', 'reference ms, mid-run '
                 '(overall)', 'ours ms, steady (overall)', 'reference / ours']),
           _row(['---'] * 8)]
    for r in runs:
        out.append(_row([SETTING_WORDS[r.setting], f'`{r.config}`', r.gpu, r.commit[:7],
                         r.date, f'{_f(r.reference_ms_mid)} ({_f(r.reference_ms_overall)})',
                         f'{_f(r.ours_ms_steady)} ({_f(r.ours_ms_overall)})',
                         f'**{_f(r.reference_ms_mid / r.ours_ms_steady, 2)}**']))
    return out


def live_section(runs: List[rf.LiveRun]) -> List[str]:
    """Table the node over DDS at a camera's rate, counted by a subscriber beside it."""
    out = ['## Live, over DDS', '', _text(
           '`lingbot_node` in its own process, release structure, bf16, depth, points and the '
           'map on and read by a second process; 640x480 rgb8 images played at the camera '
           'rate; an independent subscriber beside the node counts what was on the wire and '
           'times each pose (`benchmarks/live_node.py`). Counts are over the whole run, '
           'warm-up included; latencies from the image stamp to the pose at that subscriber, '
           "over the blocks after the warm-up (the median block's p50, the worst block's p99)."),
           '', _row(['run', 'config', 'GPU', 'commit', 'date', 'camera', 'received (counter / '
                     'node)', 'processed', 'image to pose p50 / p99 ms', 'step p50 ms']),
           _row(['---'] * 10)]
    for r in runs:
        for i, c in enumerate(r.per_camera):
            camera = f'{i + 1} of {r.cameras} at {r.rate_hz:g} Hz'
            share = 100.0 * c.processed / c.counter_received if c.counter_received else 0.0
            out.append(_row([r.name, f'`{r.config}`', r.gpu, r.commit[:7], r.date, camera,
                             f'{c.counter_received} / {c.node_received}',
                             f'{c.processed} ({share:.1f} %)',
                             f'{_f(c.e2e_ms_p50)} / {_f(c.e2e_ms_p99)}', _f(c.step_ms_p50)]))
    return out


def drift_section(files: List[Path]) -> List[str]:
    """Table the bf16 drift of ours and of the reference, against the reference in float32."""
    out = ['## Accuracy: bf16 against float32', '', _text(
           'The courthouse images ping-ponged to 140 frames, release structure, 8 scale frames, '
           'window 64 (68 evictions), seeded random weights loaded strictly by both sides; '
           'every run in a process of its own, against the reference in float32 '
           '(`benchmarks/bf16_drift.py`). Ours must drift no more than the reference in bf16.')]
    for path in files:
        d = json.loads(path.read_text())
        s = d['settings']
        about = (f"`{path.name}`: {d['device']}, commit {d['versions']['ours_commit'][:7]}, "
                 f"{d['date'][:10]}, weight seed {s['seed']}, {s['frames']} frames, "
                 f"{d['evictions']} evictions.")
        out += ['', _text(about), '',
                _row(['run', 'rotation mean / max, deg', 'depth median / p90, %']),
                _row(['---'] * 3)]
        for c in d['comparisons']:
            if c['against'] != d['baseline']:
                continue
            m = c['summary']
            out.append(_row([f"`{c['run']}`",
                             f"{_g(m['rotation_mean_deg'])} / {_g(m['rotation_max_deg'])}",
                             f"{_g(m['depth_median_pct'])} / {_g(m['depth_p90_pct'])}"]))
    return out


def render(results: Path) -> str:
    """Return the page the results folder makes."""
    parts = [HEAD.rstrip('\n'), '',
             *side_by_side_section(rf.load(results / 'side_by_side.json', rf.SideBySideRun)), '',
             *live_section(rf.load(results / 'live.json', rf.LiveRun)), '',
             *drift_section(sorted(results.glob('bf16_drift*.json')))]
    return '\n'.join(parts) + '\n'


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Write the page, or with --check say whether it is current."""
    p = argparse.ArgumentParser(description=__doc__.strip().split('\n')[0])
    p.add_argument('--results', type=Path, default=rf.RESULTS)
    p.add_argument('--out', type=Path, default=PAGE)
    p.add_argument('--check', action='store_true', help='write nothing; 1 if the page is stale')
    args = p.parse_args(argv)
    page = render(args.results)
    if args.check:
        current = args.out.read_text() if args.out.exists() else ''
        if current != page:
            print(f'{args.out} is not what {args.results} makes: run '
                  'python benchmarks/performance_table.py', file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_name(args.out.name + '.tmp')
    tmp.write_text(page)
    tmp.replace(args.out)
    print(f'{args.out}: written from {args.results}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
