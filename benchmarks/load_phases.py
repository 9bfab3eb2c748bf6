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
Where a restart's "checkpoint and weights" go: each step of loading a checkpoint, timed.

``python benchmarks/load_phases.py --checkpoint FILE [--device cuda] [--dtype bfloat16]``
prints the file's SHA-256 time alone, then the steps of ``load_model`` one by one (read,
build on the meta device, check, place on the device, assign, finish) and the whole of
``Engine.load`` as the node calls it. Run it twice: the second run reads from the page
cache, as a restart does.
"""

from __future__ import annotations

import argparse
import time

from lingbot_ros.model import checkpoint as ck
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.hub import sha256_file
from lingbot_ros.streaming.config import EngineConfig
from lingbot_ros.streaming.engine import Engine
import torch

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


def _timed(device: torch.device, name: str, fn):
    if device.type == 'cuda':
        torch.cuda.synchronize()
    t0 = time.monotonic()
    out = fn()
    if device.type == 'cuda':
        torch.cuda.synchronize()
    print(f'{name:>28}: {time.monotonic() - t0:6.2f} s', flush=True)
    return out


def _steps(args: argparse.Namespace, device: torch.device, autocast) -> None:
    """Time the steps of ``load_model``; what they made goes when this returns."""
    cfg = ModelConfig.preset(args.preset)
    state = _timed(device, 'read_state_dict', lambda: ck.read_state_dict(args.checkpoint))
    model = _timed(device, 'build on meta', lambda: ck._build_meta(cfg))
    _timed(device, 'check keys and shapes',
           lambda: ck.check_state_dict(state, model, args.checkpoint))
    matmul = ck.matmul_parameters(model)
    placed = _timed(device, 'place (move, cast)', lambda: {
        k: ck._placed(v, ck.storage_dtype(k, torch.float32, autocast, None, k in matmul), device)
        for k, v in state.items()})
    _timed(device, 'load_state_dict (assign)',
           lambda: model.load_state_dict(placed, strict=True, assign=True))
    _timed(device, 'finish', lambda: ck._finish(model, device, autocast, None))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--checkpoint', required=True)
    p.add_argument('--preset', default='release')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--dtype', default='bfloat16', choices=sorted(DTYPES))
    args = p.parse_args()
    device, autocast = torch.device(args.device), DTYPES[args.dtype]
    autocast = None if autocast == torch.float32 else autocast
    _timed(device, 'sha256 (alone)', lambda: sha256_file(args.checkpoint))
    _steps(args, device, autocast)
    engine = _timed(device, 'Engine.load (as the node)', lambda: Engine.load(EngineConfig(
        checkpoint=args.checkpoint, preset=args.preset, device=args.device, dtype=args.dtype)))
    print(f'engine phases: {engine.load_phases}')


if __name__ == '__main__':
    main()
