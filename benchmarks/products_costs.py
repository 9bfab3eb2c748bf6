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
What a frame's depth image and points cost the session that makes them.

Why: on the H200 (2026-12-05, live 15 Hz) the step's part after the model (``finish``)
grew from 0.6 to 3.3-3.6 ms once depth and points were made on the model's device (58
small kernels and six waits for the device a frame), more than the output thread saved.
This times each piece the session runs for them, alone, on a frame of the release grid of
a 640x480 camera (392x518, points decimated by 4, confidence above the frame's median);
with ``--session PRESET`` it also steps a session of that structure on 640x480 frames with
the products and without, and prints its stages (prepare, model, the rest of the step)
and the host operators of a few steady frames. Prints numbers only. Example: ``python
benchmarks/products_costs.py --device cuda --session release --dtype bfloat16``.
(``results/products_costs_h200.txt`` and ``products_session_h200.txt`` are this script at
7a01f95, when it timed the device's version of the pieces.)
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Optional

import numpy as np
import torch
from torch.profiler import ProfilerActivity

H, W = 392, 518          # the release grid of a 640x480 camera
INPUT_HW = (480, 640)


def _median_ms(job: Callable[[], object], repeat: int, sync: Callable[[], None]) -> float:
    job()
    sync()
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        job()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--repeat', type=int, default=200)
    p.add_argument('--session', default='', help='a preset: also time its session')
    p.add_argument('--dtype', default='float32', help="the session's dtype")
    p.add_argument('--frames', type=int, default=100, help="the session's frames")
    p.add_argument('--backend', default='auto', help="the session's attention backend")
    args = p.parse_args(argv)
    from lingbot_ros.streaming import products
    from lingbot_ros.streaming.config import FrameProducts, PointsSpec
    from lingbot_ros.streaming.host import to_host
    from lingbot_ros.streaming.result import FrameResult, FrameType

    dev = torch.device(args.device)
    sync = (lambda: torch.cuda.synchronize(dev)) if dev.type == 'cuda' else (lambda: None)
    gen = torch.Generator().manual_seed(0)
    depth = 0.5 + 4.5 * torch.rand(H, W, generator=gen)
    conf = 1.0 + 2.0 * torch.rand(H, W, generator=gen)
    colors = torch.randint(0, 256, (H, W, 3), generator=gen, dtype=torch.uint8)
    k_in = np.array([[500.0, 0.0, 320.0], [0.0, 500.0, 240.0], [0.0, 0.0, 1.0]])
    k_model = k_in.copy()
    k_model[:2] *= W / INPUT_HW[1]
    frame = FrameResult(stamp_ns=1, index=3, frame_type=FrameType.KEYFRAME,
                        pose_c2w=np.eye(4), pose_enc=np.zeros(9, np.float32), intrinsics=k_in,
                        intrinsics_model=k_model, input_hw=INPUT_HW, model_hw=(H, W),
                        depth=depth.numpy(), confidence=conf.numpy(), colors=colors.numpy())
    spec = PointsSpec(4, 0.0, 50.0)
    model_outputs = {'depth': depth.to(dev)[None, ..., None], 'depth_conf': conf.to(dev)[None],
                     'colors': colors.to(dev)[None], 'pose_enc': torch.zeros(1, 9, device=dev)}
    rows = [
        ('model outputs to the host (depth, conf, colours)', lambda: to_host(model_outputs)),
        ('depth_on_input (OpenCV, host)', lambda: products.depth_on_input(frame)),
        ('point_rows (host)', lambda: products.point_rows(frame, spec)),
        ('point_rows without the percentile', lambda: products.point_rows(
            frame, PointsSpec(4, 0.0, 0.0))),
        ('make (both)', lambda: products.make(FrameProducts(True, spec), frame)),
    ]
    print(f"products from a frame's host copies; its outputs from {dev} "
          f'({torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}), grid '
          f'{H}x{W}, input {INPUT_HW[0]}x{INPUT_HW[1]}, median of {args.repeat}, wall ms',
          flush=True)
    for name, job in rows:
        print(f'{name:>50}: {_median_ms(job, args.repeat, sync):7.3f} ms', flush=True)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == 'cuda' else [])
    if args.session:
        _session(args, acts)
    return 0


def _session(args: argparse.Namespace, acts: list) -> None:
    """Step a session with and without the products; print its stages' p50 / p99."""
    from torch.profiler import profile

    from lingbot_ros.streaming.config import (EngineConfig, FrameProducts, PointsSpec,
                                              StreamConfig)
    from lingbot_ros.streaming.engine import Engine
    engine = Engine.load(EngineConfig(preset=args.session, device=args.device,
                                      dtype=args.dtype, attention_backend=args.backend))
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (*INPUT_HW, 3), dtype=np.uint8) for _ in range(8)]
    for label, made in (('without products', FrameProducts()),
                        ('depth and points made', FrameProducts(True, PointsSpec(4, 0.0, 50.0)))):
        session = engine.new_session(label, StreamConfig(products=made))
        rows = []
        for i in range(args.frames):
            for r in session.step(frames[i % len(frames)], 1 + i):
                t = r.timings
                if t.streamed:
                    rows.append((t.prepare or 0.0, t.model, t.step - t.model))
        steady = np.array(rows[len(rows) // 2:])
        p50, p99 = np.median(steady, axis=0), np.percentile(steady, 99, axis=0)
        print(f'session {args.session} {args.dtype}, {label}, last {len(steady)} of '
              f'{len(rows)} streamed frames, ms p50 / p99: prepare {p50[0]:.2f} / {p99[0]:.2f}'
              f', model {p50[1]:.2f} / {p99[1]:.2f}, rest of the step {p50[2]:.2f} / '
              f'{p99[2]:.2f}', flush=True)
        with profile(activities=acts) as prof:
            for i in range(5):
                session.step(frames[i % len(frames)], 10_000 + i)
        print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=20),
              flush=True)


if __name__ == '__main__':
    raise SystemExit(main())
