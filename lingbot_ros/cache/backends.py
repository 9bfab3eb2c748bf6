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
Attention over cached pages: one interface, backends :class:`AttentionBackend`.

- ``sdpa``: PyTorch scaled-dot-product attention over the stream's visible run, which
  the allocator keeps contiguous, so keys and values are views (no gather).
- ``flashinfer``: FlashInfer's ragged prefill over the contiguous run (no page
  indirection; planned once per call, run per layer). Imported lazily: it is optional.
- ``paged_sdpa``: the page table read back in PyTorch (gather + masked SDPA); the tests'
  check that the page tables describe the visible run.
- ``auto``: ``flashinfer`` on CUDA in half precision when it is importable, else
  ``sdpa`` -- always with a reason string the node can report.

Keys and values may be stored in float8 (e4m3) while queries stay in the compute dtype
(``KV_FP8``): FlashInfer reads such a cache directly (queries in half precision); the
PyTorch paths upcast the visible keys and values to the queries' dtype first, so any
device that can store float8 runs it. FlashInfer's all-float8 kernel (queries rounded to
float8 too, and the probabilities before the value product) stays unused: at head size 64
it is barely faster than the half-precision one, and its rounding moves the poses more
than the reference's own bfloat16 does. Every FlashInfer wrapper of a device shares one
float workspace (:func:`shared_workspace`): the wrappers run one after another on one
stream, and that buffer only holds a run's partial results.

cuDNN SDPA builds an execution plan for every new key count, on the host, and the key
count grows by the special tokens of every committed frame, so its fast kernel costs a
plan per call. So the SDPA order prefers the flash kernel (no plan), and ``auto`` prefers
FlashInfer's ragged FA3 kernel (little host time per call, close to cuDNN's on the
device); ``docs/performance.md`` has the figures.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F  # noqa: N812

from .backend_choice import AttentionBackend
from .limits import MAX_KV_SPLITS
from .page_table import PageTable
from .split_merge import merge_splits
from .words import as_words

# FlashInfer's float workspace (split-KV partial results), one per device for every wrapper;
# 128 MiB is FlashInfer's own recommendation, far above what a prefill of one frame plans.
WORKSPACE_BYTES = 128 * 1024 * 1024
# What each wrapper allocates on the device besides (its plan's index arrays).
WRAPPER_INT_WORKSPACE_BYTES = 8 * 1024 * 1024
KV_FP8 = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(KV_FP8).max)  # 448: larger keys or values are clamped to it

_workspaces: dict = {}


def flashinfer_module() -> tuple[Optional[object], str]:
    """Return (flashinfer module or None, why not)."""
    try:
        import flashinfer  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA/JIT setup
        return None, f'flashinfer not importable ({type(exc).__name__}: {exc})'
    return flashinfer, 'flashinfer importable'


HALF = (torch.float16, torch.bfloat16)
KV_STORAGE = (torch.float32, torch.float16, torch.bfloat16, KV_FP8)  # what a pool may hold
FLASHINFER_KV = HALF + (KV_FP8,)  # cache dtypes FlashInfer reads
FLASHINFER_HEAD_DIMS = (64, 128, 256)  # head sizes FlashInfer's prefill kernels are built for


def resolve_backend(requested: Union[AttentionBackend, str], device: torch.device,
                    dtype: Optional[torch.dtype] = None,
                    head_dim: Optional[int] = None) -> tuple[AttentionBackend, str]:
    """
    Choose the backend for ``requested`` (a member or its value); return (backend, reason).

    ``dtype`` is the cache's storage type (FlashInfer needs half precision or float8
    e4m3) and ``head_dim`` the attention head size (FlashInfer needs one of
    ``FLASHINFER_HEAD_DIMS``); None means unknown (assumed to fit).
    """
    requested = AttentionBackend.of(requested)
    if requested is AttentionBackend.SDPA or requested is AttentionBackend.PAGED_SDPA:
        return requested, 'requested'
    cuda = torch.device(device).type == 'cuda'
    half = dtype is None or dtype in FLASHINFER_KV
    head_ok = head_dim is None or head_dim in FLASHINFER_HEAD_DIMS
    if requested is AttentionBackend.FLASHINFER:
        if not cuda:
            raise ValueError(f'backend=flashinfer is not allowed on device {device}: needs CUDA')
        if not half:
            raise ValueError(f'backend=flashinfer is not allowed for {dtype}: needs float16 '
                             'or bfloat16 (or a float8_e4m3fn cache)')
        if not head_ok:
            raise ValueError(f'backend=flashinfer is not allowed for head_dim={head_dim}: '
                             f'needs one of {FLASHINFER_HEAD_DIMS}')
        mod, why = flashinfer_module()
        if mod is None:
            raise RuntimeError(f'backend=flashinfer requested but {why}')
        return AttentionBackend.FLASHINFER, 'requested'
    if not cuda:
        return AttentionBackend.SDPA, f'auto: device {device} is not CUDA -> SDPA'
    if not half:
        return AttentionBackend.SDPA, (f'auto: {dtype} cache -> SDPA (FlashInfer needs half '
                                       'precision)')
    if not head_ok:
        return AttentionBackend.SDPA, (f'auto: head_dim {head_dim} -> SDPA (FlashInfer '
                                       f'kernels exist for {FLASHINFER_HEAD_DIMS})')
    mod, why = flashinfer_module()
    if mod is None:
        return AttentionBackend.SDPA, f'auto: {why} -> SDPA (fallback)'
    return AttentionBackend.FLASHINFER, 'auto: CUDA, half precision -> FlashInfer ragged prefill'


# Kernel preference for the dense path on CUDA, first choice first (names of SDPBackend
# members, lower case). Flash first: cuDNN plans per key count (see the module doc).
SDPA_ORDER = ('flash_attention', 'efficient_attention', 'cudnn_attention', 'math')


def _sdpa_context(device: torch.device):
    if device.type != 'cuda':
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel, SDPBackend
    order = [getattr(SDPBackend, name.upper()) for name in SDPA_ORDER]
    return sdpa_kernel(order, set_priority=True)


def is_fp8(dtype: torch.dtype) -> bool:
    """Tell whether a cache dtype is float8 (stored only; attention runs in the query dtype)."""
    return dtype == KV_FP8


def compute_dtype(q_dtype: torch.dtype, kv_dtype: torch.dtype) -> torch.dtype:
    """Return the dtype attention runs in: the cache's, or the queries' over a float8 cache."""
    return q_dtype if is_fp8(kv_dtype) else kv_dtype


def storable(x: torch.Tensor, kv_dtype: torch.dtype) -> torch.Tensor:
    """Clamp ``x`` into float8's range when the cache is float8, so no value becomes NaN."""
    return x.clamp(-FP8_MAX, FP8_MAX) if is_fp8(kv_dtype) else x


def sdpa_run(q: torch.Tensor, k_run: torch.Tensor, v_run: torch.Tensor,
             mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """
    Attention of ``q`` [1, H, N, D] over a contiguous run ``[tokens, H, D]`` (views).

    ``mask`` (bool ``[tokens]``, True = visible) lets a fixed run stand for a visible set
    whose length changes, as a CUDA graph needs.
    """
    dtype = compute_dtype(q.dtype, k_run.dtype)
    k = k_run.permute(1, 0, 2).unsqueeze(0).to(dtype)
    v = v_run.permute(1, 0, 2).unsqueeze(0).to(dtype)
    attn_mask = None if mask is None else mask.view(1, 1, 1, -1)
    with _sdpa_context(q.device):
        return F.scaled_dot_product_attention(q.to(dtype), k, v,
                                              attn_mask=attn_mask).to(q.dtype)


def paged_sdpa_run(q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor,
                   table: PageTable) -> torch.Tensor:
    """
    Attention of a batch ``q`` [S, H, N, D] over the pages the table lists, in one call.

    ``k_pages``/``v_pages`` are one layer's ``[pages, page_size, H, D]``. Lengths come
    from the host mirror; page numbers from the device table (no device-to-host read).
    """
    s, h, n, d = q.shape
    page = table.page_size
    lengths = [table.tokens(i) for i in range(s)]
    longest = max(lengths)
    total = table.total_pages
    idx = table.kv_indices[:total].long()
    dtype = compute_dtype(q.dtype, k_pages.dtype)
    k_all = k_pages.index_select(0, idx).reshape(-1, h, d).to(dtype)
    v_all = v_pages.index_select(0, idx).reshape(-1, h, d).to(dtype)
    k = k_all.new_zeros(s, longest, h, d)
    v = v_all.new_zeros(s, longest, h, d)
    mask = torch.zeros(s, 1, 1, longest, dtype=torch.bool, device=q.device)
    start = 0
    for i, length in enumerate(lengths):
        k[i, :length] = k_all[start:start + length]
        v[i, :length] = v_all[start:start + length]
        mask[i, ..., :length] = True
        start += table.runs[i].count * page
    with _sdpa_context(q.device):
        out = F.scaled_dot_product_attention(q.to(k.dtype), k.transpose(1, 2),
                                             v.transpose(1, 2), attn_mask=mask)
    return out.to(q.dtype)


def shared_workspace(device: torch.device) -> torch.Tensor:
    """
    Return the one FlashInfer float workspace of ``device``, allocating it on first use.

    Wrappers only keep partial results of a run in it, and every run of this package
    goes on the device's current stream from the one thread that owns the model, so
    all caches, batches and warm-ups of a device can share it.
    """
    device = torch.device(device)
    if device.type == 'cuda' and device.index is None:
        device = torch.device('cuda', torch.cuda.current_device())
    buf = _workspaces.get(device)
    if buf is None:
        buf = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        _workspaces[device] = buf
    return buf


def release_workspaces() -> None:
    """Forget the shared workspaces (their memory goes once no wrapper holds them)."""
    _workspaces.clear()


def _flashinfer_wrapper(kind: str, device: torch.device, kernel: str, **graph_buffers):
    """Build FlashInfer's ``Batch<kind>Wrapper`` (NHD) over the device's shared workspace."""
    mod, why = flashinfer_module()
    if mod is None:
        raise RuntimeError(why)
    return getattr(mod, f'Batch{kind}Wrapper')(shared_workspace(device), 'NHD', backend=kernel,
                                               **graph_buffers)


class FlashInferRagged:
    """
    FlashInfer ragged prefill over one contiguous run: ``plan`` once per call, ``run`` per layer.

    The index arrays live in two small host tensors updated in place (``plan`` reads
    them on the host), so a frame builds no tensors from Python lists.

    ``splits`` > 1 cuts the keys into that many consecutive parts, each planned as a
    request of its own with a copy of the queries, and merges the parts' outputs by
    their log-sum-exp (``split_merge.merge_splits``): a streaming frame has too few
    query tiles to fill the GPU (see :func:`auto_kv_splits`), and the parts run side by
    side.

    ``graph=True`` builds FlashInfer's CUDA-graph mode: ``plan`` writes the request into
    fixed device buffers, so a ``run`` captured in a graph serves every later plan with
    the same query count. Its keys are then passed whole (a layer's fixed flat view) and
    the plan's ``kv_offset`` says where the visible run starts in them. Plans copy from
    page-locked host tensors without waiting; with frames queued ahead the next plan may
    come before the device has run that copy, so a plan first waits for the last one's
    copies (an event; long done, in practice, by then).
    """

    def __init__(self, device: torch.device, kernel: str = 'auto', graph: bool = False,
                 splits: int = 1) -> None:
        if not 1 <= splits <= MAX_KV_SPLITS:
            raise ValueError(f'splits={splits!r} is not allowed: 1 .. {MAX_KV_SPLITS}')
        self.splits = splits
        buffers = {}
        if graph:
            buffers = {'use_cuda_graph': True,
                       'qo_indptr_buf': torch.zeros(splits + 1, dtype=torch.int32,
                                                    device=device),
                       'kv_indptr_buf': torch.zeros(splits + 1, dtype=torch.int32,
                                                    device=device)}
        self.wrapper = _flashinfer_wrapper('PrefillWithRaggedKVCache', device, kernel, **buffers)
        pin = torch.device(device).type == 'cuda'
        self._qo = torch.zeros(splits + 1, dtype=torch.int32, pin_memory=pin)
        self._kv = torch.zeros(splits + 1, dtype=torch.int32, pin_memory=pin)
        self._copied: Optional[torch.cuda.Event] = None  # after the last plan's copies

    def plan(self, queries: int, keys: int, heads: int, head_dim: int,
             dtype: torch.dtype, kv_dtype: Optional[torch.dtype] = None,
             kv_offset: int = 0) -> None:
        """Plan ``queries`` (``dtype``) over ``keys`` tokens (``kv_dtype``) from ``kv_offset``."""
        s = self.splits
        if keys < s:
            raise ValueError(f'keys={keys} is not allowed with splits={s}: each part needs '
                             'a key')
        if self._copied is not None:
            self._copied.synchronize()  # the host buffers are read by the last plan's copies
        qo, kv = self._qo.numpy(), self._kv.numpy()
        for i in range(s + 1):   # equal parts; the first ones take the remainder
            qo[i] = i * queries
            kv[i] = kv_offset + (keys * i + s - 1) // s
        self.wrapper.plan(self._qo, self._kv, heads, heads, head_dim, causal=False,
                          q_data_type=dtype, kv_data_type=kv_dtype or dtype)
        if self._qo.is_pinned():
            self._copied = torch.cuda.Event()
            self._copied.record()

    def run(self, q: torch.Tensor, k_run: torch.Tensor, v_run: torch.Tensor) -> torch.Tensor:
        """``q`` [1, H, N, D] over a contiguous run ``[tokens, H, D]`` -> [1, H, N, D]."""
        dtype = compute_dtype(q.dtype, k_run.dtype)
        q_nhd = q[0].to(dtype).transpose(0, 1)
        if self.splits == 1:
            out = self.wrapper.run(q_nhd.contiguous(), k_run, v_run)
        else:
            # one copy of q per part, end to end: expand + reshape writes it in one pass
            # (repeat takes a third longer), in 8-byte words where they fit (words.as_words)
            words = as_words(q_nhd)
            tiled = words.unsqueeze(0).expand(self.splits, *words.shape) \
                .reshape(self.splits * words.shape[0], *words.shape[1:]).view(q_nhd.dtype)
            parts, lse = self.wrapper.run(tiled, k_run, v_run, return_lse=True)
            out = merge_splits(parts, lse, self.splits)
        return out.transpose(0, 1).unsqueeze(0).to(q.dtype)


# Query rows one CTA of FlashInfer's Hopper (FA3) prefill takes, by head size (its tile
# table): what decides how many CTAs a frame's queries make.
_SM90_QUERY_TILE = {64: 192, 128: 128, 256: 128}


def auto_kv_splits(queries: int, heads: int, head_dim: int, device: torch.device) -> int:
    """
    Return how many key parts fill the GPU best for a call of ``queries`` queries.

    One frame of the release model (978 queries, 16 heads of 64) makes 6 x 16 = 96 CTAs
    of FlashInfer's Hopper kernel, so 36 of a 132-SM Hopper GPU's SMs idle for the call
    while each CTA walks every key. Cutting the keys into s parts makes 96 s shorter
    CTAs; the call takes about ceil(96 s / SMs) / s of the time (s = 4: 0.75). Only on
    Hopper (FlashInfer's other kernels split the keys themselves); 1 elsewhere.
    """
    device = torch.device(device)
    if device.type != 'cuda' or head_dim not in _SM90_QUERY_TILE:
        return 1
    props = torch.cuda.get_device_properties(device)
    if props.major != 9:
        return 1
    return best_kv_splits(-(-queries // _SM90_QUERY_TILE[head_dim]) * heads,
                          props.multi_processor_count)


def best_kv_splits(tiles: int, sms: int, limit: int = 8) -> int:
    """Pick the s in 1..limit with the fewest waves per part, ceil(tiles s / sms) / s."""
    return min(range(1, limit + 1), key=lambda s: (-(-tiles * s // sms) / s, s))


def flashinfer_kernel_dir() -> Optional[Path]:
    """Return the folder FlashInfer builds its kernels into (None without FlashInfer)."""
    env = _flashinfer_env()
    folder = getattr(env, 'FLASHINFER_JIT_DIR', None)
    return Path(folder) if folder is not None else None


def flashinfer_kernels_built() -> int:
    """
    Count FlashInfer's compiled prefill kernels on this machine (0: none yet).

    Counted where FlashInfer builds them and in its AOT folder, where it loads them
    without building (a robot image's ``flashinfer-jit-cache`` package, or libraries
    carried from a machine of the same GPU architecture).
    """
    env = _flashinfer_env()
    count = 0
    for name in ('FLASHINFER_JIT_DIR', 'FLASHINFER_AOT_DIR'):
        folder = getattr(env, name, None)
        if folder is not None and Path(folder).is_dir():
            count += sum(1 for f in Path(folder).rglob('*.so')
                         if 'prefill' in str(f.relative_to(folder)))
    return count


def _flashinfer_env() -> Any:
    try:
        from flashinfer.jit import env
    except Exception:  # noqa: BLE001 (not installed, or an import that fails on this machine)
        return None
    return env


def warm_up_flashinfer(device: torch.device, heads: int, head_dim: int,
                       dtype: torch.dtype, kv_dtype: Optional[torch.dtype] = None) -> None:
    """
    Run one tiny ragged prefill so FlashInfer compiles its kernel now, not on frame one.

    FlashInfer builds kernels on first use (tens of seconds); a node should pay that
    while configuring, not while its cameras stream. ``kv_dtype`` (default ``dtype``)
    is the cache's storage dtype, so a float8 cache is tried with the kernel it will
    use. Raises whatever FlashInfer raises.
    """
    kv_dtype = kv_dtype or dtype
    wrapper = FlashInferRagged(device)
    wrapper.plan(8, 16, heads, head_dim, compute_dtype(dtype, kv_dtype), kv_dtype)
    q = torch.randn(1, heads, 8, head_dim, device=device, dtype=dtype)
    kv = torch.randn(16, heads, head_dim, device=device, dtype=dtype).to(kv_dtype)
    wrapper.run(q, kv, kv)
    torch.cuda.synchronize(device)
