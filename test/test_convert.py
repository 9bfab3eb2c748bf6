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

"""Image / CompressedImage conversion to RGB: every encoding, every rejection, no DDS."""

import cv2
from lingbot_ros.ros import convert
from lingbot_ros.ros.convert import (BadSize, compressed_to_rgb, CorruptImage, image_to_rgb,
                                     ImageConverter, ImageRejected, TruncatedData,
                                     UnknownEncoding)
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image

H, W = 6, 8


def _rgb(seed: int = 0, h: int = H, w: int = W) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _msg(pixels: np.ndarray, encoding: str, pad: int = 0, bigendian: bool = False) -> Image:
    """Build a real rclpy Image with optional row padding (step > width * bpp)."""
    h = pixels.shape[0]
    rows = np.ascontiguousarray(pixels).reshape(h, -1).view(np.uint8)
    if pad:
        rows = np.concatenate([rows, np.full((h, pad), 77, np.uint8)], axis=1)
    m = Image()
    m.height, m.width = h, pixels.shape[1]
    m.encoding = encoding
    m.is_bigendian = int(bigendian)
    m.step = rows.shape[1]
    m.data = rows.tobytes()
    return m


@pytest.mark.parametrize('pad', [0, 5])
def test_rgb8_is_a_view_of_the_message_buffer(pad):
    img = _rgb(1)
    m = _msg(img, 'rgb8', pad)
    out = image_to_rgb(m)
    np.testing.assert_array_equal(out, img)
    assert np.shares_memory(out, np.frombuffer(m.data, np.uint8))


@pytest.mark.parametrize('pad', [0, 3])
def test_rgba8_view_and_bgr_family(pad):
    img = _rgb(2)
    alpha = np.full((H, W, 1), 9, np.uint8)
    out = image_to_rgb(_msg(np.concatenate([img, alpha], 2), 'rgba8', pad))
    np.testing.assert_array_equal(out, img)
    for enc in ('bgr8', '8UC3'):
        np.testing.assert_array_equal(image_to_rgb(_msg(img[..., ::-1], enc, pad)), img)
    bgra = np.concatenate([img[..., ::-1], alpha], 2)
    np.testing.assert_array_equal(image_to_rgb(_msg(bgra, 'bgra8', pad)), img)


def test_mono8_and_mono16_both_endians():
    gray = _rgb(3)[..., 0]
    out = image_to_rgb(_msg(gray[..., None], 'mono8'))
    assert out.shape == (H, W, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)
    wide = (gray.astype(np.uint16) << 8) | 0xAB
    for big in (False, True):
        arr = wide.astype('>u2' if big else '<u2')[..., None]
        got = image_to_rgb(_msg(arr, 'mono16', pad=2, bigendian=big))
        np.testing.assert_array_equal(got[..., 1], gray)


def _yuv(y: int, u: int, v: int, order: str) -> np.ndarray:
    """Pack a flat colour as 4:2:2 bytes in the given order (pairs share U and V)."""
    out = np.zeros((H, W, 2), np.uint8)
    luma, chroma = (0, 1) if order == 'yuyv' else (1, 0)
    out[..., luma] = y
    out[:, 0::2, chroma], out[:, 1::2, chroma] = u, v
    return out


@pytest.mark.parametrize('enc,order', [('yuv422', 'uyvy'), ('uyvy', 'uyvy'),
                                       ('yuv422_yuy2', 'yuyv'), ('yuyv', 'yuyv')])
def test_yuv422_byte_orders(enc, order):
    y, u, v = 150, 100, 180
    # BT.601 video range, written out independently of OpenCV
    luma = 1.164 * (y - 16)
    want = np.array([luma + 1.596 * (v - 128), luma - 0.392 * (u - 128) - 0.813 * (v - 128),
                     luma + 2.017 * (u - 128)])
    out = image_to_rgb(_msg(_yuv(y, u, v, order), enc))
    assert out.shape == (H, W, 3)
    assert np.abs(out.astype(float) - want).max() <= 2.5
    wrong = {'uyvy': 'yuyv', 'yuyv': 'uyvy'}[order]
    assert np.abs(image_to_rgb(_msg(_yuv(y, u, v, wrong), enc)) - want).max() > 20


def _mosaic(img: np.ndarray, pattern: str) -> np.ndarray:
    ch = {'r': 0, 'g': 1, 'b': 2}
    raw = np.zeros(img.shape[:2], img.dtype)
    for dy in range(2):
        for dx in range(2):
            raw[dy::2, dx::2] = img[dy::2, dx::2, ch[pattern[2 * dy + dx]]]
    return raw


@pytest.mark.parametrize('pattern', ['rggb', 'bggr', 'gbrg', 'grbg'])
def test_bayer_patterns_give_the_right_colour(pattern):
    colour = np.array([210, 120, 30], np.uint8)
    img = np.tile(colour, (8, 10, 1))
    out = image_to_rgb(_msg(_mosaic(img, pattern)[..., None], f'bayer_{pattern}8'))
    assert np.abs(out[2:-2, 2:-2].astype(int) - colour).max() <= 2
    wide = img.astype(np.uint16) << 8
    out16 = image_to_rgb(_msg(_mosaic(wide, pattern)[..., None], f'bayer_{pattern}16'))
    assert np.abs(out16[2:-2, 2:-2].astype(int) - colour).max() <= 2


def test_compressed_jpeg_and_png():
    img = cv2.GaussianBlur(_rgb(4, 32, 48), (5, 5), 0)
    for ext, fmt, tol in (('.png', 'png', 0), ('.jpg', 'rgb8; jpeg compressed bgr8', 40)):
        ok, enc = cv2.imencode(ext, img[..., ::-1])
        assert ok
        m = CompressedImage(format=fmt, data=enc.tobytes())
        out = compressed_to_rgb(m)
        assert out.shape == img.shape and out.dtype == np.uint8
        assert np.abs(out.astype(int) - img).mean() <= max(tol / 4, 0.0)


@pytest.mark.parametrize('make,error', [
    (lambda: _msg(_rgb(), 'rgb16'), UnknownEncoding),
    (lambda: _msg(_rgb(), '32FC1'), UnknownEncoding),
    (lambda: Image(height=0, width=4, encoding='rgb8', step=12), BadSize),
    (lambda: Image(height=4, width=0, encoding='rgb8', step=0), BadSize),
    (lambda: _msg(np.zeros((4, 5, 2), np.uint8), 'yuv422'), BadSize),
    (lambda: _msg(np.zeros((5, 4, 1), np.uint8), 'bayer_rggb8'), BadSize),
    (lambda: Image(height=4, width=4, encoding='rgb8', step=8, data=bytes(48)), BadSize),
    (lambda: Image(height=4, width=4, encoding='rgb8', step=12, data=bytes(47)), TruncatedData),
    (lambda: Image(height=4, width=4, encoding='mono16', step=8, data=bytes(8)), TruncatedData),
])
def test_raw_rejections_are_typed(make, error):
    with pytest.raises(error) as info:
        image_to_rgb(make())
    assert isinstance(info.value, ImageRejected)
    assert info.value.reason in ('encoding', 'size', 'truncated')


def test_compressed_rejections_are_typed():
    img = _rgb(5, 16, 16)
    jpeg = cv2.imencode('.jpg', img)[1].tobytes()
    png = cv2.imencode('.png', img)[1].tobytes()
    cases = [
        (CompressedImage(format='jpeg', data=b''), TruncatedData),
        (CompressedImage(format='jpeg', data=jpeg[:len(jpeg) // 2]), TruncatedData),
        (CompressedImage(format='png', data=png[:-20]), TruncatedData),
        (CompressedImage(format='jpeg', data=b'\x00' * 100), CorruptImage),
        # a JPEG header and trailer around garbage: a corrupt stream, not a short one
        (CompressedImage(format='jpeg', data=jpeg[:4] + b'\x13' * 64 + b'\xff\xd9'),
         CorruptImage),
        (CompressedImage(format='tiff', data=b'II*\x00' + bytes(50)), UnknownEncoding),
        (CompressedImage(format='16UC1; compressedDepth png', data=png), UnknownEncoding),
    ]
    for msg, error in cases:
        with pytest.raises(error):
            compressed_to_rgb(msg)


def test_converter_uses_numpy_path_without_cv_bridge():
    conv = ImageConverter(use_cv_bridge=False)
    assert conv.backend == 'numpy'
    img = _rgb(6)
    np.testing.assert_array_equal(conv.image(_msg(img[..., ::-1], 'bgr8')), img)
    with pytest.raises(TruncatedData):
        conv.image(Image(height=2, width=2, encoding='rgb8', step=6, data=bytes(3)))
    # when cv_bridge is absent, asking for it falls back to the numpy path
    try:
        import cv_bridge  # noqa: F401
    except ImportError:
        assert ImageConverter(use_cv_bridge=True).backend == 'numpy'
    assert convert.SUPPORTED_FORMATS == ('jpeg', 'png')
