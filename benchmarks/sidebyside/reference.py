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
The reference's side: its checkout, its profiler's command line and its printed summary.

The profiler (``gct_profile.py`` of Robbyant/lingbot-map) runs unmodified, as its users run
it; what it prints is read back here, so a change of its layout shows as a missing figure.
"""

from pathlib import Path
import re
from typing import List

from sidebyside.settings import HEIGHT, SETTINGS, SLIDING_WINDOW, WIDTH

# What identifies the reference checkout, and the profiler flags this script passes.
REFERENCE_FILES = ('gct_profile.py', 'lingbot_map/models/gct_stream.py',
                   'lingbot_map/aggregator/stream.py', 'lingbot_map/layers/flashinfer_cache.py')
PROFILER_FLAGS = ('--backend', '--dtype', '--img_h', '--img_w', '--num_frames',
                  '--sliding_window', '--camera_num_iterations', '--keyframe_interval')
# Third-party modules the reference imports on the profiler's path.
REFERENCE_MODULES = ('torch', 'numpy', 'einops', 'tqdm', 'scipy', 'huggingface_hub',
                     'typing_extensions', 'flashinfer')


class NotAReferenceCheckout(ValueError):
    """``--reference`` does not point at a usable checkout of Robbyant/lingbot-map."""


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


def reference_backend_label(backend: str, fa3: bool) -> str:
    """Name the reference's attention path (its --fa3 only affects FlashInfer)."""
    if backend != 'flashinfer':
        return backend
    return 'flashinfer fa3' if fa3 else 'flashinfer fa2'


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


def missing_modules(output: str) -> List[str]:
    """Return the modules a program's output says it could not import, in order."""
    return _MISSING.findall(output)
