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
The blocks' pieces around attention, and the depth decoder, through ``torch.compile``.

A frame of the release model is ~3,150 small kernels (float32 layer norms with their
casts, residual adds, layer scales, GELU, RoPE), and at that count the GPU spends as
much time between kernels as in many of them. Compiling what a block computes before
and after attention (never the attention itself, which talks to the cache) fuses them
into a few hundred, and the frame is then bound by the device (docs/performance.md).

One compiled pair serves every block: the block comes in as an argument, so its
weights are inputs and blocks of one shape share one compiled graph. Each distinct
shape and dtype (the DINO trunk, frame and global blocks, the camera head, for a
streaming frame; the engine runs a scale call uncompiled) is compiled once, on first
use, as is the depth decoder (:func:`compile_depth_decoder`) for each chunk shape;
``RECOMPILES`` is how many such variants dynamo may keep per piece. Compiling takes tens
of seconds the first time on a machine; afterwards the kernels come from PyTorch's on-disk
cache and, where this torch can keep them (:func:`keep_traces`), so do dynamo's traces of
the pieces, so a restart neither compiles nor traces. That cache lives under the system's
temporary folder unless ``TORCHINDUCTOR_CACHE_DIR`` says otherwise, and many robots clear
it at every boot: without the variable set, it goes to :func:`kernel_cache_dir` (beside
FlashInfer's, under ``~/.cache``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import torch
from torch import nn

from .depth_head import decode_chunk, DepthHead
from .layers import Block, block_post_attention, block_pre_attention

RECOMPILES = 64   # shape/dtype variants kept per piece (dynamo's default, 8, is too few)


def kernel_cache_dir() -> Path:
    """Return where compiled kernels are kept: ``TORCHINDUCTOR_CACHE_DIR`` or ours."""
    given = os.environ.get('TORCHINDUCTOR_CACHE_DIR')
    if given:
        return Path(given)
    base = Path(os.environ.get('XDG_CACHE_HOME') or Path.home() / '.cache')
    return base / 'lingbot_ros' / 'torchinductor'


def use_kernel_cache_dir() -> None:
    """
    Point PyTorch's compile caches (kernels, and dynamo's traces) at :func:`kernel_cache_dir`.

    Before anything asks PyTorch for its cache folder: the first ask sets the variable to
    PyTorch's own default under the temporary folder, which then stays for the process.
    """
    os.environ['TORCHINDUCTOR_CACHE_DIR'] = str(kernel_cache_dir())


def keep_traces() -> bool:
    """
    Keep dynamo's traces of the compiled pieces on disk, beside their kernels.

    Without them every start re-traces each piece's Python (seconds, on the first frame)
    before the on-disk kernel cache can even be looked up. With dynamo's caching precompile
    a start loads the traces and their guards instead, and traces afresh when the stored
    ones do not fit the sources. Returns whether this torch has it (it is then on).
    """
    use_kernel_cache_dir()  # before dynamo's trace store is made, so it lies beside the kernels
    config = torch._dynamo.config
    if not hasattr(config, 'caching_precompile'):
        return False
    try:
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError:
        return False
    if not hasattr(PrecompileContext, 'save_to_dynamo_cache'):
        return False
    config.caching_precompile = True
    return True


def save_traces() -> int:
    """Write the traces made so far to dynamo's store (:func:`keep_traces`); return how many."""
    if not getattr(torch._dynamo.config, 'caching_precompile', False):
        return 0
    from torch._dynamo.precompile_context import PrecompileContext
    return len(PrecompileContext.save_to_dynamo_cache().get('dynamo', []))


def _compile(fn, backend: Optional[str]):
    """Compile ``fn`` as one graph per shape, its kernels kept in :func:`kernel_cache_dir`."""
    use_kernel_cache_dir()  # read at compile time
    config = torch._dynamo.config
    name = 'recompile_limit' if hasattr(config, 'recompile_limit') else 'cache_size_limit'
    setattr(config, name, max(getattr(config, name), RECOMPILES))
    kwargs = {'dynamic': False, 'fullgraph': True}
    if backend is not None:
        kwargs['backend'] = backend
    return torch.compile(fn, **kwargs)


def compile_blocks(model: nn.Module, backend: Optional[str] = None) -> int:
    """
    Route every :class:`Block` of ``model`` through one compiled pre/post pair.

    ``backend`` is ``torch.compile``'s (None: inductor; tests on the CPU pass 'eager'
    to check that each piece traces as one graph). Returns the number of blocks.
    """
    pieces = (_compile(block_pre_attention, backend), _compile(block_post_attention, backend))
    blocks = [m for m in model.modules() if isinstance(m, Block)]
    for block in blocks:
        block.pieces = pieces
    return len(blocks)


def compile_depth_decoder(model: nn.Module, backend: Optional[str] = None) -> int:
    """
    Route the depth head's decoding through one compiled :func:`decode_chunk`.

    In half precision the eager decoder's resizes and bias adds run far below the memory
    bandwidth (channels-last bilinear resizes, bias adds that cannot vectorize, a float32
    position map added to a half one of another layout); compiled, they fuse into the
    kernels around them.
    Returns the number of depth heads (0 or 1).
    """
    heads = [m for m in model.modules() if isinstance(m, DepthHead)]
    decoder = _compile(decode_chunk, backend) if heads else None
    for head in heads:
        head.decoder = decoder
    return len(heads)
