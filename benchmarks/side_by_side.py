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
# the model package without its viewer, the licence and pyproject travel, a few hundred kB (no
# images, videos, paper or weights: the profiler builds the model with random weights and
# feeds it random images).
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
# full 300 frames, the reference's torch.compile and FlashInfer's first kernel build included,
# fit in the default --budget-s, so --frames needs no shortening. Without a GPU, --dry-run
# prints the commands it would run.
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
from pathlib import Path
import shlex
import sys
import time
from typing import List, Optional

from lingbot_ros.streaming.config import HeadDtype

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside this script
from commits import ours_commit, reference_commit, REPO  # noqa: E402,I100
import results_file  # noqa: E402
from sidebyside.processes import child_env, probe_versions  # noqa: E402
from sidebyside.reference import (check_reference, NotAReferenceCheckout,  # noqa: E402
                                  reference_command)
from sidebyside.report import combine, record, render_text, write_result  # noqa: E402
from sidebyside.runs import ours_command, plan_timeouts, run_ours, run_reference  # noqa: E402
from sidebyside.settings import SCALE_FRAMES, SETTINGS, STANDARD_FRAMES  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    p = argparse.ArgumentParser(prog='side_by_side.py', description=__doc__.split('\n')[1])
    p.add_argument('--reference', type=Path, required=True,
                   help='checkout of Robbyant/lingbot-map (e.g. .reference)')
    p.add_argument('--out', type=Path, required=True, help='folder for the results')
    p.add_argument('--setting', choices=sorted(SETTINGS) + ['both'], default='both')
    p.add_argument('--frames', type=int, default=STANDARD_FRAMES,
                   help=f'frames per run, both sides (standard: {STANDARD_FRAMES})')
    p.add_argument('--fa3', action='store_true',
                   help="pass --fa3 to the reference (FlashInfer's SM90 kernel)")
    p.add_argument('--reference-backend', choices=['flashinfer', 'sdpa'], default='flashinfer')
    p.add_argument('--ours-backend', choices=['auto', 'sdpa', 'flashinfer'], default='auto')
    p.add_argument('--ours-compile', action='store_true',
                   help="ours with torch_compile on (the reference's profiler compiles too)")
    p.add_argument('--ours-head-dtype', choices=[h.value for h in HeadDtype], default=None,
                   help="ours' head_dtype: what the camera and depth heads compute in "
                   "(default: the bench's, which is the parameter table's)")
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
