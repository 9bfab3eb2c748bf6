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
What a configuration needs on the device, computed from its parameters before allocating.

:func:`estimate` returns a :class:`MemoryEstimate` in bytes, by part, so a node can say
up front (log, ``/diagnostics``) whether its model, its cameras' KV pools and the
working memory of one step fit the card, and which part to shrink when they do not.
Weights and KV pools are exact (the bytes the tensors hold); workspaces are the
constants the code allocates; activations and graph pools follow the formulas below,
checked against ``torch.cuda.max_memory_allocated`` on a GPU by
``benchmarks/memory_table.py`` and ``test/gpu/test_memory_gpu.py`` (figures in
``docs/memory.md``).

Two totals: ``total`` is what the device must hold at the worst moment (a window
re-seed, which runs ``scale_frames`` frames eagerly while the CUDA-graph pool stays
reserved); ``peak_allocated`` is what ``max_memory_allocated`` reads then (a graph
pool's intermediate memory is reserved but counts as allocated only while it is
captured). Neither counts the CUDA context (~0.5 GB outside PyTorch on a real card) or
the caching allocator's fragmentation (reserved minus allocated).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
import math
from pathlib import Path
from typing import Optional, Tuple, Union

from lingbot_ros.cache.backends import (AttentionBackend, is_fp8, resolve_backend,
                                        WORKSPACE_BYTES, WRAPPER_INT_WORKSPACE_BYTES)
from lingbot_ros.cache.layout import aggregator_layout, camera_head_layout, StreamLayout
from lingbot_ros.model.checkpoint import _build_meta, matmul_parameters, storage_dtype
from lingbot_ros.model.config import ModelConfig, SPECIAL_TOKENS
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.dtypes import (camera_kv_dtype, DTYPES, head_storage_dtype,
                                          heads_autocast, kv_storage_dtype)
from lingbot_ros.streaming.preprocess import plan_transform, resample_graph_bytes
import torch

GIB = 1024 ** 3
# cuBLAS takes its workspace through PyTorch's allocator, once per stream that runs a
# matrix product (the default stream; the side stream of a CUDA-graph capture).
CUBLAS_WORKSPACE_BYTES = 32 * 1024 * 1024
# Aggregator block, bytes per token and channel at the peak of its attention half, for
# compute bytes c (2 in bf16, 4 in fp32): the residual (c), the LayerNorm output (4:
# LayerNorm runs in fp32 under autocast), qkv (3c), q and k after their LayerNorms (4
# each) and rotated (4 each) while RoPE's temporaries (about 2 x 4) exist, q and k cast
# back (c each): 5c + 24.
ATTN_FIXED, ATTN_PER_C = 24, 5
# ... and of its MLP half: residual (c), LayerNorm output (4), fc1 and GELU outputs
# (mlp_ratio * c each).
MLP_FIXED = 4
# Page tables: four int32 device arrays (indices, two indptrs, last-page lengths).
INT32 = 4


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f'{name}={value!r} is invalid: expected {allowed}')


@dataclass(frozen=True)
class MemoryEstimate:
    """
    Device bytes a configuration needs, by part (all integers, all >= 0).

    ``weights``: the model's parameters and buffers in their storage dtypes.
    ``kv_pools``: every camera's aggregator and camera-head pools and page tables.
    ``workspace``: FlashInfer's shared float workspace, its wrappers' index buffers and
    cuBLAS's per-stream workspaces. ``activations``: the largest eager call (the scale
    phase or a window re-seed: ``scale_frames`` frames) plus the depth head's cached
    position maps and the kept input images. ``graph_pools``: the CUDA-graph pools of a
    one-frame step and of a live frame's resize (0 without CUDA graphs).
    ``graph_static``: the part of those pools that stays allocated between replays
    (static inputs and outputs, one attention call's q/k/v/out; all of the resize's).
    """

    weights: int
    kv_pools: int
    workspace: int
    activations: int
    graph_pools: int
    graph_static: int
    peak_allocated: int
    model_hw: Tuple[int, int]
    cameras: int

    def __post_init__(self) -> None:
        for name in ('weights', 'kv_pools', 'workspace', 'activations', 'graph_pools',
                     'graph_static', 'peak_allocated', 'cameras'):
            value = getattr(self, name)
            _require(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                     name, value, 'an integer >= 0 (bytes)')
        _require(self.graph_static <= self.graph_pools, 'graph_static', self.graph_static,
                 f'<= graph_pools ({self.graph_pools})')

    @property
    def total(self) -> int:
        """Bytes the device must hold at the worst moment (graph pool reserved, eager call)."""
        return self.weights + self.kv_pools + self.workspace + self.activations + \
            self.graph_pools

    def fits(self, capacity_bytes: int) -> bool:
        """Tell whether ``total`` fits in ``capacity_bytes``."""
        return self.total <= capacity_bytes

    def describe(self) -> str:
        """One line for the log: the total and each part (GiB, or MiB below 1 GiB)."""
        unit, scale = ('GiB', GIB) if self.total >= GIB else ('MiB', 1024 ** 2)

        def show(x: int) -> str:
            return f'{x / scale:.2f}'
        h, w = self.model_hw
        return (f'device memory need {show(self.total)} {unit} at {h}x{w} (HxW) for '
                f'{self.cameras} camera(s): weights {show(self.weights)}, KV pools '
                f'{show(self.kv_pools)}, workspace {show(self.workspace)}, activations '
                f'{show(self.activations)}, graph pools {show(self.graph_pools)} (peak '
                f'allocated {show(self.peak_allocated)})')

    def as_dict(self) -> dict:
        """Plain numbers (bytes) for diagnostics key/values, ``total`` included."""
        out = asdict(self)
        out['model_hw'] = list(self.model_hw)
        out['total'] = self.total
        return out


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _model_config(cfg: EngineConfig) -> ModelConfig:
    if cfg.model_config is None:
        return ModelConfig.preset(cfg.preset)
    return ModelConfig.load(Path(cfg.model_config))


def _device_type(cfg: EngineConfig) -> str:
    if cfg.device == 'auto':
        return 'cuda' if torch.cuda.is_available() else 'cpu'
    return torch.device(cfg.device).type


def weight_bytes(mc: ModelConfig, dtype: torch.dtype, autocast_dtype: Optional[torch.dtype],
                 head_dtype: Optional[torch.dtype],
                 head_autocast: Optional[torch.dtype] = None) -> int:
    """
    Bytes of the model's weights as ``load_model`` keeps them (exact).

    sum over parameters of numel x size(storage dtype) (aggregator: ``autocast_dtype``,
    heads: ``head_dtype``, or ``head_autocast`` when they compute in it; each falling back
    to ``dtype``) + the fp32 buffers.
    """
    model = _build_meta(mc)
    matmul = matmul_parameters(model)
    total = sum(p.numel() * _size(storage_dtype(n, dtype, autocast_dtype, head_dtype,
                                                n in matmul, head_autocast))
                for n, p in model.named_parameters())
    return total + sum(b.numel() * _size(torch.float32) for b in model.buffers())


def _stream_cache_bytes(layout: StreamLayout, layers: int, heads: int, head_dim: int,
                        dtype: torch.dtype) -> int:
    """One stream's pool (keys and values), its page ids and its page table."""
    pool = layout.nbytes(layers, heads, head_dim, dtype)
    page_ids = layout.pages * INT32
    table = (max(1, layout.pages) + 2 + 2 + 1) * INT32
    return pool + page_ids + table


def kv_pool_bytes(mc: ModelConfig, stream: StreamConfig, model_hw: Tuple[int, int],
                  kv_dtype: torch.dtype, camera_dtype: torch.dtype = torch.float32) -> int:
    """
    Bytes of one camera's paged caches, as ``paged_cache_factory`` allocates them (exact).

    Aggregator: ``StreamLayout.nbytes`` = 2 * depth * pages * P * heads * head_dim * size,
    with P = patches per frame, pages = scale + window + 1 + ceil(F * 6 / P) and F the
    window limit (``max_window_frames`` or the model's ``max_frame_num``). Camera head (in
    ``camera_dtype``, c bytes): 2 * trunk_depth * iterations * ceil(F / 64) * 64 * heads *
    head_dim * c.
    Plus each pool's int32 page ids and page table.
    """
    p = mc.patch_size
    patches = (model_hw[0] // p) * (model_hw[1] // p)
    agg, cam = mc.aggregator, mc.camera_head
    limit = min(agg.max_frame_num, stream.max_window_frames or agg.max_frame_num)
    iterations = stream.camera_iterations or cam.iterations
    agg_layout = aggregator_layout(patch_tokens=patches, scale_frames=stream.scale_frames,
                                   sliding_window=stream.sliding_window,
                                   special_capacity=limit, special_tokens=SPECIAL_TOKENS)
    cam_layout = camera_head_layout(capacity=limit)
    return (_stream_cache_bytes(agg_layout, agg.depth, agg.num_heads, agg.head_dim, kv_dtype)
            + _stream_cache_bytes(cam_layout, cam.trunk_depth * iterations, cam.num_heads,
                                  mc.head_width // cam.num_heads, camera_dtype))


def _depth_frame_bytes(mc: ModelConfig, model_hw: Tuple[int, int]) -> int:
    """
    Peak bytes of the DPT decoder for one frame (fp32), the largest of its three stages.

    With the heads under autocast (``head_dtype``) most of these maps are in a 2-byte dtype;
    the float32 count is kept for them as an upper bound until a GPU run measures it.

    With F features, A1 = (4 gh)(4 gw) (the finest token map), A0 = 4 A1 (refinenet1's
    output) and Af = H W: refinenet1 holds its resize and 1x1 output at A0 beside about
    5.3 maps at A1: 4 F (2 A0 + 5.3125 A1); the output stage holds refinenet1's map,
    output_conv1's and its resize to full size: 4 (F A0 + F/2 A0 + F/2 Af + 1.3125 F A1);
    the tail holds that map, two head_features_2 maps and the two outputs.
    """
    p = mc.patch_size
    gh, gw = model_hw[0] // p, model_hw[1] // p
    f = mc.depth_head.features
    a1 = 16 * gh * gw
    a0 = 4 * a1
    af = model_hw[0] * model_hw[1]
    refine = 4 * f * (2 * a0 + 5.3125 * a1)
    output = 4 * (f * a0 + f / 2 * a0 + f / 2 * af + 1.3125 * f * a1)
    tail = 4 * (f / 2 * af + 2 * mc.depth_head.head_features_2 * af + 2 * af)
    return int(max(refine, output, tail))


def depth_position_bytes(mc: ModelConfig, model_hw: Tuple[int, int]) -> int:
    """Bytes of the depth head's cached position maps: one per token layer and one full-size."""
    p = mc.patch_size
    gh, gw = model_hw[0] // p, model_hw[1] // p
    small = set(mc.depth_head.out_channels)
    return 4 * (sum(c * gh * gw for c in small)
                + mc.depth_head.features // 2 * model_hw[0] * model_hw[1])


def call_activation_bytes(mc: ModelConfig, model_hw: Tuple[int, int], frames: int,
                          compute_dtype: torch.dtype, depth_chunk: int,
                          head_upcast: int = 0, attention_upcast: int = 0) -> int:
    """
    Peak bytes a call of ``frames`` frames allocates while it runs (eager).

    With N = frames * (6 + patches) tokens, C = embed_dim, c = compute bytes and L = 4
    selected layers, the aggregator peaks either inside a block, N C (max(5c + 24,
    c + 4 + 2 mlp_ratio c) + (L - 1) 2c + c), or when its outputs turn fp32,
    N C L (2c + 8) (N C L 8 in fp32). The heads then hold the fp32 outputs, 8 N C L,
    plus the depth decoder of ``depth_chunk`` frames (:func:`_depth_frame_bytes`) and,
    for weights kept in low precision, the largest layer's fp32 copy (``head_upcast``).
    ``attention_upcast``: what a block's attention adds while it runs, here the copy of a
    float8 cache's visible keys and values that the PyTorch attention paths read
    (:func:`fp8_upcast_bytes`).
    """
    p = mc.patch_size
    agg = mc.aggregator
    n = frames * (SPECIAL_TOKENS + (model_hw[0] // p) * (model_hw[1] // p))
    nc = n * agg.embed_dim
    c = _size(compute_dtype)
    layers = len(agg.selected_layers)
    block = max(ATTN_PER_C * c + ATTN_FIXED, c + MLP_FIXED + 2 * agg.mlp_ratio * c)
    inside = nc * (block + (layers - 1) * 2 * c + c) + attention_upcast
    to_fp32 = nc * layers * (8 if c == 4 else 2 * c + 8)
    chunk = min(frames, depth_chunk or mc.depth_head.frames_chunk_size or frames)
    heads = nc * layers * 8 + chunk * _depth_frame_bytes(mc, model_hw) + head_upcast
    return int(max(inside, to_fp32, heads))


def fp8_upcast_bytes(mc: ModelConfig, stream: StreamConfig, model_hw: Tuple[int, int],
                     compute_dtype: torch.dtype) -> int:
    """
    Bytes of one layer's visible keys and values in the compute dtype, over a full window.

    FlashInfer reads a float8 cache as it is; the PyTorch paths (SDPA, where FlashInfer is
    missing or does not build) first convert the visible run to the queries' dtype, one
    layer at a time: 2 x tokens x heads x head_dim x c, tokens = (scale + window + 1) x P
    + F x 6 (F the window limit, P patches per frame).
    """
    p = mc.patch_size
    agg = mc.aggregator
    patches = (model_hw[0] // p) * (model_hw[1] // p)
    limit = min(agg.max_frame_num, stream.max_window_frames or agg.max_frame_num)
    tokens = (stream.scale_frames + stream.sliding_window + 1) * patches \
        + limit * SPECIAL_TOKENS
    return 2 * tokens * agg.num_heads * agg.head_dim * _size(compute_dtype)


def _largest_head_weight(mc: ModelConfig) -> int:
    model = _build_meta(mc)
    return max(t.numel() for n, t in model.named_parameters()
               if not n.startswith('aggregator.'))


def estimate(engine_cfg: EngineConfig, stream_cfg: StreamConfig, input_hw: Tuple[int, int],
             cameras: int = 1, *, model_config: Optional[ModelConfig] = None,
             backend: Union[AttentionBackend, str, None] = None,
             device_type: Optional[str] = None
             ) -> MemoryEstimate:
    """
    Return the device memory the engine and ``cameras`` sessions will need, by part.

    ``input_hw`` is a camera's image size (H, W); the model grid follows from
    ``stream_cfg.image_size`` as preprocessing maps it (width ``image_size``, height
    rounded to the patch: 720x1280 at 518 -> 294x518). ``model_config`` overrides the
    engine's preset or file; ``backend`` and ``device_type`` what the engine resolved
    (default: what ``attention_backend`` and ``device`` resolve to here, without
    FlashInfer's warm-up). Formulas, in bytes:

    - weights: :func:`weight_bytes` (exact);
    - kv_pools: ``cameras`` x :func:`kv_pool_bytes` (exact);
    - workspace: on CUDA, cuBLAS 32 MiB per stream (two with CUDA graphs); with
      FlashInfer, its one shared 128 MiB float workspace + 8 MiB per camera's wrapper;
    - activations: :func:`call_activation_bytes` for ``scale_frames`` frames (the scale
      phase and every window re-seed) + :func:`depth_position_bytes` + the kept and
      stacked input images, 2 x scale_frames x 3 H W x 4;
    - graph_pools (CUDA graphs on CUDA only): :func:`call_activation_bytes` for one
      frame + its static part: the image (3 H W 4), one attention call's q/k/v/out
      (4 x (6 + patches) x embed_dim x c) and the outputs (depth, confidence: 2 H W 4);
      plus the live frames' resize, graphed too: :func:`resample_graph_bytes` of the
      camera's size, kept between replays (so in the static part as well);
    - peak_allocated = weights + kv_pools + workspace + max(activations + graph_static,
      graph_pools);
    - a float8 cache read by a PyTorch attention path (not FlashInfer) adds
      :func:`fp8_upcast_bytes` to both calls' peaks.
    """
    _require(isinstance(cameras, int) and cameras >= 1, 'cameras', cameras, 'an integer >= 1')
    _require(len(tuple(input_hw)) == 2 and all(int(v) >= 1 for v in input_hw), 'input_hw',
             input_hw, '(height, width), both >= 1')
    engine_cfg = engine_cfg.validate()
    stream_cfg = stream_cfg.validate()
    mc = model_config or _model_config(engine_cfg)
    device = device_type or _device_type(engine_cfg)
    compute = DTYPES[engine_cfg.dtype]
    kv_dtype = kv_storage_dtype(engine_cfg)
    head_dtype = head_storage_dtype(engine_cfg)
    low_heads = heads_autocast(engine_cfg)
    plan = plan_transform(tuple(input_hw), stream_cfg.image_size, mc.patch_size)
    model_hw = plan.model_hw
    h, w = model_hw

    autocast = None if compute == torch.float32 else compute
    weights = weight_bytes(mc, torch.float32, autocast, head_dtype, low_heads)
    kv = cameras * kv_pool_bytes(mc, stream_cfg, model_hw, kv_dtype,
                                 camera_kv_dtype(engine_cfg))

    cuda = device == 'cuda'
    graphs = cuda and engine_cfg.cuda_graphs
    if backend is None:
        try:
            backend, _ = resolve_backend(engine_cfg.attention_backend, torch.device(device),
                                         dtype=kv_dtype, head_dim=mc.aggregator.head_dim)
        except (ValueError, RuntimeError):
            backend = AttentionBackend.SDPA
    backend = AttentionBackend.of(backend)
    workspace = 0
    if cuda:
        workspace += CUBLAS_WORKSPACE_BYTES * (2 if graphs else 1)
    if backend is AttentionBackend.FLASHINFER:
        workspace += WORKSPACE_BYTES + cameras * WRAPPER_INT_WORKSPACE_BYTES

    upcast = 4 * _largest_head_weight(mc) \
        if head_dtype != torch.float32 and low_heads is None else 0
    kv_upcast = fp8_upcast_bytes(mc, stream_cfg, model_hw, compute) \
        if is_fp8(kv_dtype) and backend is not AttentionBackend.FLASHINFER else 0
    chunk = engine_cfg.depth_chunk_frames
    images = 2 * stream_cfg.scale_frames * 3 * h * w * 4
    activations = (call_activation_bytes(mc, model_hw, stream_cfg.scale_frames, compute,
                                         chunk, upcast, kv_upcast)
                   + depth_position_bytes(mc, model_hw) + images)
    graph_pools = graph_static = 0
    if graphs:
        tokens = SPECIAL_TOKENS + (h // mc.patch_size) * (w // mc.patch_size)
        graph_static = (3 * h * w * 4 + 4 * tokens * mc.aggregator.embed_dim * _size(compute)
                        + 2 * h * w * 4)
        graph_pools = graph_static + call_activation_bytes(mc, model_hw, 1, compute, chunk,
                                                           upcast, kv_upcast)
        resize = resample_graph_bytes(tuple(input_hw), plan.resized_hw, plan.model_hw[0])
        graph_static += resize
        graph_pools += resize
    peak = weights + kv + workspace + max(activations + graph_static, graph_pools)
    return MemoryEstimate(weights=int(weights), kv_pools=int(kv), workspace=int(workspace),
                          activations=int(activations), graph_pools=int(graph_pools),
                          graph_static=int(graph_static), peak_allocated=int(peak),
                          model_hw=(int(h), int(w)), cameras=cameras)


def fitting_window(engine_cfg: EngineConfig, stream_cfg: StreamConfig,
                   input_hw: Tuple[int, int], capacity_bytes: int, cameras: int = 1,
                   **kwargs) -> int:
    """
    Return the largest ``sliding_window`` (>= 1) whose estimate fits ``capacity_bytes``.

    0 when even a window of one frame does not fit. ``kwargs`` go to :func:`estimate`.
    Each extra window frame costs one page per layer: the estimate grows linearly in it,
    so the answer is found by bisection over [1, configured window].
    """
    def fits(window: int) -> bool:
        cfg = stream_cfg.replace(sliding_window=window)
        return estimate(engine_cfg, cfg, input_hw, cameras, **kwargs).total <= capacity_bytes
    low, high = 0, stream_cfg.sliding_window
    while low < high:
        mid = math.ceil((low + high) / 2)
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low
