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
What the model's own process costs a frame: its round trip less the session's own time.

Why: ``model_process`` takes the model's Python off the node's GIL, and pays for it with a
round trip per frame (the frame into the shared file, the request, the results pickled
back). This measures that round trip alone, the way the node's ``transport`` stage does:
the caller's wall time of ``step`` less the session's own prepare and step times, for each
streamed frame, beside the same session run in this process. The result sizes depend only
on ``--image-size`` and the frame size, so the tiny model on a CPU already pays what the
release model would at the same grid. Commands: ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Optional

from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.engine_process import EngineProcess
import numpy as np


def _run(session, frames: list) -> dict:
    """Step every frame; return the streamed frames' wall and own times (ms)."""
    wall, own, nbytes = [], [], 0
    for i, frame in enumerate(frames):
        t0 = time.perf_counter()
        results = session.step(frame, 1 + i)
        ms = (time.perf_counter() - t0) * 1e3
        if len(results) == 1 and results[0].timings.streamed:
            t = results[0].timings
            wall.append(ms)
            own.append(t.step + (t.prepare or 0.0))
            r = results[0]
            nbytes = sum(a.nbytes for a in (r.depth, r.confidence, r.colors) if a is not None)
    return {'wall': np.array(wall), 'own': np.array(own), 'result_bytes': nbytes}


def _line(name: str, run: dict) -> str:
    extra = run['wall'] - run['own']
    return (f'{name:<16} {len(extra):>6} {np.median(run["wall"]):>10.2f} '
            f'{np.median(run["own"]):>10.2f} {np.median(extra):>11.3f} '
            f'{np.percentile(extra, 99):>11.3f}')


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    p.add_argument('--preset', default='tiny')
    p.add_argument('--device', default='cpu')
    p.add_argument('--dtype', default='float32')
    p.add_argument('--image-size', type=int, default=518)
    p.add_argument('--size', default='640x480', help='frame WIDTHxHEIGHT')
    p.add_argument('--frames', type=int, default=60)
    p.add_argument('--scale-frames', type=int, default=2)
    p.add_argument('--sliding-window', type=int, default=8)
    p.add_argument('--depth', action=argparse.BooleanOptionalAction, default=True,
                   help='results with depth, confidence and colours (as with depth/points on)')
    args = p.parse_args(argv)
    w, h = (int(v) for v in args.size.split('x'))
    engine_cfg = EngineConfig(preset=args.preset, device=args.device, dtype=args.dtype)
    stream = StreamConfig(scale_frames=args.scale_frames, sliding_window=args.sliding_window,
                          image_size=args.image_size, with_depth=args.depth)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(args.frames)]
    remote = EngineProcess.start(engine_cfg)
    try:
        there = _run(remote.new_session('bench', stream), frames)
    finally:
        remote.close()
    here = _run(Engine.load(engine_cfg).new_session('bench', stream), frames)
    print(f'model process round trip, {time.strftime("%Y-%m-%d %H:%M:%S %Z")}, '
          f'{platform.node()} ({platform.processor() or platform.machine()})')
    print(f'{args.preset} on {args.device} ({args.dtype}), {w}x{h} frames (RGB, '
          f'{w * h * 3} bytes), image_size {args.image_size}, results {there["result_bytes"]} '
          'bytes a frame (depth, confidence, colours)')
    print(f'{"run":<16} {"frames":>6} {"wall p50":>10} {"own p50":>10} {"extra p50":>11} '
          f'{"extra p99":>11}   (ms; own = the session\'s prepare + step)')
    print(_line('model process', there))
    print(_line('this process', here))
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
