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
Soak run: stream many live frames through one session and print memory as it goes.

Frames go through ``Session.step`` exactly as the node feeds them (uint8 RGB, live
preprocessing on the device). Every ``--every`` frames it prints the frame count, the
window index, ms/frame over the last block, device memory allocated / reserved, the
process RSS and the trajectory length: all of them must level off, whatever the length.
Prints numbers only; it asserts nothing.
"""

import argparse
import json
import os
import time

from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
import numpy as np
import torch


def rss_mb() -> float:
    """Resident set size of this process in MB (Linux)."""
    with open('/proc/self/statm') as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf('SC_PAGE_SIZE') / 2**20


def frames(height: int, width: int, seed: int = 0):
    """Yield an endless pan over a random texture, as uint8 RGB frames."""
    rng = np.random.default_rng(seed)
    tex = rng.integers(0, 256, (height + 64, 4 * width, 3), dtype=np.uint8)
    i = 0
    while True:
        x = (7 * i) % (3 * width)
        y = (3 * i) % 64
        yield np.ascontiguousarray(tex[y:y + height, x:x + width])
        i += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    p.add_argument('--preset', default='tiny')
    p.add_argument('--device', default='auto')
    p.add_argument('--dtype', default='float32')
    p.add_argument('--frames', type=int, default=2000)
    p.add_argument('--every', type=int, default=200)
    p.add_argument('--height', type=int, default=480)
    p.add_argument('--width', type=int, default=640)
    p.add_argument('--image-size', type=int, default=504)
    p.add_argument('--scale-frames', type=int, default=8)
    p.add_argument('--sliding-window', type=int, default=64)
    p.add_argument('--keyframe-interval', type=int, default=1)
    p.add_argument('--max-window-frames', type=int, default=0)
    p.add_argument('--trajectory-length', type=int, default=1000)
    p.add_argument('--out', default=None)
    args = p.parse_args()
    engine = Engine.load(EngineConfig(preset=args.preset, device=args.device, dtype=args.dtype))
    session = engine.new_session('soak', StreamConfig(
        scale_frames=args.scale_frames, sliding_window=args.sliding_window,
        keyframe_interval=args.keyframe_interval, image_size=args.image_size,
        max_window_frames=args.max_window_frames,
        trajectory_length=args.trajectory_length))
    cuda = engine.device.type == 'cuda'
    rows, t0, done = [], time.perf_counter(), 0
    print(f'{engine.description} on {engine.device} ({args.dtype}, {engine.backend.value}); '
          f'graphs: {engine.graph_status}')
    print('frames window kf  ms/frame  alloc_MB  reserved_MB  rss_MB  trajectory')
    for i, frame in enumerate(frames(args.height, args.width)):
        if i == args.frames:
            break
        done += len(session.step(frame, stamp_ns=(i + 1) * 33_000_000))
        if (i + 1) % args.every == 0:
            if cuda:
                torch.cuda.synchronize()
            now = time.perf_counter()
            stats = session.stats()
            row = {'frames': i + 1, 'results': done, 'window': stats.window_index,
                   'keyframes': stats.keyframes,
                   'ms_per_frame': (now - t0) * 1e3 / args.every,
                   'alloc_mb': torch.cuda.memory_allocated() / 2**20 if cuda else 0.0,
                   'reserved_mb': torch.cuda.memory_reserved() / 2**20 if cuda else 0.0,
                   'rss_mb': rss_mb(), 'trajectory': len(session.trajectory)}
            rows.append(row)
            print(f"{row['frames']:6d} {row['window']:6d} {row['keyframes']:5d} "
                  f"{row['ms_per_frame']:8.1f} {row['alloc_mb']:9.1f} {row['reserved_mb']:12.1f} "
                  f"{row['rss_mb']:7.1f} {row['trajectory']:10d}", flush=True)
            t0 = now
    if args.out:
        with open(args.out, 'w') as fh:
            json.dump({'args': vars(args), 'graphs': engine.graph_status, 'rows': rows}, fh,
                      indent=1)


if __name__ == '__main__':
    main()
