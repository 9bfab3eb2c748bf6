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
A live frame's resize on the host's side: eager against graphed, the device idle and busy.

The live node's ``prepare`` stage is the worker's time in ``preprocess_frame`` for one camera
frame (640x480 to the 392x518 grid). This times that call alone, on one thread, 100 times
each way (the first 10 left out): the eager resampler, and the CUDA graph replayed per frame
shape; each with the device idle, and with about 10 ms of device work queued ahead (a frame
in flight), where a call that waits for the device shows. Example (CUDA only):
``python benchmarks/resize_host_costs.py``.
"""

from __future__ import annotations

import time

from lingbot_ros.streaming import preprocess as pp
import numpy as np
import torch


def host_ms(frame: np.ndarray, graphed: bool, busy: bool, n: int = 100) -> np.ndarray:
    """Return the host's p50 and p99 milliseconds of ``preprocess_frame``."""
    device = torch.device('cuda')
    out = []
    for _ in range(n):
        if busy:
            torch.cuda._sleep(20_000_000)  # about 10 ms of device work queued ahead
        t = time.perf_counter()
        pp.preprocess_frame(frame, device, 518, graphed=graphed)
        out.append((time.perf_counter() - t) * 1e3)
        if busy:
            torch.cuda.synchronize()
    return np.percentile(out[10:], [50, 99])


def main() -> int:
    """Print each way's p50 / p99."""
    if not torch.cuda.is_available():
        raise SystemExit('resize_host_costs.py times the CUDA resize: it needs CUDA')
    frame = np.random.default_rng(0).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    print(torch.cuda.get_device_name())
    for graphed in (False, True):
        for busy in (False, True):
            p50, p99 = host_ms(frame, graphed, busy)
            print(f'graphed={graphed!s:5} device busy={busy!s:5}: host {p50:.3f} / {p99:.3f} '
                  'ms p50/p99')
    print('status:', pp.resize_status())
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
