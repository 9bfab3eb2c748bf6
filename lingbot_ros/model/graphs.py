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
One streaming frame's forward captured as one CUDA graph and replayed.

Eager PyTorch spends most of a frame launching ~2,000 small kernels from Python. The
forward of a streaming frame has fixed shapes everywhere except inside attention over
the cache, whose key count changes as the window fills. A cache that can attend from
fixed addresses (:class:`StagedAttention`: the paged cache, whose ``stage`` puts a call's
positions and visible range into fixed device buffers) lets the whole frame be one
graph: captured once per (frame size, depth on/off, camera iterations, caches) and
replayed after one ``stage`` per cache. Time enters as a device scalar, so one capture
serves every frame; the graph holds the pools' addresses, so it serves those two cache
objects only. A call the caches cannot stage runs eagerly.

Staged attention runs the same attention over a fixed view (FlashInfer in its graph
mode, SDPA with a mask), equal to the eager forward within rounding;
``test/gpu/test_graphs_gpu.py`` checks it on a GPU.

Memory: the captures of one runner share one graph pool (``pool``), so a second capture
(depth on and off, say) reuses the first one's intermediate memory instead of holding a
pool of its own. Graphs that share a pool must never run at the same time: replays of
one runner follow each other on one stream, and each step's outputs are read before the
next replay.
"""

from __future__ import annotations

from typing import Dict, Optional, Protocol, runtime_checkable
import weakref

import torch

from .cached_attention import CachedAttention


class CaptureStreams:
    """
    The side streams CUDA graphs are captured on, one per device, for every capture.

    A graph cannot be captured on the default stream, and cuBLAS gives every stream it
    runs on a workspace of its own that the graphs captured there keep using: a new
    stream per capture would hold one more workspace for each. Captures happen one at a
    time on the worker's thread and their replays follow each other on one stream, so
    they share the workspace. An engine makes one and hands it to everything it captures.
    """

    def __init__(self) -> None:
        self._streams: Dict[int, 'torch.cuda.Stream'] = {}  # device index -> its stream

    def __call__(self, device: torch.device) -> 'torch.cuda.Stream':
        """Return the capture stream of ``device``, made at its first capture."""
        index = torch.device(device).index
        index = torch.cuda.current_device() if index is None else index
        stream = self._streams.get(index)
        if stream is None:
            stream = self._streams[index] = torch.cuda.Stream(index)
        return stream


@runtime_checkable
class StagedAttention(Protocol):
    """A cache whose attention a graph can hold: ``stage`` before each replay."""

    capturable: bool

    def stage(self) -> bool:
        """Write the open call into fixed buffers; False when this call cannot run staged."""
        ...

    def attend_staged(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                      v: torch.Tensor) -> torch.Tensor:
        """``attend`` of the staged call, from fixed addresses only."""
        ...


def stageable(cache: object) -> bool:
    """Tell whether ``cache`` can be captured inside a graph."""
    return isinstance(cache, StagedAttention) and bool(cache.capturable)


class StagingRefused(RuntimeError):
    """This call cannot replay through the graph (its caches did not stage it): run eagerly."""


class _Staged:
    """A staged cache seen as the model sees a cache: ``attend`` from fixed addresses."""

    def __init__(self, cache: StagedAttention) -> None:
        self._cache = cache

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        return self._cache.attend_staged(layer, q, k, v)


class GraphedStep:
    """
    Replay the forward of one streaming frame (not first, not scale) as one CUDA graph.

    Build with the model, the frame size, the options that change the graph and the two
    caches (global, camera) of the open call it is captured in: both must be stageable
    (:class:`StagingRefused` otherwise). Call with the frame, its time index and the same
    two caches. The returned ``ModelOutput`` holds static tensors that the next call
    overwrites: copy what you keep. ``streams``: where to capture (the engine's; default:
    streams of its own).
    """

    def __init__(self, model: torch.nn.Module, height: int, width: int, *,
                 with_depth: bool, caches: tuple, camera_iterations: Optional[int] = None,
                 warmup: int = 2, pool: Optional[tuple] = None,
                 streams: Optional[CaptureStreams] = None) -> None:
        named = dict(zip(('global', 'camera'), caches))
        refused = [name for name, c in named.items() if not stageable(c)]
        if refused:
            raise StagingRefused(f'the {" and ".join(refused)} cache cannot attend inside a '
                                 'graph: the frame runs eagerly')
        if not torch.cuda.is_available():
            raise RuntimeError('CUDA graphs need a CUDA device')
        device = next(model.parameters()).device
        if device.type != 'cuda':
            raise RuntimeError(f'the model is on {device}, CUDA graphs need it on a GPU')
        self.model = model
        self.camera_iterations = camera_iterations
        self.with_depth = with_depth
        self.image = torch.zeros(1, 3, height, width, device=device)
        self.time = torch.zeros((), dtype=torch.int64, device=device)
        # a pool handle shared with the runner's other captures (None: a pool of its own)
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        self._caches: Dict[str, StagedAttention] = named
        # weak: a graph must not keep a dropped cache's pool alive; it only must not replay
        self._bound = {name: weakref.ref(c) for name, c in named.items()}
        self._stage()
        self._capture(warmup, streams or CaptureStreams())

    def _stage(self) -> None:
        for name, cache in self._caches.items():
            if not cache.stage():
                raise StagingRefused(f'the {name} cache did not stage this call')

    def alive(self) -> bool:
        """Whether both caches the graph was captured over still exist."""
        return all(ref() is not None for ref in self._bound.values())

    def serves(self, global_cache: object, camera_cache: object) -> bool:
        """Whether these caches are the ones the graph was captured over."""
        given = {'global': global_cache, 'camera': camera_cache}
        return all(ref() is given[name] for name, ref in self._bound.items())

    def _forward(self):
        return self.model(self.image, time_index=self.time, first_frame=False,
                          scale_frames=False, global_cache=_Staged(self._caches['global']),
                          camera_cache=_Staged(self._caches['camera']),
                          with_depth=self.with_depth, camera_iterations=self.camera_iterations)

    def _capture(self, warmup: int, streams: CaptureStreams) -> None:
        stream = streams(self.image.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            self.image.uniform_()
            for _ in range(warmup):   # the staged caches attend for real: replays overwrite
                self._forward()
            stream.synchronize()
            # The capture allocates from its private pool, which cannot use blocks the
            # general pool holds free (the scale call's, the warm-up's). Under a
            # per-process cap those must go back first.
            torch.cuda.empty_cache()
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin(pool=self.pool, capture_error_mode='thread_local')
            try:
                self.output = self._forward()
            finally:
                graph.capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = graph

    def __call__(self, image: torch.Tensor, time_index: int, global_cache: CachedAttention,
                 camera_cache: CachedAttention):
        """
        Run one frame ``image [1, 3, H, W]`` at ``time_index`` through the caches.

        Raises :class:`StagingRefused` before anything runs when the caches are not the
        captured ones or do not stage this call.
        """
        if not self.serves(global_cache, camera_cache):
            raise StagingRefused('these caches are not the ones the graph was captured over')
        self._stage()
        self.image.copy_(image)
        self.time.fill_(int(time_index))
        self.graph.replay()
        return self.output
