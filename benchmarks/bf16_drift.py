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
# On the GPU machine: prepare .reference/ and .whl.tar.xz as the top of side_by_side.py says,
# copy the courthouse frames to .data/courthouse (git-ignored), then one device call, carry
# [".whl.tar.xz", ".reference", ".data"], timeout 600:
#
#   rm -rf .site .whl; tar -xJf .whl.tar.xz && python3 -m pip install -q --no-index \
#   --no-deps --no-compile --target .site .whl/*.whl && export PYTHONPATH=$PWD/.site:$PWD \
#   MAX_JOBS=16 PYTHONUNBUFFERED=1 || exit; python3 benchmarks/bf16_drift.py --reference \
#   .reference --images .data/courthouse --out $OUT
#
# The weights file (4.6 GB) goes to a temporary folder, never under $OUT. Should one call not
# be enough, add --work .drift_work and repeat the call with --resume on the still-warm machine:
# the runs that finished are reused. A CPU smoke run (the released structure, tiny settings;
# the reference also needs einops and scipy importable):
#
#   .venv/bin/python benchmarks/bf16_drift.py --reference .reference --frames 12 \
#   --scale-frames 3 --sliding-window 4 --image-size 84 --device cpu --out /tmp/drift
# ---------------------------------------------------------------------------------------------

"""
bf16 drift of our model and of the reference, each against the reference in float32.

Why: "ours in bf16 drifts no more than the reference in bf16" needs both sides run on the
same weights and the same real images, and compared against one yardstick. This script
draws one set of seeded random weights whose outputs vary (the reference's own init leaves
the heads near constant) under the released checkpoint's key names, preprocesses the
courthouse frames once with our preprocessing, and plays them ping-pong (0..47, 46..1, 0..)
up to ``--frames``. Each run goes in a child process of this script (the reference's
imports never meet ours):

- ``ours-shipped``: the engine configuration the node builds from its parameter table's
  defaults, as ``lingbot-ros-bench`` builds it (on CUDA bf16 with the table's heads, compile
  and cache settings; on a CPU float32), so that its drift follows the defaults;
- ``ours-fp32``, ``ours-bf16`` (autocast as our Engine runs it; our default back end: FlashInfer
  on CUDA, SDPA elsewhere), ``ours-bf16-fp8cache`` (``ours-shipped`` with ``kv_cache_dtype:
  float8_e4m3``, the 8 GB profile's cache; CUDA only),
  ``ours-bf16-heads`` (``ours-bf16`` with the camera and depth heads under autocast too,
  ``head_dtype: compute``), ``ours-bf16-heads16`` (the heads under float16 autocast,
  ``head_dtype: float16``), ``ours-bf16-heads16-compiled`` (that with ``torch_compile:
  true``, as ``side_by_side.py --ours-compile --ours-head-dtype float16`` times it),
  ``ours-bf16-weights`` (``weights_dtype: compute``: the heads'
  linear and convolution weights in bf16, computing in float32, as the 8 GB profile),
  through our public streaming API (Engine, Session);
- ``ref-fp32`` (its SDPA path, ``use_sdpa=True``) and ``ref-bf16`` (on CUDA its FlashInfer path
  under bf16 autocast with the aggregator cast to bf16, as its demo does; on a CPU only a smoke
  check: SDPA under CPU autocast), from the checkout named by ``--reference``, loaded strictly.

Float32 runs switch TF32 off (a true float32 yardstick); bf16 runs keep PyTorch's defaults, as
deployed. Every run is compared with ``ref-fp32`` (per frame: camera rotation angle,
translation, median and p90 relative depth error, field of view) and every bf16 run also with
its own side's float32 run. ``--out DIR`` receives ``bf16_drift.json`` (settings, versions,
device, date, wall times, per-frame errors), ``bf16_drift.txt`` (the tables) and
``bf16_drift.log`` (the children's output). Commands: see the comment above. The parts are
in ``benchmarks/drift/``: the run kinds, the weights, the images, each side's run, the child
processes, the comparison and the report.
"""

import argparse
import dataclasses
import datetime
import json
from pathlib import Path
import shutil
import sys
import tempfile
from typing import Optional, Sequence

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this script
from drift.children import child_main, run_all  # noqa: E402,I100
from drift.comparison import compare, pairs  # noqa: E402
from drift.device import device_name  # noqa: E402
from drift.images import find_images  # noqa: E402
from drift.layer_trace import trace_rows, traced_modules  # noqa: E402
from drift.report import notes, report_text, versions  # noqa: E402
from drift.runs import NAME, parse_runs, reduced_precision, RunKind, Settings  # noqa: E402
from drift.workdir import prepare  # noqa: E402

CHILD_TIMEOUT_S = 1500.0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0].strip())
    p.add_argument('--reference', type=Path, default=None,
                   help='checkout of Robbyant/lingbot-map (see side_by_side.py); without it '
                   'the reference runs are skipped')
    p.add_argument('--images', default=None,
                   help='folder of the courthouse frames (default ../shared/data/courthouse, '
                   'else .data/courthouse)')
    p.add_argument('--frames', type=int, default=140)
    p.add_argument('--scale-frames', type=int, default=8)
    p.add_argument('--sliding-window', type=int, default=64)
    p.add_argument('--camera-iterations', type=int, default=4)
    p.add_argument('--image-size', type=int, default=518,
                   help='model-grid width, as our tools name it (courthouse 518x294 -> '
                   '294x518 at 518, 280x504 at 504)')
    p.add_argument('--device', default='auto', help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    p.add_argument('--backend', default='auto', choices=('auto', 'sdpa', 'flashinfer'),
                   help='our attention back end for the bf16 runs (float32 always gets SDPA; '
                   "ours-shipped the parameter table's)")
    p.add_argument('--runs', default=','.join(r.value for r in RunKind),
                   help=f'comma-separated subset of {[r.value for r in RunKind]}')
    p.add_argument('--seed', type=int, default=0, help='seed of the random weights')
    p.add_argument('--ours-commit', default=None,
                   help="our commit to record (the GPU machine's .git can be stale)")
    p.add_argument('--trace', action='store_true',
                   help="also keep a sample of every block's output in the scale call and "
                   'report, block by block, how far each run is from the baseline')
    p.add_argument('--preset', default='release', help='our model preset (release, tiny)')
    p.add_argument('--out', type=Path, help='folder for bf16_drift.{json,txt,log}')
    p.add_argument('--work', type=Path, default=None,
                   help='folder for the weights file, images and arrays, kept afterwards '
                   '(default: a temporary folder, removed); never inside --out')
    p.add_argument('--resume', action='store_true',
                   help='with --work: reuse its weights and images if the settings are the '
                   'same, and the runs that finished there (split a run over calls)')
    p.add_argument('--timeout', type=float, default=CHILD_TIMEOUT_S,
                   help='seconds each run may take')
    p.add_argument('--child', default=None, help=argparse.SUPPRESS)
    p.add_argument('--job', type=Path, default=None, help=argparse.SUPPRESS)
    return p


def _resolve_device(name: str) -> str:
    if name == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    return name


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Build weights and images once, run every requested run in a child, compare, report."""
    args = _parser().parse_args(argv)
    if args.child:
        return child_main(RunKind(args.child), args.job)
    if args.out is None:
        _parser().error('--out DIR is required')
    if args.resume and args.work is None:
        _parser().error('--resume needs --work DIR (the folder of the earlier call)')
    runs = parse_runs(args.runs)
    settings = Settings(preset=args.preset, frames=args.frames, scale_frames=args.scale_frames,
                        sliding_window=args.sliding_window,
                        camera_iterations=args.camera_iterations, image_size=args.image_size,
                        seed=args.seed, device=_resolve_device(args.device),
                        backend=args.backend, trace=args.trace)
    reference = args.reference.resolve() if args.reference is not None else None
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / f'{NAME}.log'
    if not args.resume or not log.is_file():
        log.write_bytes(b'')
    if args.work is not None:
        work = args.work.resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix=f'{NAME}_'))
    try:
        result = _measure(runs, settings, reference, find_images(args.images), work, log,
                          args.timeout, args.resume, args.ours_commit)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    (args.out / f'{NAME}.json').write_text(json.dumps(result, indent=1))
    text = report_text(result)
    (args.out / f'{NAME}.txt').write_text(text)
    print('\n' + text)
    print(f'wrote {args.out / NAME}.json, .txt, .log')
    return 0 if all(r.get('ok') or r.get('skipped') for r in result['runs'].values()) else 1


def _measure(runs: Sequence[RunKind], settings: Settings, reference: Optional[Path],
             folder: Path, work: Path, log: Path, timeout: float, resume: bool = False,
             ours_commit: Optional[str] = None) -> dict:
    image_info, weights_info, prep_s = prepare(settings, reference, folder, work, resume)
    print(f'images {image_info["model_hw"]} x {settings.frames}, weights '
          f'{weights_info["params"]:,} params ({weights_info["manifest"]}) in {prep_s:.1f} s',
          flush=True)
    records, arrays = run_all(runs, settings, reference, work, log, timeout, resume)
    reduced = {r for r in arrays if reduced_precision(r, settings)}
    baseline, compared = pairs(list(arrays), reduced)
    comparisons = []
    for run, base in compared:
        c = compare(arrays[run], arrays[base], settings.first_evicting_frame)
        comparisons.append({'run': run.value, 'against': base.value, **c})
    trace = trace_rows(arrays, traced_modules(settings.preset), baseline) \
        if settings.trace else []
    device = torch.device(settings.device)
    return {'benchmark': NAME, 'trace': trace,
            'date': datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds'),
            'device': device_name(device) if device.type != 'cuda' else
            next((r['facts']['device'] for r in records.values() if r.get('facts')), 'cuda'),
            'settings': dataclasses.asdict(settings), 'evictions': settings.evictions,
            'images': image_info, 'weights': weights_info,
            'versions': versions(reference, ours_commit), 'prepare_s': round(prep_s, 1),
            'baseline': baseline.value, 'runs': records, 'comparisons': comparisons,
            'notes': notes(runs, settings, baseline)}


if __name__ == '__main__':
    sys.exit(main())
