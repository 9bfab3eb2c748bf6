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
Camera messages to uint8 RGB arrays, with or without cv_bridge, validated once.

Every raw ``sensor_msgs/Image`` goes through :func:`validate` first (a colour encoding,
not depth or disparity; known encoding, non-empty size, step, data length, even
width/height where YUV 4:2:2 or Bayer need it); only a valid frame reaches a converter,
whichever one it is (compressed ones: :func:`compressed_to_rgb` checks the format and
declared size first). The package's own numpy
path converts every advertised encoding. cv_bridge, where installed and asked for, takes
the encodings it converts to the very same pixels (:data:`CV_BRIDGE_ENCODINGS`, checked by
the tests against the numpy reference) in the row layouts it reads right
(:attr:`RawImage.bridgeable`); the rest stay on our path. ``rgb8`` and ``rgba8``
come back as views of the message buffer (no copy; possibly strided).

The functions read only the message fields (``height``, ``width``, ``encoding``,
``step``, ``is_bigendian``, ``data`` / ``format``, ``data``), so they work on rclpy
messages, rosbags messages and any object with the same fields. A frame that cannot be
used raises a subclass of :class:`ImageRejected` whose ``reason`` is its counter.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
import re
import struct
from typing import Any, Callable, Optional

import cv2
from lingbot_ros.ros.reasons import Rejection
import numpy as np


class ImageRejected(ValueError):
    """A frame that cannot be turned into an RGB image; ``reason`` names the counter."""

    reason = Rejection.ENCODING


class UnknownEncoding(ImageRejected):
    """The encoding (or compressed format) is not one we can read."""

    reason = Rejection.ENCODING


class DepthImage(ImageRejected):
    """Depth or disparity (16UC1, 32FC1 ...) where a colour image belongs: the wrong topic."""

    reason = Rejection.DEPTH_IMAGE


class BadSize(ImageRejected):
    """Zero, odd (where the encoding needs even) or inconsistent dimensions / step."""

    reason = Rejection.SIZE


class TooLarge(ImageRejected):
    """More pixels than the configured bound (for compressed data: as its header declares)."""

    reason = Rejection.TOO_LARGE


class TruncatedData(ImageRejected):
    """Fewer bytes than ``step * height`` (or a compressed stream cut short)."""

    reason = Rejection.TRUNCATED


class CorruptImage(ImageRejected):
    """Compressed data that does not decode to an image."""

    reason = Rejection.CORRUPT


class Pixels(Enum):
    """How the bytes of one pixel (or one 2x2 / 2x1 cell) are laid out."""

    RGB = 'rgb'
    BGR = 'bgr'
    RGBA = 'rgba'
    BGRA = 'bgra'
    MONO = 'mono'
    UYVY = 'uyvy'          # 4:2:2, U Y0 V Y1 (ROS 'yuv422')
    YUYV = 'yuyv'          # 4:2:2, Y0 U Y1 V (ROS 'yuv422_yuy2')
    BAYER_RGGB = 'rggb'
    BAYER_BGGR = 'bggr'
    BAYER_GBRG = 'gbrg'
    BAYER_GRBG = 'grbg'

    @property
    def is_yuv(self) -> bool:
        return self in (Pixels.UYVY, Pixels.YUYV)

    @property
    def is_bayer(self) -> bool:
        return self.name.startswith('BAYER_')


@dataclass(frozen=True)
class Encoding:
    """One sensor_msgs encoding: its pixel layout and sample size."""

    pixels: Pixels
    channels: int
    bytes_per_channel: int

    @property
    def needs_even_width(self) -> bool:
        return self.pixels.is_yuv or self.pixels.is_bayer

    @property
    def needs_even_height(self) -> bool:
        return self.pixels.is_bayer


def _bayer(pattern: Pixels) -> dict:
    name = pattern.value
    return {f'bayer_{name}8': Encoding(pattern, 1, 1), f'bayer_{name}16': Encoding(pattern, 1, 2)}


# Names follow sensor_msgs/image_encodings.hpp ('yuv422' is UYVY, 'yuv422_yuy2' YUYV).
ENCODINGS: dict[str, Encoding] = {
    'rgb8': Encoding(Pixels.RGB, 3, 1), 'bgr8': Encoding(Pixels.BGR, 3, 1),
    'rgba8': Encoding(Pixels.RGBA, 4, 1), 'bgra8': Encoding(Pixels.BGRA, 4, 1),
    '8UC3': Encoding(Pixels.BGR, 3, 1), '8UC4': Encoding(Pixels.BGRA, 4, 1),
    'mono8': Encoding(Pixels.MONO, 1, 1), '8UC1': Encoding(Pixels.MONO, 1, 1),
    'yuv422': Encoding(Pixels.UYVY, 2, 1), 'uyvy': Encoding(Pixels.UYVY, 2, 1),
    'yuv422_yuy2': Encoding(Pixels.YUYV, 2, 1), 'yuyv': Encoding(Pixels.YUYV, 2, 1),
    **_bayer(Pixels.BAYER_RGGB), **_bayer(Pixels.BAYER_BGGR), **_bayer(Pixels.BAYER_GBRG),
    **_bayer(Pixels.BAYER_GRBG),
}
SUPPORTED_ENCODINGS = tuple(sorted(ENCODINGS))
# What depth cameras and stereo matchers publish (depth in mm or m, disparity): one channel
# wider than a byte (16UC1, 16SC1, 32FC1, 64FC1, mono16 ...). Read as a grey picture it
# gives the model nonsense, so it is refused as the wrong topic. A colour sensor's 16-bit
# data is Bayer, never one of these.
DEPTH_ENCODING = re.compile(r'^(mono16|(16|32|64)[USF]C1?)$', re.IGNORECASE)

_JPEG_START = b'\xff\xd8\xff'  # start of image, then the first marker's 0xFF
_PNG_SIGNATURE = b'\x89PNG\r\n\x1a\n'


class Compression(Enum):
    """The compressed formats a camera's ``CompressedImage`` may carry (format names in ROS)."""

    JPEG = 'jpeg'
    PNG = 'png'

    @property
    def names(self) -> tuple:
        """Return what a ``format`` field may say for this format (lower case)."""
        return ('jpeg', 'jpg') if self is Compression.JPEG else ('png',)

    def starts(self, buf: np.ndarray) -> bool:
        """Tell whether ``buf`` begins with this format's signature."""
        head = _JPEG_START if self is Compression.JPEG else _PNG_SIGNATURE
        return buf[:len(head)].tobytes() == head

    def ends(self, buf: np.ndarray) -> bool:
        """Tell whether ``buf`` ends as a whole stream does (a cut one still half-decodes)."""
        if self is Compression.JPEG:
            return buf[-2:].tobytes() == b'\xff\xd9'  # end of image
        return buf[-8:-4].tobytes() == b'IEND'  # the last chunk's type, before its CRC

    def declared_size(self, buf: np.ndarray) -> tuple:
        """Return the (width, height) the stream declares, reading only its header."""
        head = buf[:65536].tobytes()  # a JPEG frame header follows its tables, within 64 KiB
        return jpeg_size(head) if self is Compression.JPEG else png_size(head)


SUPPORTED_FORMATS = tuple(c.value for c in Compression)

# What cv_bridge 3.x turns into exactly our pixels when asked for rgb8. The others it
# refuses ('[8UC3] is not a color format', 'Unrecognized image encoding [yuyv]'), so they
# stay on our path (test_convert checks both sides of this list where cv_bridge exists).
CV_BRIDGE_ENCODINGS = frozenset(
    {'rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8', 'yuv422', 'yuv422_yuy2'}
    | {name for name in ENCODINGS if name.startswith('bayer_')})

_YUV_CODES = {Pixels.UYVY: cv2.COLOR_YUV2RGB_UYVY, Pixels.YUYV: cv2.COLOR_YUV2RGB_YUYV}


def _bayer_code(pattern: Pixels) -> int:
    # OpenCV >= 4.6 has names that match the sensor layout; older names are shifted.
    legacy = {'rggb': 'BG', 'bggr': 'RG', 'gbrg': 'GR', 'grbg': 'GB'}
    name = f'COLOR_Bayer{pattern.value.upper()}2RGB'
    return getattr(cv2, name, None) or getattr(cv2, f'COLOR_Bayer{legacy[pattern.value]}2RGB')


@dataclass(frozen=True)
class RawImage:
    """A validated raw image: its encoding and the [H, W * bytes per pixel] row view."""

    name: str
    encoding: Encoding
    height: int
    width: int
    step: int
    bigendian: bool
    rows: np.ndarray

    @property
    def bridgeable(self) -> bool:
        """
        Whether cv_bridge gives our pixels for this frame.

        cv_bridge 3.4 reads the buffer as whole pixels per row (a step that is not a
        multiple of the pixel size shears the image) and byte-swaps with an API numpy 2
        removed (big-endian 16-bit fails), so those frames stay on our path.
        """
        bpp = self.encoding.channels * self.encoding.bytes_per_channel
        wide_be = self.bigendian and self.encoding.bytes_per_channel > 1
        return self.name in CV_BRIDGE_ENCODINGS and self.step % bpp == 0 and not wide_be


def _buffer(data: Any) -> np.ndarray:
    """View message bytes as uint8 without copying (array.array, bytes, memoryview, ndarray)."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8)
    try:
        return np.frombuffer(data, dtype=np.uint8)
    except TypeError:  # a list of ints (hand-built messages)
        return np.asarray(data, dtype=np.uint8)


def looks_like_depth(encoding: str) -> bool:
    """Tell whether an encoding is one that depth or disparity images are published in."""
    return DEPTH_ENCODING.match(encoding.strip()) is not None


def validate(msg: Any) -> RawImage:
    """Check everything about a raw image that a converter relies on; reject otherwise."""
    name = str(msg.encoding)
    enc = ENCODINGS.get(name)
    if looks_like_depth(name):
        raise DepthImage(f'encoding {name!r} is depth or disparity, not a colour image: this '
                         'looks like a depth topic; subscribe the colour image topic instead')
    if enc is None:
        raise UnknownEncoding(f'encoding {name!r} is not supported; expected one of '
                              f'{", ".join(SUPPORTED_ENCODINGS)}')
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise BadSize(f'image size {width}x{height} is empty')
    if enc.needs_even_width and width % 2:
        raise BadSize(f'{name} needs an even width; got {width}x{height}')
    if enc.needs_even_height and height % 2:
        raise BadSize(f'{name} needs an even height; got {width}x{height}')
    row = width * enc.channels * enc.bytes_per_channel
    if step < row:
        raise BadSize(f'step {step} is smaller than width*bytes_per_pixel = {row} '
                      f'({name}, width {width})')
    buf = _buffer(msg.data)
    if buf.size < step * height:
        raise TruncatedData(f'{buf.size} bytes for a {width}x{height} {name} image '
                            f'with step {step} (need {step * height})')
    rows = buf[:step * height].reshape(height, step)[:, :row]
    return RawImage(name, enc, height, width, step, bool(msg.is_bigendian), rows)


def _samples(raw: RawImage) -> np.ndarray:
    """Return the pixels as [H, W, C] uint8 or native-endian uint16 (a view where possible)."""
    enc = raw.encoding
    if enc.bytes_per_channel == 1:
        return raw.rows.reshape(raw.height, raw.width, enc.channels)
    wide = np.ascontiguousarray(raw.rows).view('>u2' if raw.bigendian else '<u2')
    return wide.astype(np.uint16).reshape(raw.height, raw.width, enc.channels)


def to8(img: np.ndarray) -> np.ndarray:
    """16-bit samples to 8 bits by full-range scaling, round(x * 255 / 65535) (cv_bridge's)."""
    if img.dtype == np.uint8:
        return img
    return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)


def numpy_rgb(raw: RawImage) -> np.ndarray:
    """
    Convert a validated image with numpy / OpenCV: every supported encoding.

    Colour conversion (demosaicing included) runs at the sample depth, then 16-bit results
    are scaled to 8 bits, the order cv_bridge uses, so both paths give the same pixels.
    """
    pix = _samples(raw)
    kind = raw.encoding.pixels
    if kind == Pixels.RGB:
        out = pix
    elif kind == Pixels.RGBA:
        out = pix[..., :3]
    elif kind == Pixels.BGR:
        out = cv2.cvtColor(pix, cv2.COLOR_BGR2RGB)
    elif kind == Pixels.BGRA:
        out = cv2.cvtColor(pix, cv2.COLOR_BGRA2RGB)
    elif kind == Pixels.MONO:
        out = cv2.cvtColor(pix[..., 0], cv2.COLOR_GRAY2RGB)
    elif kind.is_yuv:
        out = cv2.cvtColor(np.ascontiguousarray(pix), _YUV_CODES[kind])
    else:
        out = cv2.cvtColor(np.ascontiguousarray(pix[..., 0]), _bayer_code(kind))
    return to8(out)


def _compression(fmt: str, buf: np.ndarray) -> Compression:
    """Tell the stream's format by its signature; the ``format`` field only explains a miss."""
    fmt = fmt.lower()
    if 'compresseddepth' in fmt.replace(' ', ''):
        raise DepthImage(f'format {fmt!r} is a compressed depth stream, not a colour image: '
                         'this looks like a depth topic; subscribe the colour image topic '
                         'instead')
    for kind in Compression:
        if kind.starts(buf):
            return kind
    for kind in Compression:
        if any(name in fmt for name in kind.names):
            raise CorruptImage(f'format says {kind.value} but the data does not start like '
                               f'one ({buf.size} bytes)')
    raise UnknownEncoding(f'compressed format {fmt!r} is not supported; expected one of '
                          f'{", ".join(SUPPORTED_FORMATS)}')


DEFAULT_MAX_PIXELS = 4096 * 4096
# JPEG start-of-frame markers (baseline, progressive, lossless ...): C0-CF but DHT (C4),
# JPG (C8) and DAC (CC). Markers without a length: TEM, RSTn, SOI, EOI.
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}
_STANDALONE = frozenset({0x01, *range(0xD0, 0xDA)})


def png_size(data: bytes) -> tuple:
    """Return (width, height) from a PNG's IHDR chunk, the first after the signature."""
    if len(data) < 24 or data[:8] != _PNG_SIGNATURE or data[12:16] != b'IHDR':
        raise CorruptImage('PNG without an IHDR chunk first')
    return struct.unpack('>II', data[16:24])


def jpeg_size(data: bytes) -> tuple:
    """Return (width, height) from a JPEG's start-of-frame segment, walking the markers."""
    i, n = 2, len(data)  # after SOI
    while i + 4 <= n:
        if data[i] != 0xFF:
            raise CorruptImage(f'JPEG marker expected at byte {i}')
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _STANDALONE:
            i += 2
            continue
        if marker == 0xDA:  # start of scan before any frame header
            break
        length = struct.unpack('>H', data[i + 2:i + 4])[0]
        if marker in _SOF:
            if i + 9 > n or length < 7:
                break
            height, width = struct.unpack('>HH', data[i + 5:i + 9])
            return width, height
        i += 2 + length
    raise CorruptImage('JPEG without a frame header (SOFn) before its image data')


def check_pixels(width: int, height: int, max_pixels: int, what: str) -> None:
    """Refuse an image of more than ``max_pixels`` pixels (TooLarge) or of none (BadSize)."""
    if width <= 0 or height <= 0:
        raise BadSize(f'{what} declares an empty size {width}x{height}')
    if width * height > max_pixels:
        raise TooLarge(f'{what} of {width}x{height} = {width * height} pixels exceeds '
                       f'max_input_pixels = {max_pixels}; refused before decoding')


def compressed_to_rgb(msg: Any, max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """
    Decode a ``sensor_msgs/CompressedImage`` (jpeg or png) to [H, W, 3] uint8 RGB.

    The size the header declares is checked against ``max_pixels`` before anything is
    decoded: a small file can declare an image of gigabytes (a decompression bomb).
    """
    buf = _buffer(msg.data)
    if buf.size == 0:
        raise TruncatedData('compressed image with no data')
    kind = _compression(str(msg.format), buf)
    what = f'{kind.value} ({buf.size} bytes)'
    # A stream cut short still decodes partially (grey rows); refuse it by its end marker.
    if not kind.ends(buf):
        raise TruncatedData(f'{what} is cut short: it does not end as a whole '
                            f'{kind.value} does')
    width, height = kind.declared_size(buf)
    check_pixels(width, height, max_pixels, what)
    try:
        img = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    except cv2.error as exc:
        raise CorruptImage(f'{what} does not decode: {exc}') from exc
    if img is None or img.ndim != 3 or img.shape[0] == 0 or img.shape[1] == 0:
        raise CorruptImage(f'{what} does not decode to an image')
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def load_cv_bridge() -> Optional[Callable[[Any], np.ndarray]]:
    """Return the ROS 2 cv_bridge rgb8 converter when installed (never PyPI's ROS 1 port)."""
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
    return lambda msg: bridge.imgmsg_to_cv2(msg, desired_encoding='rgb8')


class ImageConverter:
    """
    Turns Image / CompressedImage messages into RGB arrays.

    cv_bridge (where installed and wanted) converts the encodings in
    :data:`CV_BRIDGE_ENCODINGS`; should it fail on a frame that passed validation, that
    encoding moves to our own path for good and :attr:`notes` says so. Used by one
    thread at a time (the image callbacks share one mutually exclusive group).
    """

    def __init__(self, use_cv_bridge: bool = True,
                 max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self._bridge = load_cv_bridge() if use_cv_bridge else None
        self.max_pixels = max_pixels  # the node sets it from max_input_pixels
        self._refused: dict[str, str] = {}  # encoding -> what cv_bridge said

    @property
    def backend(self) -> str:
        """Say which converter runs which encodings (for /diagnostics)."""
        if self._bridge is None:
            return 'numpy (all encodings)'
        via = sorted(CV_BRIDGE_ENCODINGS - set(self._refused))
        return f"cv_bridge ({', '.join(via)}), numpy (the rest)"

    @property
    def notes(self) -> list:
        return [f'cv_bridge failed on {enc} ({why}); converted by numpy since'
                for enc, why in sorted(self._refused.items())]

    def image(self, msg: Any) -> np.ndarray:
        """Convert a ``sensor_msgs/Image``: validate, then cv_bridge or numpy."""
        raw = validate(msg)
        check_pixels(raw.width, raw.height, self.max_pixels, f'{raw.name} image')
        if self._bridge is not None and raw.bridgeable and raw.name not in self._refused:
            try:
                return _checked(self._bridge(msg))
            except Exception as exc:  # noqa: BLE001 (CvBridgeError, cv2.error alike)
                self._refused[raw.name] = f'{type(exc).__name__}: {exc}'.splitlines()[0]
        return _checked(numpy_rgb(raw))

    def compressed(self, msg: Any) -> np.ndarray:
        return _checked(compressed_to_rgb(msg, self.max_pixels))


def image_to_rgb(msg: Any) -> np.ndarray:
    """Convert a ``sensor_msgs/Image`` with our own numpy path (no cv_bridge)."""
    return _checked(numpy_rgb(validate(msg)))


def _checked(img: np.ndarray) -> np.ndarray:
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
        raise UnknownEncoding(f'conversion gave {img.dtype} {img.shape}, not uint8 HxWx3')
    return img
