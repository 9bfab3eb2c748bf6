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
Write a checkpoint file of seeded random weights (float32, as released) for start-up timing.

No weights can be downloaded where the benchmarks run, and the restart time a robot sees
includes reading a checkpoint file: this gives the node a file of the release structure's
size and keys to read. Example: ``python benchmarks/random_checkpoint.py --preset release
--out /tmp/lingbot_random.safetensors``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import time

from lingbot_ros.model.checkpoint import load_model
from lingbot_ros.model.config import ModelConfig
from safetensors.torch import save_file
import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--preset', default='release')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--out', type=Path, required=True)
    args = p.parse_args()
    t0 = time.monotonic()
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    model = load_model(ModelConfig.preset(args.preset), None, device=device, seed=args.seed)
    state = {k: v.detach().to('cpu').contiguous() for k, v in model.state_dict().items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(args.out))
    size = args.out.stat().st_size
    print(f'{args.out}: {len(state)} tensors, {size / 2**30:.2f} GiB, preset {args.preset}, '
          f'seed {args.seed}, {time.monotonic() - t0:.1f} s')


if __name__ == '__main__':
    main()
