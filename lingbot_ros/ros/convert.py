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
Camera messages to uint8 RGB arrays, without cv_bridge where it is not installed.

The functions read only the message fields (``height``, ``width``, ``encoding``,
``step``, ``is_bigendian``, ``data`` / ``format``, ``data``), so they work on the rclpy
messages and on any object with the same fields. ``rgb8`` and ``rgba8`` come back as
views of the message buffer (no copy; possibly strided); every other encoding costs
one OpenCV conversion pass. A frame that cannot be used raises a subclass of
:class:`ImageRejected` whose ``reason`` is a short counter key.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import cv2
import numpy as np


class ImageRejected(ValueError):
    """A frame that cannot be turned into an RGB image; ``reason`` names the counter."""

    reason = 'rejected'


class UnknownEncoding(ImageRejected):
    """The encoding (or compressed format) is not one we can read."""

    reason = 'encoding'


class BadSize(ImageRejected):
    """Zero, odd (where the encoding needs even) or inconsistent dimensions / step."""

    reason = 'size'


class TruncatedData(ImageRejected):
    """Fewer bytes than ``step * height`` (or a compressed stream cut short)."""

    reason = 'truncated'


class CorruptImage(ImageRejected):
    """Compressed data that does not decode to an image."""

    reason = 'corrupt'


# encoding -> (channels, bytes per channel). Aliases follow sensor_msgs/image_encodings.
_RAW = {
    'rgb8': (3, 1), 'bgr8': (3, 1), 'rgba8': (4, 1), 'bgra8': (4, 1),
    'mono8': (1, 1), '8UC1': (1, 1), '8UC3': (3, 1), '8UC4': (4, 1),
    'mono16': (1, 2), '16UC1': (1, 2),
    'yuv422': (2, 1), 'uyvy': (2, 1), 'yuv422_yuy2': (2, 1), 'yuyv': (2, 1),
    'bayer_rggb8': (1, 1), 'bayer_bggr8': (1, 1), 'bayer_gbrg8': (1, 1),
    'bayer_grbg8': (1, 1), 'bayer_rggb16': (1, 2), 'bayer_bggr16': (1, 2),
    'bayer_gbrg16': (1, 2), 'bayer_grbg16': (1, 2),
}
SUPPORTED_ENCODINGS = tuple(sorted(_RAW))
SUPPORTED_FORMATS = ('jpeg', 'png')

# ROS 'yuv422' is UYVY byte order; 'yuv422_yuy2' is YUYV (image_encodings.hpp).
_YUV = {'yuv422': cv2.COLOR_YUV2RGB_UYVY, 'uyvy': cv2.COLOR_YUV2RGB_UYVY,
        'yuv422_yuy2': cv2.COLOR_YUV2RGB_YUYV, 'yuyv': cv2.COLOR_YUV2RGB_YUYV}


def _bayer_code(pattern: str) -> int:
    # OpenCV >= 4.6 has names that match the sensor layout; older names are shifted.
    legacy = {'rggb': 'BG', 'bggr': 'RG', 'gbrg': 'GR', 'grbg': 'GB'}
    name = f'COLOR_Bayer{pattern.upper()}2RGB'
    return getattr(cv2, name, None) or getattr(cv2, f'COLOR_Bayer{legacy[pattern]}2RGB')


def _buffer(data: Any) -> np.ndarray:
    """View message bytes as uint8 without copying (array.array, bytes, memoryview, ndarray)."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except TypeError:  # a list of ints (hand-built messages)
        return np.asarray(data, dtype=np.uint8)


def _rows(msg: Any, channels: int, depth: int) -> np.ndarray:
    """Validate sizes and return the [H, W * channels * depth] uint8 view of the pixels."""
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise BadSize(f'image size {width}x{height} is empty')
    row = width * channels * depth
    if step < row:
        raise BadSize(f'step {step} is smaller than width*bytes_per_pixel = {row} '
                      f'({msg.encoding}, width {width})')
    buf = _buffer(msg.data)
    if buf.size < step * height:
        raise TruncatedData(f'{buf.size} bytes for a {width}x{height} {msg.encoding} image '
                            f'with step {step} (need {step * height})')
    return buf[:step * height].reshape(height, step)[:, :row]


def _to8(rows: np.ndarray, width: int, channels: int, bigendian: bool) -> np.ndarray:
    """16-bit rows to 8 bits (the high byte: full-range scaling, stable across frames)."""
    dtype = np.dtype('>u2' if bigendian else '<u2')
    wide = np.ascontiguousarray(rows).view(dtype).reshape(rows.shape[0], width, channels)
    return (wide >> 8).astype(np.uint8)


def _raw_to_rgb(msg: Any) -> np.ndarray:
    enc = str(msg.encoding)
    if enc not in _RAW:
        raise UnknownEncoding(f'encoding {enc!r} is not supported; expected one of '
                              f'{", ".join(SUPPORTED_ENCODINGS)}')
    channels, depth = _RAW[enc]
    width = int(msg.width)
    if enc in _YUV and width % 2:
        raise BadSize(f'{enc} needs an even width; got {width}x{msg.height}')
    if enc.startswith('bayer_') and (width % 2 or int(msg.height) % 2):
        raise BadSize(f'{enc} needs an even width and height; got {width}x{msg.height}')
    rows = _rows(msg, channels, depth)
    height = rows.shape[0]
    if depth == 2:
        pix = _to8(rows, width, channels, bool(msg.is_bigendian))
    else:
        pix = rows.reshape(height, width, channels)
    if enc == 'rgb8':
        return pix
    if enc in ('rgba8',):
        return pix[..., :3]
    if enc in ('bgr8', '8UC3'):
        return cv2.cvtColor(pix, cv2.COLOR_BGR2RGB)
    if enc in ('bgra8', '8UC4'):
        return cv2.cvtColor(pix, cv2.COLOR_BGRA2RGB)
    if enc in ('mono8', '8UC1', 'mono16', '16UC1'):
        return cv2.cvtColor(pix[..., 0], cv2.COLOR_GRAY2RGB)
    if enc in _YUV:
        return cv2.cvtColor(np.ascontiguousarray(pix), _YUV[enc])
    pattern = enc[len('bayer_'):len('bayer_') + 4]
    return cv2.cvtColor(np.ascontiguousarray(pix[..., 0]), _bayer_code(pattern))


def _compressed_kind(fmt: str, buf: np.ndarray) -> str:
    fmt = fmt.lower()
    if 'compresseddepth' in fmt.replace(' ', ''):
        raise UnknownEncoding(f'format {fmt!r} is a depth stream, not a camera image')
    if buf[:3].tobytes() == b'\xff\xd8\xff':
        return 'jpeg'
    if buf[:8].tobytes() == b'\x89PNG\r\n\x1a\n':
        return 'png'
    for kind, keys in (('jpeg', ('jpeg', 'jpg')), ('png', ('png',))):
        if any(k in fmt for k in keys):
            raise CorruptImage(f'format says {kind} but the data does not start like one '
                               f'({buf.size} bytes)')
    raise UnknownEncoding(f'compressed format {fmt!r} is not supported; expected one of '
                          f'{", ".join(SUPPORTED_FORMATS)}')


def compressed_to_rgb(msg: Any) -> np.ndarray:
    """Decode a ``sensor_msgs/CompressedImage`` (jpeg or png) to [H, W, 3] uint8 RGB."""
    buf = _buffer(msg.data)
    if buf.size == 0:
        raise TruncatedData('compressed image with no data')
    kind = _compressed_kind(str(msg.format), buf)
    # A stream cut short still decodes partially (grey rows); refuse it by its end marker.
    if kind == 'jpeg' and buf[-2:].tobytes() != b'\xff\xd9':
        raise TruncatedData(f'JPEG of {buf.size} bytes has no end-of-image marker')
    if kind == 'png' and buf[-8:-4].tobytes() != b'IEND':
        raise TruncatedData(f'PNG of {buf.size} bytes has no IEND chunk')
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise CorruptImage(f'{kind} does not decode: {exc}') from exc
    if img is None or img.ndim != 3 or img.shape[0] == 0 or img.shape[1] == 0:
        raise CorruptImage(f'{kind} of {buf.size} bytes does not decode to an image')
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def _load_cv_bridge() -> Optional[Callable[[Any], np.ndarray]]:
    """Return the ROS 2 cv_bridge converter when installed (never PyPI's ROS 1 port)."""
    try:
        from cv_bridge import CvBridge  # noqa: I900 (optional, ROS distro only)
    except Exception:  # noqa: BLE001 (any import failure means "not available")
        return None
    try:  # PyPI's 'cv-bridge' 1.x is a ROS 1 port (16UC1 mapped wrongly): never use it
        from importlib.metadata import version
        if version('cv-bridge').split('.')[0] in ('0', '1'):
            return None
    except Exception:  # noqa: BLE001,S110 (no pip metadata: the ROS 2 distro package)
        pass
    bridge = CvBridge()

    def convert(msg: Any) -> np.ndarray:
        try:
            return bridge.imgmsg_to_cv2(msg, desired_encoding='rgb8')
        except Exception as exc:  # noqa: BLE001 (CvBridgeError and cv2.error alike)
            raise UnknownEncoding(f'cv_bridge: {exc}') from exc
    return convert


class ImageConverter:
    """Turns Image / CompressedImage messages into RGB arrays; picks cv_bridge if present."""

    def __init__(self, use_cv_bridge: bool = True) -> None:
        self._bridge = _load_cv_bridge() if use_cv_bridge else None

    @property
    def backend(self) -> str:
        return 'cv_bridge' if self._bridge is not None else 'numpy'

    def image(self, msg: Any) -> np.ndarray:
        """Convert a ``sensor_msgs/Image``; our size checks run first either way."""
        if self._bridge is not None and str(msg.encoding) in _RAW:
            channels, depth = _RAW[str(msg.encoding)]
            _rows(msg, channels, depth)
            return _checked(self._bridge(msg))
        return _checked(_raw_to_rgb(msg))

    def compressed(self, msg: Any) -> np.ndarray:
        return _checked(compressed_to_rgb(msg))


def image_to_rgb(msg: Any) -> np.ndarray:
    """Convert a ``sensor_msgs/Image`` with our own numpy path (no cv_bridge)."""
    return _checked(_raw_to_rgb(msg))


def _checked(img: np.ndarray) -> np.ndarray:
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise UnknownEncoding(f'conversion gave {img.dtype} {img.shape}, not uint8 HxWx3')
    return img
