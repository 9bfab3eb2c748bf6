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
One streaming frame's forward replayed as CUDA graphs: one graph, or one per cache call.

Eager PyTorch spends most of a frame launching ~2,000 small kernels from Python. The
forward of a streaming frame has fixed shapes everywhere except inside attention over
the cache (its key count changes as the window fills, and the cache moves pages). So
we capture the forward once per (frame size, depth on/off, camera iterations) as a
chain of graphs cut at every ``CachedAttention.attend`` call: graph 0 runs up to the
first global block's q/k/v, the real cache attends eagerly, graph 1 continues, and so
on. Time enters as a device scalar, so one capture serves every frame.

A cache that can attend from fixed addresses (:class:`StagedAttention`: the paged
cache, whose ``stage`` puts a call's positions and visible range into fixed device
buffers) is instead captured inside the graphs: with both caches of that kind the
whole frame is one graph, replayed after one ``stage`` per cache, and the graphs then
serve those two cache objects only (they hold the pools' addresses).

Cut replays compute exactly what the eager forward computes (same kernels, same
order); staged attention runs the same attention over a fixed view (FlashInfer in its
graph mode, SDPA with a mask), equal within rounding. ``test/test_graphs_gpu.py``
checks both on a GPU.

Memory: the captures of one runner share one graph pool (``pool``), so a second capture
(depth on and off, say) reuses the first one's intermediate memory instead of holding a
pool of its own; and the cuts of one kind (global, camera) share one set of static
``q``/``k``/``v``/``out`` buffers, copied into at the end of each graph, instead of
keeping every layer's own (24 global cuts of a 294x518 frame held 150 MB that way).
Graphs that share a pool must never run at the same time: replays of one runner follow
each other on one stream, and each step's outputs are read before the next replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Protocol, runtime_checkable
import weakref

import torch

from .cached_attention import attend_uncached, CachedAttention


def capture_stream(device: torch.device) -> 'torch.cuda.Stream':
    """
    Return the one side stream this process captures CUDA graphs on, for ``device``.

    A graph cannot be captured on the default stream, and cuBLAS gives every stream it
    runs on a workspace of its own (32 MiB on Hopper) that the graphs captured there keep
    using: a new stream per capture held one more workspace for each (a frame resize's
    capture measured 48 MB for about 16 MB of its own tensors on an H100). Captures
    happen one at a time on the worker's thread and their replays follow each other on
    one stream, so they can share the workspace.
    """
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    stream = _CAPTURE_STREAMS.get(index)
    if stream is None:
        stream = _CAPTURE_STREAMS[index] = torch.cuda.Stream(index)
    return stream


_CAPTURE_STREAMS: Dict[int, 'torch.cuda.Stream'] = {}  # device index -> capture stream


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
    """This call cannot replay through the graphs (its caches did not stage it): run eagerly."""


@dataclass
class _Cut:
    """One attention call between two graphs: who answers it and its static buffers."""

    target: str   # 'global' or 'camera'
    layer: int
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor


class _Recorder:
    """
    Stands in for both caches while capturing: ends a graph at each ``attend``.

    During warm-up (``graphs is None``) it answers with plain attention so every lazy
    table and workspace is created outside capture. Cuts whose tensors have the same
    target, shapes and dtypes share static buffers (``shared``).
    """

    def __init__(self, graphs: Optional[List[torch.cuda.CUDAGraph]], pool, stream,
                 inline: Dict[str, StagedAttention]) -> None:
        self.graphs = graphs
        self.pool = pool
        self.stream = stream
        self.inline = inline   # target -> staged cache attended inside the graph
        self.cuts: List[_Cut] = []
        self.shared: Dict[tuple, tuple] = {}

    def view(self, target: str) -> CachedAttention:
        if target in self.inline:
            cache = self.inline[target]

            class _Inline:
                def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                           v: torch.Tensor) -> torch.Tensor:
                    return cache.attend_staged(layer, q, k, v)
            return _Inline()
        recorder = self

        class _View:
            def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor,
                       v: torch.Tensor) -> torch.Tensor:
                return recorder.attend(target, layer, q, k, v)
        return _View()

    def attend(self, target: str, layer: int, q: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> torch.Tensor:
        if self.graphs is None:
            return attend_uncached(q, k, v)
        key = (target,) + tuple((tuple(t.shape), t.dtype) for t in (q, k, v))
        if key not in self.shared:  # allocated in the graph's pool, kept by the cuts
            self.shared[key] = tuple(torch.empty_like(t) for t in (q, k, v))
        sq, sk, sv = self.shared[key]
        sq.copy_(q)
        sk.copy_(k)
        sv.copy_(v)
        self.graphs[-1].capture_end()
        out_key = ('out',) + key
        if out_key not in self.shared:
            self.shared[out_key] = (torch.empty_like(q),)
        out = self.shared[out_key][0]
        self.cuts.append(_Cut(target, layer, sq, sk, sv, out))
        graph = torch.cuda.CUDAGraph()
        self.graphs.append(graph)
        graph.capture_begin(pool=self.pool, capture_error_mode='thread_local')
        return out


class GraphedStep:
    """
    Replay the forward of one streaming frame (not first, not scale) as CUDA graphs.

    Build with the model, the frame size and the options that change the graph; call
    with the frame, its time index and the two caches. The returned ``ModelOutput``
    holds static tensors that the next call overwrites: copy what you keep.

    ``caches`` (global, camera), given when capturing inside an open call of those
    caches: the stageable ones are attended inside the graphs, which then replay for
    those cache objects only (``serves``); the others are cut out as above.
    """

    def __init__(self, model: torch.nn.Module, height: int, width: int, *,
                 with_depth: bool, camera_iterations: Optional[int] = None,
                 warmup: int = 2, pool: Optional[tuple] = None,
                 caches: Optional[tuple] = None) -> None:
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
        self.graphs: List[torch.cuda.CUDAGraph] = []
        # a pool handle shared with the runner's other captures (None: a pool of its own)
        self.pool = pool if pool is not None else torch.cuda.graph_pool_handle()
        named = dict(zip(('global', 'camera'), caches or (None, None)))
        self.inline = {name: c for name, c in named.items() if stageable(c)}
        # weak: a graph must not keep a dropped cache's pool alive; it only must not replay
        self._bound = {name: weakref.ref(c) for name, c in self.inline.items()}
        self._stage(self.inline)
        self._capture(warmup)

    @staticmethod
    def _stage(inline: Dict[str, StagedAttention]) -> None:
        for name, cache in inline.items():
            if not cache.stage():
                raise StagingRefused(f'the {name} cache did not stage this call')

    def alive(self) -> bool:
        """Whether every cache the graphs were captured over still exists."""
        return all(ref() is not None for ref in self._bound.values())

    def serves(self, global_cache: object, camera_cache: object) -> bool:
        """Whether these caches are the ones the graphs were captured over."""
        given = {'global': global_cache, 'camera': camera_cache}
        return all(ref() is given[name] for name, ref in self._bound.items())

    def _forward(self, recorder: _Recorder):
        return self.model(self.image, time_index=self.time, first_frame=False,
                          scale_frames=False, global_cache=recorder.view('global'),
                          camera_cache=recorder.view('camera'), with_depth=self.with_depth,
                          camera_iterations=self.camera_iterations)

    def _capture(self, warmup: int) -> None:
        stream = capture_stream(self.image.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.no_grad(), torch.cuda.stream(stream):
            self.image.uniform_()
            for _ in range(warmup):   # staged caches attend for real: the replay overwrites it
                self._forward(_Recorder(None, None, stream, self.inline))
            stream.synchronize()
            # The capture allocates from its private pool, which cannot use blocks the
            # general pool holds free (the scale call's, the warm-up's: 0.96 GiB in the 8 GB
            # profile's failed captures). Under a per-process cap those must go back first.
            torch.cuda.empty_cache()
            pool = self.pool
            graphs = [torch.cuda.CUDAGraph()]
            recorder = _Recorder(graphs, pool, stream, self.inline)
            graphs[0].capture_begin(pool=pool, capture_error_mode='thread_local')
            try:
                self.output = self._forward(recorder)
            finally:
                graphs[-1].capture_end()
        torch.cuda.current_stream().wait_stream(stream)
        self.graphs = graphs
        self.cuts = recorder.cuts

    def __call__(self, image: torch.Tensor, time_index: int, global_cache: CachedAttention,
                 camera_cache: CachedAttention):
        """
        Run one frame ``image [1, 3, H, W]`` at ``time_index`` through the caches.

        Raises :class:`StagingRefused` before anything runs when the caches are not the
        captured ones or do not stage this call.
        """
        if not self.serves(global_cache, camera_cache):
            raise StagingRefused('these caches are not the ones the graphs were captured over')
        self._stage(self.inline)
        self.image.copy_(image)
        self.time.fill_(int(time_index))
        caches = {'global': global_cache, 'camera': camera_cache}
        for graph, cut in zip(self.graphs, self.cuts):
            graph.replay()
            cut.out.copy_(caches[cut.target].attend(cut.layer, cut.q, cut.k, cut.v))
        self.graphs[-1].replay()
        return self.output
