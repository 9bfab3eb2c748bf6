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
``lingbot-ros-prepare``: build the attention kernels ahead, for a robot image.

FlashInfer compiles its attention kernels the first time a machine runs them (a minute or
two) and keeps them in its cache (``~/.cache/flashinfer``, or under
``FLASHINFER_WORKSPACE_BASE``). Run this once where the node will run, with the node's own
parameter file (model structure, dtype, KV cache dtype, attention backend), e.g. as a step of
the robot's container build; the node's later starts then load them in seconds. Loads no
weights. Exit status 0 when the kernels the node would use are ready (or it would use SDPA,
which needs none), 1 when the asked-for backend failed.

With ``torch_compile: true`` (the default) it also compiles the model's blocks and depth
decoder for the camera's size (``--camera-size``, default 640x480; random weights: compiled
kernels do not depend on weight values), which fills PyTorch's on-disk kernel cache
(``TORCHINDUCTOR_CACHE_DIR``, or ``~/.cache/lingbot_ros/torchinductor`` when it is not set),
with dynamo's traces of the compiled pieces beside it where this torch keeps them, so the
node's own warm-up takes seconds. Last, it writes the bytecode of the Python modules
the node loads where an install left none (:mod:`lingbot_ros.tools.bytecode`).
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional

from lingbot_ros.tools import param_values


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog='lingbot-ros-prepare', description=__doc__.split('\n\n')[1])
    param_values.add_arguments(p)
    p.add_argument('--camera-size', default=None, metavar='WIDTHxHEIGHT',
                   help="the camera's image size the compiled code is built for (default: "
                        '640x480, the size the node warms up with)')
    return p.parse_args(argv)


def _camera_hw(text: Optional[str]) -> tuple:
    """Return (height, width) from 'WIDTHxHEIGHT'; the nominal camera when not given."""
    from lingbot_ros.streaming.config import NOMINAL_INPUT_HW
    if not text:
        return NOMINAL_INPUT_HW
    width, sep, height = text.lower().partition('x')
    if not sep or not width.isdigit() or not height.isdigit() or not int(width) or \
            not int(height):
        raise SystemExit(f'lingbot-ros-prepare: --camera-size {text!r}: expected WIDTHxHEIGHT')
    return int(height), int(width)


def main(argv: Optional[list] = None) -> int:
    """Build the kernels; print what was built, where, and how long it took."""
    args = parse_args(argv)
    import torch
    from lingbot_ros.model.config import ConfigError
    from lingbot_ros.ros.params import stream_config
    from lingbot_ros.streaming.config import EngineConfig
    from lingbot_ros.streaming.engine import Engine, EngineError, prepare_kernels
    from lingbot_ros.streaming.parameters import parse
    hw = _camera_hw(args.camera_size)
    try:
        params = parse(param_values.values(args, 'lingbot-ros-prepare'))
        cfg = EngineConfig.from_parameters(params, torch.cuda.is_available())
        stream_cfg = stream_config(params)  # as the node's warm-up has it
        backend, reason, seconds = prepare_kernels(cfg, progress=print)
    except (ConfigError, EngineError, OSError) as exc:
        print(f'lingbot-ros-prepare: {exc}', file=sys.stderr)
        return 1
    print(f'attention backend {backend.value} ({reason}); ready in {seconds:.1f} s')
    if cfg.torch_compile:
        try:
            engine = Engine.load(cfg.replace(checkpoint=None))
        except EngineError as exc:
            print(f'lingbot-ros-prepare: torch_compile: {exc}', file=sys.stderr)
            return 1
        if not engine.compiled_blocks:
            print(f'torch_compile: {engine.compile_status}; nothing to compile')
        else:
            times = engine.warm_up(stream_cfg, hw)
            print(f'torch_compile: the blocks compiled for a {hw[1]}x{hw[0]} camera in '
                  f'{times.total_s:.1f} s ({times.text()})')
    _write_bytecode()
    return 0


def _write_bytecode() -> None:
    """Write the bytecode of every module the node loads (those loaded here and its own)."""
    from lingbot_ros.tools import bytecode
    why = bytecode.node_modules()
    if why:
        print(f"Python bytecode: the node's own modules did not load here ({why}); "
              'writing the rest')
    print(bytecode.write_missing(bytecode.loaded_sources()).text())


if __name__ == '__main__':
    sys.exit(main())
