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
Images -> model input, exactly as the reference prepares them, for files and live frames.

The reference resizes with Pillow's bicubic filter to width ``image_size`` and a height
rounded to the patch size, then keeps the centre ``image_size`` rows of taller results,
and scales to [0, 1]. Files go through Pillow itself. Live frames may instead use a
torch re-implementation of Pillow's fixed-point resampler (integer arithmetic, so it is
bit-identical on any device) that runs where the model runs; either way a camera frame
and the same pixels read from a file give the same tensor.

Every result comes with a :class:`FrameTransform` that maps model-grid intrinsics back
to input pixels.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
import functools
import importlib.metadata
import io
import math
from pathlib import Path
import threading
from typing import Iterator, List, Optional, Sequence, Tuple, Union
import warnings

import numpy as np
import torch

from ..model.graphs import capture_stream
from ..model.pose import intrinsics_to_input

IMAGE_EXTENSIONS = ('.jpg', '.jpeg', '.png')
_BITS = 22  # Pillow's fixed-point precision for 8-bit resampling
_LUT = torch.arange(256, dtype=torch.float32) / 255  # uint8 -> [0, 1], as ToTensor does

PathLike = Union[str, Path]


class ResizeMethod(str, Enum):
    """Where a live frame is resampled onto the model grid; all give the same values."""

    AUTO = 'auto'    # PIL for a CPU device, TORCH for any other
    PIL = 'pil'      # Pillow on the host, as the reference (and every file) does
    TORCH = 'torch'  # the same fixed-point resampler in torch, on the model's device


@dataclass(frozen=True)
class FrameTransform:
    """
    How an input image became the model grid: a resize, then a crop or a pad.

    Continuous pixel coordinates (edges on integers): resized = input * scale, and
    model = resized - ``offset_xy`` (positive offset: rows/columns cropped; negative: pad).
    """

    input_hw: Tuple[int, int]
    resized_hw: Tuple[int, int]
    offset_xy: Tuple[int, int]
    model_hw: Tuple[int, int]

    @property
    def scale_xy(self) -> Tuple[float, float]:
        """Model pixels per input pixel, (x, y)."""
        return (self.resized_hw[1] / self.input_hw[1], self.resized_hw[0] / self.input_hw[0])

    def intrinsics_to_input(self, k: torch.Tensor) -> torch.Tensor:
        """Map a model-grid pinhole ``[..., 3, 3]`` to the input image's pixels."""
        return intrinsics_to_input(k, self.scale_xy, self.offset_xy)

    def padded(self, model_hw: Tuple[int, int]) -> 'FrameTransform':
        """Return the transform after centring this grid on a larger ``model_hw`` canvas."""
        top = (model_hw[0] - self.model_hw[0]) // 2
        left = (model_hw[1] - self.model_hw[1]) // 2
        return FrameTransform(self.input_hw, self.resized_hw,
                              (self.offset_xy[0] - left, self.offset_xy[1] - top), model_hw)


def plan_transform(input_hw: Tuple[int, int], image_size: int = 518,
                   patch_size: int = 14) -> FrameTransform:
    """
    Choose the model grid for an input size (the reference's ``crop`` mode).

    Width becomes ``image_size``; height ``round(h * image_size / w / patch) * patch``
    (Python rounding); results taller than ``image_size`` keep their centre rows.
    """
    h, w = int(input_hw[0]), int(input_hw[1])
    if h < 1 or w < 1:
        raise ValueError(f'image size {w}x{h} is invalid: expected at least 1x1')
    if image_size < patch_size or image_size % patch_size:
        raise ValueError(f'image_size={image_size} is invalid: expected a positive multiple '
                         f'of patch_size ({patch_size})')
    new_h = round(h * (image_size / w) / patch_size) * patch_size
    if new_h < patch_size:
        raise ValueError(f'image {w}x{h} is too wide: its height rounds to 0 patches')
    top = (new_h - image_size) // 2 if new_h > image_size else 0
    return FrameTransform((h, w), (new_h, image_size), (0, top),
                          (min(new_h, image_size), image_size))


# --- files (Pillow) ----------------------------------------------------------------------


def _pil():
    try:
        from PIL import Image, ImageOps
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError('reading image files needs Pillow (pip install Pillow, '
                          'or the python3-pil package)') from exc
    return Image, ImageOps


def _open_rgb(source, name: str):
    """Open like the reference: EXIF orientation, RGBA over white, then RGB."""
    image_mod, image_ops = _pil()
    try:
        img = image_mod.open(source)
        img = image_ops.exif_transpose(img)
        if img.mode == 'RGBA':
            white = image_mod.new('RGBA', img.size, (255, 255, 255, 255))
            img = image_mod.alpha_composite(white, img)
        return img.convert('RGB')
    except (OSError, ValueError, SyntaxError) as exc:
        raise ValueError(f'{name}: not a readable image ({exc})') from exc


def load_rgb(path: PathLike) -> np.ndarray:
    """Read an image file as ``uint8 [H, W, 3]`` RGB, oriented and flattened as upstream."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{path}: no such image file')
    return np.asarray(_open_rgb(path, str(path)))


def _pil_to_model(img, plan: FrameTransform) -> torch.Tensor:
    image_mod, _ = _pil()
    new_h, new_w = plan.resized_hw
    resized = img.resize((new_w, new_h), image_mod.Resampling.BICUBIC)
    arr = np.asarray(resized)[plan.offset_xy[1]:plan.offset_xy[1] + plan.model_hw[0]]
    return _LUT[torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
                .long()]


def _stack_padded(images: List[torch.Tensor], plans: List[FrameTransform]
                  ) -> Tuple[torch.Tensor, List[FrameTransform]]:
    """Centre differently sized grids on the largest one, filling with white (1.0)."""
    hw = (max(p.model_hw[0] for p in plans), max(p.model_hw[1] for p in plans))
    out = torch.ones((len(images), 3) + hw, dtype=torch.float32)
    done = []
    for i, (img, plan) in enumerate(zip(images, plans)):
        top, left = (hw[0] - img.shape[1]) // 2, (hw[1] - img.shape[2]) // 2
        out[i, :, top:top + img.shape[1], left:left + img.shape[2]] = img
        done.append(plan.padded(hw))
    return out, done


def load_images_with_transforms(paths: Sequence[PathLike], image_size: int = 518,
                                patch_size: int = 14
                                ) -> Tuple[torch.Tensor, List[FrameTransform]]:
    """Load and preprocess image files: ``float32 [S, 3, H, W]`` in [0, 1] and transforms."""
    if not paths:
        raise ValueError('no images given')
    images, plans = [], []
    for path in paths:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f'{path}: no such image file')
        img = _open_rgb(path, str(path))
        plan = plan_transform((img.height, img.width), image_size, patch_size)
        images.append(_pil_to_model(img, plan))
        plans.append(plan)
    return _stack_padded(images, plans)


def load_images(paths: Sequence[PathLike], image_size: int = 518,
                patch_size: int = 14) -> torch.Tensor:
    """Load and preprocess image files into ``float32 [S, 3, H, W]`` in [0, 1]."""
    return load_images_with_transforms(paths, image_size, patch_size)[0]


def list_images(folder: PathLike) -> List[Path]:
    """Image files (.jpg/.jpeg/.png, any case) of a folder, sorted by name."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f'{folder}: no such folder')
    files = sorted(p for p in folder.iterdir()
                   if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise ValueError(f'{folder}: no .jpg/.jpeg/.png images in this folder')
    return files


def load_image_folder(folder: PathLike, image_size: int = 518,
                      patch_size: int = 14) -> torch.Tensor:
    """Preprocess every image of a folder (sorted by name) into ``float32 [S, 3, H, W]``."""
    return load_images(list_images(folder), image_size, patch_size)


def video_frames(path: PathLike, fps: float = 10.0) -> Iterator[np.ndarray]:
    """
    Yield ``uint8 [H, W, 3]`` RGB frames of a video, sampled and re-encoded as upstream.

    Keeps every ``round(source_fps / fps)``-th frame and passes it through a default
    OpenCV JPEG encode and a Pillow decode, which is what the reference's model sees.
    """
    import cv2

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f'{path}: no such video file')
    if fps <= 0:
        raise ValueError(f'fps={fps} is invalid: expected > 0')
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f'{path}: OpenCV cannot open this video')
    try:
        interval = max(1, round((cap.get(cv2.CAP_PROP_FPS) or 30) / fps))
        index = 0
        while True:
            ok, frame = cap.read()
            if not ok:
                break
            if index % interval == 0:
                ok, jpeg = cv2.imencode('.jpg', frame)
                if not ok:
                    raise ValueError(f'{path}: frame {index} cannot be JPEG-encoded')
                yield np.asarray(_open_rgb(io.BytesIO(jpeg.tobytes()), f'{path}[{index}]'))
            index += 1
    finally:
        cap.release()


def load_video(path: PathLike, fps: float = 10.0, image_size: int = 518,
               patch_size: int = 14) -> torch.Tensor:
    """Preprocess a video's sampled frames into ``float32 [S, 3, H, W]``."""
    frames = [preprocess_frame(f, 'cpu', image_size, patch_size, method=ResizeMethod.PIL)[0]
              for f in video_frames(path, fps)]
    if not frames:
        raise ValueError(f'{path}: the video has no readable frames')
    return torch.stack(frames)


# --- live frames ----------------------------------------------------------------------


def _taps(in_size: int, out_size: int) -> Tuple[np.ndarray, np.ndarray]:
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
    taps = np.arange(ksize)
    x = np.abs((taps[None, :] + first[:, None] - center[:, None] + 0.5) * (1.0 / filter_scale))
    # Keys cubic with a = -0.5, in Pillow's operation order.
    w = np.where(x < 1.0, (1.5 * x - 2.5) * x * x + 1,
                 np.where(x < 2.0, (((x - 5) * x + 8) * x - 4) * -0.5, 0.0))
    w = np.where(taps[None, :] < count[:, None], w, 0.0)
    total = np.zeros(out_size)
    for k in range(ksize):
        total = total + w[:, k]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    fixed = np.trunc(w * (1 << _BITS) + np.where(w < 0, -0.5, 0.5)).astype(np.int64)
    index = np.minimum(first[:, None] + taps[None, :], in_size - 1)
    return index, fixed


@functools.lru_cache(maxsize=32)
def _weights(in_size: int, out_size: int, device: str) -> torch.Tensor:
    """
    One axis's taps as a dense float64 ``[out, in]`` matrix of the fixed-point weights.

    A product with it is Pillow's integer convolution exactly: every weight and pixel is
    an integer, each product is below 2^31 and every sum below 2^53, so float64 adds them
    without rounding. Two matrix products replace a gather per tap and axis (about 40
    small kernels per frame on the GPU, each with its launch cost on the worker's thread).
    """
    index, fixed = _taps(in_size, out_size)
    matrix = np.zeros((out_size, in_size), dtype=np.float64)
    rows = np.broadcast_to(np.arange(out_size)[:, None], index.shape)
    np.add.at(matrix, (rows, index), fixed.astype(np.float64))  # clamped taps weigh 0
    return torch.from_numpy(matrix).to(device)


@functools.lru_cache(maxsize=1)
def _pillow_major() -> int:
    try:
        return int(importlib.metadata.version('pillow').split('.')[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return 13


def _vertical_first(shrink_h: int, shrink_w: int) -> bool:
    """
    Tell whether Pillow runs the vertical pass first (the order changes the rounding).

    Pillow up to 12 always resamples rows first; Pillow 13 starts with the columns when
    the height shrinks by more than twice as many pixels as the width. We follow the
    installed Pillow so that files and live frames agree.
    """
    return _pillow_major() >= 13 and shrink_h > 0 and shrink_h > 2 * shrink_w


def _rounded(acc: torch.Tensor) -> torch.Tensor:
    """
    Pillow's fixed-point step, in place: add half, shift right by ``_BITS``, clip to 0..255.

    The shift is a floor division, also for the negative sums of the bicubic's negative
    lobes; in float64 every step is exact (integers below 2^53, a power-of-two scale).
    """
    return acc.add_(float(1 << (_BITS - 1))).mul_(1.0 / (1 << _BITS)).floor_().clamp_(0, 255)


def _resample_rows(x: torch.Tensor, out_size: int, kept: slice) -> torch.Tensor:
    """Resample the rows of float64 integer-valued ``[C, H, W]``; ``kept``: output rows."""
    weight = _weights(x.shape[1], out_size, str(x.device))[kept]
    return _rounded(torch.bmm(weight.expand(x.shape[0], -1, -1), x))


def _resample_columns(x: torch.Tensor, out_size: int) -> torch.Tensor:
    """Resample the columns of float64 integer-valued ``[C, H, W]``."""
    return _rounded(x @ _weights(x.shape[2], out_size, str(x.device)).T)


def _check_frame(rgb: Union[np.ndarray, torch.Tensor]) -> Union[np.ndarray, torch.Tensor]:
    """Validate a uint8 RGB (or grey) frame; return it as HxWx3 or HxWx1, unconverted."""
    if isinstance(rgb, np.ndarray):
        ok_type = rgb.dtype == np.uint8
    else:
        ok_type = isinstance(rgb, torch.Tensor) and rgb.dtype == torch.uint8
    if not ok_type:
        kind = getattr(rgb, 'dtype', type(rgb).__name__)
        raise ValueError(f'frame type {kind} is invalid: expected a uint8 array or tensor')
    if rgb.ndim == 2:
        rgb = rgb[:, :, None]
    if rgb.ndim != 3 or rgb.shape[2] not in (1, 3) or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f'frame shape {tuple(rgb.shape)} is invalid: expected HxWx3 RGB '
                         '(or HxW grey)')
    return rgb


class _PinnedUpload:
    """
    Reused page-locked buffers per frame shape and dtype, so a frame goes up asynchronously.

    From pageable memory ``.to('cuda')`` returns only once the copy is done, and the copy
    runs on the device's stream behind every kernel queued before it: with a frame
    queued ahead, the host then waits for that whole frame before it can prepare the
    next one, and the device idles while it does (1.6 ms a frame in a trace of the
    benchmark on the H200). The frame is copied into a buffer on the host instead and
    uploaded without waiting; an event recorded after the upload guards the buffer until
    the device has read it. Each key has ``RING`` buffers used in turn: with frames
    queued ahead an upload waits on the device behind the frames before it, and reusing
    the last buffer would make the next frame wait for all of them on the host. Bounded:
    at most ``MAX_SHAPES`` keys, the oldest dropped first. Where page-locked memory
    cannot be had (a container's locked-memory limit), frames go up the plain way.
    Frames are numpy arrays (a camera's) or CPU tensors (a stack run as a whole).
    """

    MAX_SHAPES = 4
    RING = 4  # > frames that can be queued on the device at once (one per camera, +1)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rings: dict = {}  # (shape, dtype, device) -> ([pinned tensor, event] list, turn)
        self.unavailable: Optional[str] = None  # why pinning failed, once it has

    def __call__(self, frame: Union[np.ndarray, torch.Tensor], device: torch.device,
                 into: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Return ``frame`` on ``device``; with ``into`` (on ``device``), copied into it."""
        src = frame if isinstance(frame, torch.Tensor) else _from_numpy(frame)
        key = (tuple(src.shape), src.dtype, str(device))
        with self._lock:
            ring = self._rings.pop(key, None)
            if ring is None and self.unavailable is None:
                while len(self._rings) >= self.MAX_SHAPES:
                    self._rings.pop(next(iter(self._rings)))
                try:
                    ring = [[[torch.empty(src.shape, dtype=src.dtype, pin_memory=True),
                              None] for _ in range(self.RING)], 0]
                except RuntimeError as exc:
                    self.unavailable = str(exc).splitlines()[0] if str(exc) else repr(exc)
            if ring is None:
                return src.to(device) if into is None else into.copy_(src)
            self._rings[key] = ring  # the most recently used last
            entries, turn = ring
            ring[1] = (turn + 1) % len(entries)
            entry = entries[turn]
            buf, uploaded = entry
            if uploaded is not None:
                uploaded.synchronize()  # that buffer's last upload has left it
            _host_copy(buf, src)
            out = buf.to(device, non_blocking=True) if into is None \
                else into.copy_(buf, non_blocking=True)
            entry[1] = torch.cuda.Event()
            entry[1].record(torch.cuda.current_stream(device))
            return out


def _host_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """
    Copy a frame between host tensors on this thread, the GIL held (numpy's copy).

    ``Tensor.copy_`` may split a frame's copy over PyTorch's intra-op threads, which sleep
    between a camera's frames. With it (253f208 to 1a6a323) the live node's ``prepare``
    stage took 5.8-5.9 ms p50 on an H200 and an H100, where it had taken 1.5 and 0.6 ms
    with numpy's copy, while the same resize alone in a loop took 0.13 ms: the copy is
    the suspect (the other changes to that path were measured alone), numpy's is back.
    """
    try:
        np.copyto(dst.numpy(), src.numpy())
    except TypeError:  # a dtype numpy lacks (bfloat16): PyTorch's copy
        dst.copy_(src)


_UPLOAD = _PinnedUpload()


def upload(frame: torch.Tensor, device: Union[str, torch.device]) -> torch.Tensor:
    """
    Return ``frame`` on ``device``; a CPU tensor goes to CUDA through a page-locked buffer.

    The host does not wait for the device (see :class:`_PinnedUpload`), so frames queued
    ahead keep the device busy. Elsewhere this is ``frame.to(device)``.
    """
    device = torch.device(device)
    if device.type == 'cuda' and frame.device.type == 'cpu':
        return _UPLOAD(frame, device)
    return frame.to(device)


def _to_device(frame: Union[np.ndarray, torch.Tensor], device: torch.device) -> torch.Tensor:
    """Return a uint8 ``[H, W, C]`` frame on ``device`` (never written to)."""
    if isinstance(frame, np.ndarray) and device.type == 'cuda':
        return _UPLOAD(frame, device)
    if isinstance(frame, np.ndarray):
        frame = _from_numpy(frame)
    return frame.to(device, non_blocking=True)


def _from_numpy(frame: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # read-only buffers (ROS messages, PIL) are fine here
        warnings.simplefilter('ignore', UserWarning)
        return torch.from_numpy(frame)


def _resize_method(method: Union[ResizeMethod, str]) -> ResizeMethod:
    """Return the member ``method`` is or names (ValueError naming the allowed ones)."""
    try:
        return ResizeMethod(method)  # a member, or the value of one
    except ValueError:
        names = [repr(m.value) for m in ResizeMethod]
        raise ValueError(f"method={method!r} is invalid: expected {', '.join(names[:-1])} or "
                         f'{names[-1]}') from None


def preprocess_frame(rgb: Union[np.ndarray, torch.Tensor],
                     device: Union[str, torch.device] = 'cpu', image_size: int = 518,
                     patch_size: int = 14,
                     method: Union[ResizeMethod, str] = ResizeMethod.AUTO,
                     graphed: bool = False) -> Tuple[torch.Tensor, FrameTransform]:
    """
    Turn one ``uint8 [H, W, 3]`` RGB frame into the model input ``float32 [3, h, w]``.

    The grid follows :func:`plan_transform`. ``method``: ``'pil'`` resizes with Pillow on
    the host, ``'torch'`` runs the same integer resampler on ``device``; ``'auto'`` picks
    Pillow for a CPU device. Both give the file path's values bit for bit. ``graphed``:
    a numpy frame resampled on a CUDA device replays its shape's CUDA graph
    (:class:`_GraphedResampler`; the same values, a fraction of the host's time).
    """
    device = torch.device(device)
    frame = _check_frame(rgb)
    plan = plan_transform((frame.shape[0], frame.shape[1]), image_size, patch_size)
    method = _resize_method(method)
    if method is ResizeMethod.AUTO:
        method = ResizeMethod.PIL if device.type == 'cpu' else ResizeMethod.TORCH
    if method is ResizeMethod.PIL:
        image_mod, _ = _pil()
        arr = frame.cpu().numpy() if isinstance(frame, torch.Tensor) else frame
        arr = np.ascontiguousarray(np.broadcast_to(arr, arr.shape[:2] + (3,)))
        img = image_mod.fromarray(arr)
        return _pil_to_model(img, plan).to(device), plan
    if graphed and device.type == 'cuda' and isinstance(frame, np.ndarray):
        out = _GRAPHS.run(frame, plan, device)
        if out is not None:
            return out, plan
    return _resample_frame(_to_device(frame, device), plan), plan


def _resample_frame(frame: torch.Tensor, plan: FrameTransform) -> torch.Tensor:
    """
    Resample a uint8 ``[H, W, C]`` frame on its device onto ``plan``'s grid, as Pillow does.

    Channel-first float64 throughout: each pass is one matrix product with no copy of
    the image (the widened frame and one pass's product are the most alive at once, see
    :func:`resample_graph_bytes`), its rounding in place.
    """
    x = frame.permute(2, 0, 1).to(torch.float64, memory_format=torch.contiguous_format)
    (new_h, new_w), top = plan.resized_hw, plan.offset_xy[1]
    kept = slice(top, top + plan.model_hw[0])
    in_h, in_w = x.shape[1], x.shape[2]
    if new_h == in_h:
        x = x[:, kept]
        if new_w != in_w:
            x = _resample_columns(x, new_w)
    elif new_w != in_w and _vertical_first(in_h - new_h, in_w - new_w):
        x = _resample_columns(_resample_rows(x, new_h, kept), new_w)
    else:
        if new_w != in_w:
            x = _resample_columns(x, new_w)
        x = _resample_rows(x, new_h, kept)
    out = _lut(str(x.device))[x.to(torch.int64)]  # 0..255 -> [0, 1] as the file path
    return out if out.shape[0] == 3 else out.expand(3, -1, -1).contiguous()  # grey


@functools.lru_cache(maxsize=8)
def _lut(device: str) -> torch.Tensor:
    return _LUT.to(device)


class _GraphedResampler:
    """
    One frame shape's torch resampler, captured once as a CUDA graph and replayed.

    Eager, a frame's resize is a dozen launches and their Python on the thread that
    prepares frames (the live node's ``prepare`` stage: 1.5 ms p50 on the H200's host at
    15 Hz, 0.6 ms on an H100's), for tens of microseconds of the device's own work.
    Replayed, it is the frame's upload into a fixed buffer, one graph launch and a copy of
    the result (the graph overwrites its output at the next replay; the model keeps some
    frames).
    """

    def __init__(self, shape: tuple, plan: FrameTransform, device: torch.device) -> None:
        self.frame = torch.zeros(shape, dtype=torch.uint8, device=device)
        self.graph = torch.cuda.CUDAGraph()
        stream = capture_stream(device)  # shared: one cuBLAS workspace for every capture
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            _resample_frame(self.frame, plan)  # the taps' matrices and the LUT exist first
            self._held = _inputs_of(self.frame, plan)  # the graph reads them: never freed
            # not torch.cuda.graph(): it synchronizes the whole device first, and another
            # camera's frame may be in flight; other threads may wait on events meanwhile
            self.graph.capture_begin(capture_error_mode='thread_local')
            try:
                self.output = _resample_frame(self.frame, plan)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(stream)

    def __call__(self, frame: np.ndarray) -> torch.Tensor:
        _UPLOAD(frame, self.frame.device, into=self.frame)  # shape and dtype checked by copy_
        self.graph.replay()
        return self.output.clone()


def _inputs_of(frame: torch.Tensor, plan: FrameTransform) -> tuple:
    """
    Return the cached tensors :func:`_resample_frame` reads for ``frame`` and ``plan``.

    A graph holds their addresses, not the tensors: the caches may let them go (``_weights``
    keeps 32), so each graph keeps its own references.
    """
    device = str(frame.device)
    (new_h, new_w), (h, w) = plan.resized_hw, frame.shape[:2]
    held = [_lut(device)]
    if new_w != w:
        held.append(_weights(w, new_w, device))
    if new_h != h:
        held.append(_weights(h, new_h, device))
    return tuple(held)


def resample_graph_bytes(input_hw: Tuple[int, int], resized_hw: Tuple[int, int],
                         model_rows: Optional[int] = None, channels: int = 3) -> int:
    """
    Upper bound of the device memory one :class:`_GraphedResampler` keeps.

    Its uint8 input, the float64 weight matrices of its two axes (cached) and its graph's
    pool: at most the widened float64 frame and one pass's float64 product are alive at
    once (with the row weights expanded per channel), then the output's int64 index and
    its float32 values (and a grey frame's copy to three channels). ``model_rows``: the
    rows kept after a centre crop (default: all). Not in it: cuBLAS's workspace of the
    capture stream, shared with the model's graphs (:func:`capture_stream`).
    """
    (h, w), (new_h, new_w) = input_hw, resized_hw
    rows = new_h if model_rows is None else model_rows
    c = channels
    wide = 8 * c * (h * w + max(h * new_w, rows * w) + rows * h)
    taps = 8 * (new_w * w + new_h * h)  # the two axes' weight matrices (kept, per size)
    return int(wide + taps + h * w * c + 16 * 3 * rows * new_w)


class _Graphs:
    """The graphed resamplers of this process, by frame shape and grid; bounded, locked."""

    MAX_SHAPES = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._graphs: dict = {}  # (shape, plan, device) -> _GraphedResampler
        self.failed: Optional[str] = None  # why a capture failed (from then on: eager)

    def run(self, frame: np.ndarray, plan: FrameTransform,
            device: torch.device) -> Optional[torch.Tensor]:
        """Return the frame resampled by its shape's graph; None: resample it eagerly."""
        key = (frame.shape, plan, str(device))  # a checked frame: [H, W, 3] or [H, W, 1]
        with self._lock:  # one replay at a time: the graph's buffers are shared
            graphed = self._graphs.get(key)
            if graphed is None:
                if self.failed is not None:
                    return None
                while len(self._graphs) >= self.MAX_SHAPES:
                    self._graphs.pop(next(iter(self._graphs)))
                try:
                    graphed = _GraphedResampler(frame.shape, plan, device)
                except RuntimeError as exc:  # capture refused (memory too): eager from now
                    self.failed = str(exc).splitlines()[0] if str(exc) else repr(exc)
                    return None
                self._graphs[key] = graphed
            return graphed(frame)

    def status(self) -> str:
        """Say how frames are resized on the device, for diagnostics ('' before any)."""
        with self._lock:
            if self.failed is not None:
                return f'eager (capture failed: {self.failed})'
            return f'graphed ({len(self._graphs)} frame shapes)' if self._graphs else ''


_GRAPHS = _Graphs()


def resize_status() -> str:
    """Say how this process resizes live frames on a CUDA device ('' before the first)."""
    return _GRAPHS.status()
