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
Pillow's bicubic resampler re-implemented in torch, bit for bit, on any device.

Pillow resizes 8-bit images in fixed point: integer taps with 22 fractional bits, summed
and rounded in integer arithmetic. The same integers, multiplied as float64 matrices,
are summed without rounding (every product is below 2^31 and every sum below 2^53), so
a frame resampled here on the model's device equals the file path's Pillow resize
exactly (``test/unit/test_preprocess.py`` against the reference's fixtures).
"""

from __future__ import annotations

from collections import OrderedDict
import importlib.metadata
import math
import threading
from typing import Optional, Tuple

from lingbot_ros.streaming.preprocess.transform import FrameTransform, TO_UNIT
import numpy as np
import torch

BITS = 22  # Pillow's fixed-point precision for 8-bit resampling


def _pillow_major() -> int:
    try:
        return int(importlib.metadata.version('pillow').split('.')[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 13


PILLOW_MAJOR = _pillow_major()  # the installed Pillow decides the order of the passes


def taps(in_size: int, out_size: int) -> Tuple[np.ndarray, np.ndarray]:
    """
    Pillow's bicubic taps for one axis: source indices and fixed-point weights.

    Same arithmetic as Pillow (float64 weights normalised per output pixel, summed
    left to right, rounded half away from zero to 22 fractional bits), so integer
    convolution with them reproduces Pillow exactly.
    """
    scale = in_size / out_size
    filter_scale = max(scale, 1.0)
    support = 2.0 * filter_scale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    first = np.maximum(np.trunc(center - support + 0.5), 0).astype(np.int64)
    count = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - first
    k = np.arange(ksize)
    x = np.abs((k[None, :] + first[:, None] - center[:, None] + 0.5) * (1.0 / filter_scale))
    # Keys cubic with a = -0.5, in Pillow's operation order.
    w = np.where(x < 1.0, (1.5 * x - 2.5) * x * x + 1,
                 np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * -0.5, 0.0))
    w = np.where(k[None, :] < count[:, None], w, 0.0)
    total = np.zeros(out_size)
    for i in range(ksize):
        total = total + w[:, i]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    fixed = np.trunc(w * (1 << BITS) + np.where(w < 0, -0.5, 0.5)).astype(np.int64)
    index = np.minimum(first[:, None] + k[None, :], in_size - 1)
    return index, fixed


def _weight_matrix(in_size: int, out_size: int, device: str) -> torch.Tensor:
    """
    One axis's taps as a dense float64 ``[out, in]`` matrix of the fixed-point weights.

    A product with it is Pillow's integer convolution exactly: every weight and pixel is
    an integer, each product is below 2^31 and every sum below 2^53, so float64 adds them
    without rounding. Two matrix products replace a gather per tap and axis (about 40
    small kernels per frame on a GPU, each with its launch cost on the caller's thread).
    """
    index, fixed = taps(in_size, out_size)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.broadcast_to(np.arange(out_size)[:, None], index.shape)
    np.add.at(matrix, (rows, index), fixed.astype(np.float64))  # clamped taps weigh 0
    return torch.from_numpy(matrix).to(device)


def _vertical_first(shrink_h: int, shrink_w: int) -> bool:
    """
    Tell whether Pillow runs the vertical pass first (the order changes the rounding).

    Pillow up to 12 always resamples rows first; Pillow 13 starts with the columns when
    the height shrinks by more than twice as many pixels as the width. We follow the
    installed Pillow so that files and live frames agree.
    """
    return PILLOW_MAJOR >= 13 and shrink_h > 0 and shrink_h > 2 * shrink_w


def _rounded(acc: torch.Tensor) -> torch.Tensor:
    """
    Pillow's fixed-point step, in place: add half, shift right by ``BITS``, clip to 0..255.

    The shift is a floor division, also for the negative sums of the bicubic's negative
    lobes; in float64 every step is exact (integers below 2^53, a power-of-two scale).
    """
    return acc.add_(float(1 << (BITS - 1))).mul_(1.0 / (1 << BITS)).floor_().clamp_(0, 255)


class Resampler:
    """
    The torch resampler, with the weight matrices and value table it made kept per device.

    Bounded: the ``MAX_MATRICES`` most recently used matrices stay. Thread-safe.
    """

    MAX_MATRICES = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._matrices: OrderedDict = OrderedDict()  # (in, out, device) -> [out, in]
        self._tables: dict = {}  # device -> TO_UNIT there

    def clear(self) -> None:
        """Let every kept matrix and table go (what a graph reads must be held by it)."""
        with self._lock:
            self._matrices.clear()
            self._tables.clear()

    def weights(self, in_size: int, out_size: int, device: str) -> torch.Tensor:
        """Return one axis's float64 ``[out, in]`` weight matrix on ``device``."""
        key = (in_size, out_size, device)
        with self._lock:
            matrix = self._matrices.get(key)
            if matrix is not None:
                self._matrices.move_to_end(key)
                return matrix
        matrix = _weight_matrix(in_size, out_size, device)
        with self._lock:
            self._matrices[key] = matrix
            while len(self._matrices) > self.MAX_MATRICES:
                self._matrices.popitem(last=False)
        return matrix

    def table(self, device: str) -> torch.Tensor:
        """Return the uint8 -> [0, 1] value table on ``device``."""
        with self._lock:
            table = self._tables.get(device)
            if table is None:
                table = self._tables[device] = TO_UNIT.to(device)
            return table

    def __call__(self, frame: torch.Tensor, plan: FrameTransform) -> torch.Tensor:
        """
        Resample a uint8 ``[H, W, C]`` frame on its device onto ``plan``'s grid, as Pillow.

        Channel-first float64 throughout: each pass is one matrix product with no copy of
        the image (the widened frame and one pass's product are the most alive at once,
        see :func:`resample_graph_bytes`), its rounding in place.
        """
        x = frame.permute(2, 0, 1).to(torch.float64, memory_format=torch.contiguous_format)
        (new_h, new_w), top = plan.resized_hw, plan.offset_xy[1]
        kept = slice(top, top + plan.model_hw[0])
        in_h, in_w = x.shape[1], x.shape[2]
        if new_h == in_h:
            x = x[:, kept]
            if new_w != in_w:
                x = self._columns(x, new_w)
        elif new_w != in_w and _vertical_first(in_h - new_h, in_w - new_w):
            x = self._columns(self._rows(x, new_h, kept), new_w)
        else:
            if new_w != in_w:
                x = self._columns(x, new_w)
            x = self._rows(x, new_h, kept)
        out = self.table(str(x.device))[x.to(torch.int64)]  # 0..255 -> [0, 1] as the files
        return out if out.shape[0] == 3 else out.expand(3, -1, -1).contiguous()  # grey

    def inputs_of(self, frame: torch.Tensor, plan: FrameTransform) -> tuple:
        """
        Return the kept tensors a call for ``frame`` and ``plan`` reads.

        A CUDA graph holds their addresses, not the tensors, and this resampler may let
        them go: each graph keeps its own references.
        """
        device = str(frame.device)
        (new_h, new_w), (h, w) = plan.resized_hw, frame.shape[:2]
        held = [self.table(device)]
        if new_w != w:
            held.append(self.weights(w, new_w, device))
        if new_h != h:
            held.append(self.weights(h, new_h, device))
        return tuple(held)

    def _rows(self, x: torch.Tensor, out_size: int, kept: slice) -> torch.Tensor:
        """Resample the rows of float64 integer-valued ``[C, H, W]``; ``kept``: output rows."""
        weight = self.weights(x.shape[1], out_size, str(x.device))[kept]
        return _rounded(torch.bmm(weight.expand(x.shape[0], -1, -1), x))

    def _columns(self, x: torch.Tensor, out_size: int) -> torch.Tensor:
        """Resample the columns of float64 integer-valued ``[C, H, W]``."""
        return _rounded(x @ self.weights(x.shape[2], out_size, str(x.device)).T)


def resample_graph_bytes(input_hw: Tuple[int, int], resized_hw: Tuple[int, int],
                         model_rows: Optional[int] = None, channels: int = 3) -> int:
    """
    Upper bound of the device memory one graphed resize keeps.

    Its uint8 input, the float64 weight matrices of its two axes (kept) and its graph's
    pool: at most the widened float64 frame and one pass's float64 product are alive at
    once (with the row weights expanded per channel), then the output's int64 index and
    its float32 values (and a grey frame's copy to three channels). ``model_rows``: the
    rows kept after a centre crop (default: all). Not in it: cuBLAS's workspace of the
    capture stream, shared with the model's graphs
    (:class:`~lingbot_ros.model.graphs.CaptureStreams`).
    """
    (h, w), (new_h, new_w) = input_hw, resized_hw
    rows = new_h if model_rows is None else model_rows
    c = channels
    wide = 8 * c * (h * w + max(h * new_w, rows * w) + rows * h)
    matrices = 8 * (new_w * w + new_h * h)  # the two axes' weight matrices (kept, per size)
    return int(wide + matrices + h * w * c + 16 * 3 * rows * new_w)
