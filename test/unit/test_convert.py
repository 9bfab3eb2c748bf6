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

from conftest import jpeg_declaring, png_bomb
import cv2
from lingbot_ros.ros import convert
from lingbot_ros.ros.convert import (BadSize, compressed_to_rgb, CorruptImage, CV_BRIDGE_ENCODINGS,
                                     DepthImage, ENCODINGS, image_to_rgb, ImageConverter,
                                     ImageRejected,
                                     load_cv_bridge, TooLarge, TruncatedData,
                                     UnknownEncoding)
from lingbot_ros.ros.reasons import Rejection
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


def test_mono8_and_sixteen_bit_bayer_both_endians():
    gray = _rgb(3)[..., 0]
    out = image_to_rgb(_msg(gray[..., None], 'mono8'))
    assert out.shape == (H, W, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[..., c], gray)
    wide = np.full((H, W), 200 * 257, np.uint16)  # exactly 200 after round(x * 255 / 65535)
    for big in (False, True):
        arr = wide.astype('>u2' if big else '<u2')[..., None]
        got = image_to_rgb(_msg(arr, 'bayer_rggb16', pad=2, bigendian=big))
        np.testing.assert_array_equal(got, 200)


@pytest.mark.parametrize('name', ['16UC1', '32FC1', '16SC1', 'mono16', '64FC1', '32SC1'])
def test_depth_and_disparity_on_the_colour_input_are_refused_as_such(name):
    size = {'16UC1': 2, '16SC1': 2, 'mono16': 2, '32FC1': 4, '32SC1': 4, '64FC1': 8}[name]
    msg = Image(height=4, width=4, encoding=name, step=4 * size, data=bytes(16 * size))
    for conv in (ImageConverter(use_cv_bridge=False), ImageConverter(use_cv_bridge=True)):
        with pytest.raises(DepthImage, match='looks like a depth topic') as info:
            conv.image(msg)
        assert info.value.reason is Rejection.DEPTH_IMAGE
    with pytest.raises(DepthImage):
        image_to_rgb(msg)
    assert name not in ENCODINGS and name not in CV_BRIDGE_ENCODINGS
    png = cv2.imencode('.png', np.zeros((4, 4), np.uint16))[1].tobytes()
    with pytest.raises(DepthImage, match='looks like a depth topic'):
        compressed_to_rgb(CompressedImage(format='16UC1; compressedDepth png', data=png))


def test_sixteen_bits_scale_to_eight_by_rounding_over_the_full_range():
    every = np.arange(65536, dtype=np.uint16)
    want = np.floor(every.astype(np.float64) * 255.0 / 65535.0 + 0.5)
    np.testing.assert_array_equal(convert.to8(every), want.astype(np.uint8))


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
    (lambda: _msg(_rgb(), '32FC3'), UnknownEncoding),
    (lambda: Image(height=0, width=4, encoding='rgb8', step=12), BadSize),
    (lambda: Image(height=4, width=0, encoding='rgb8', step=0), BadSize),
    (lambda: _msg(np.zeros((4, 5, 2), np.uint8), 'yuv422'), BadSize),
    (lambda: _msg(np.zeros((5, 4, 1), np.uint8), 'bayer_rggb8'), BadSize),
    (lambda: Image(height=4, width=4, encoding='rgb8', step=8, data=bytes(48)), BadSize),
    (lambda: Image(height=4, width=4, encoding='rgb8', step=12, data=bytes(47)), TruncatedData),
    (lambda: Image(height=4, width=4, encoding='bayer_rggb16', step=8, data=bytes(8)),
     TruncatedData),
])
def test_raw_rejections_are_typed(make, error):
    with pytest.raises(error) as info:
        image_to_rgb(make())
    assert isinstance(info.value, ImageRejected)
    assert info.value.reason in (Rejection.ENCODING, Rejection.SIZE, Rejection.TRUNCATED)


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
        (CompressedImage(format='16UC1; compressedDepth png', data=png), DepthImage),
    ]
    for msg, error in cases:
        with pytest.raises(error):
            compressed_to_rgb(msg)


def test_converter_uses_numpy_path_without_cv_bridge():
    conv = ImageConverter(use_cv_bridge=False)
    assert conv.backend == 'numpy (all encodings)'
    img = _rgb(6)
    np.testing.assert_array_equal(conv.image(_msg(img[..., ::-1], 'bgr8')), img)
    with pytest.raises(TruncatedData):
        conv.image(Image(height=2, width=2, encoding='rgb8', step=6, data=bytes(3)))
    # when cv_bridge is absent, asking for it falls back to the numpy path
    try:
        import cv_bridge  # noqa: F401
    except ImportError:
        assert ImageConverter(use_cv_bridge=True).backend == 'numpy (all encodings)'
    assert convert.SUPPORTED_FORMATS == ('jpeg', 'png')


# --- every advertised encoding, with and without cv_bridge, against a numpy reference ---

BRIDGE = load_cv_bridge()
README_ENCODINGS = ('rgb8', 'bgr8', 'rgba8', 'bgra8', 'mono8', 'yuv422', 'uyvy',
                    'yuv422_yuy2', 'yuyv', '8UC1', '8UC3', '8UC4') + tuple(
    f'bayer_{p}{d}' for p in ('rggb', 'bggr', 'gbrg', 'grbg') for d in (8, 16))


def _bt601(y, u, v):
    """Video-range BT.601 YCbCr to RGB, written out (the reference for 4:2:2)."""
    luma = 1.164 * (y - 16.0)
    return np.stack([luma + 1.596 * (v - 128.0), luma - 0.392 * (u - 128.0) - 0.813 * (v - 128.0),
                     luma + 2.017 * (u - 128.0)], -1).clip(0, 255)


def _case(name, seed, h=8, w=10):
    """Build (message pixels [H, W, C] of the encoding's dtype, RGB reference, tolerance)."""
    rng = np.random.default_rng(seed)
    enc = ENCODINGS[name]
    kind = enc.pixels
    if enc.bytes_per_channel == 2:
        if kind.is_bayer:  # a flat colour: demosaicing is exact away from the border
            colour = rng.integers(0, 65536, 3)
            raw = _mosaic(np.tile(colour.astype(np.uint16), (h, w, 1)), kind.value)[..., None]
            want = np.tile(np.floor(colour * 255 / 65535 + 0.5), (h, w, 1))
            return raw, want, 1
        gray = rng.integers(0, 65536, (h, w), dtype=np.uint16)
        want = np.floor(gray.astype(np.float64) * 255 / 65535 + 0.5)
        return gray[..., None], np.repeat(want[..., None], 3, -1), 0
    rgb = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    alpha = rng.integers(0, 256, (h, w, 1), dtype=np.uint8)
    if kind.name == 'RGB':
        return rgb, rgb, 0
    if kind.name == 'BGR':
        return rgb[..., ::-1], rgb, 0
    if kind.name == 'RGBA':
        return np.concatenate([rgb, alpha], -1), rgb, 0
    if kind.name == 'BGRA':
        return np.concatenate([rgb[..., ::-1], alpha], -1), rgb, 0
    if kind.name == 'MONO':
        return rgb[..., :1], np.repeat(rgb[..., :1], 3, -1), 0
    if kind.is_yuv:  # each horizontal pair shares U and V
        y = rng.integers(16, 236, (h, w)).astype(np.uint8)
        u = np.repeat(rng.integers(16, 241, (h, w // 2)), 2, 1).astype(np.uint8)
        v = np.repeat(rng.integers(16, 241, (h, w // 2)), 2, 1).astype(np.uint8)
        packed = np.zeros((h, w, 2), np.uint8)
        luma, chroma = (1, 0) if kind.name == 'UYVY' else (0, 1)
        packed[..., luma] = y
        packed[:, 0::2, chroma], packed[:, 1::2, chroma] = u[:, 0::2], v[:, 0::2]
        return packed, _bt601(y.astype(float), u.astype(float), v.astype(float)), 3
    colour = rng.integers(0, 256, 3).astype(np.uint8)
    raw = _mosaic(np.tile(colour, (h, w, 1)), kind.value)[..., None]
    return raw, np.tile(colour, (h, w, 1)).astype(np.float64), 1


def _layouts(name):
    """(pad bytes, big-endian) variants: tight, padded by whole pixels, padded oddly."""
    enc = ENCODINGS[name]
    bpp = enc.channels * enc.bytes_per_channel
    out = [(0, False), (2 * bpp, False), (3, False)]
    if enc.bytes_per_channel == 2:
        out += [(0, True), (bpp, True)]
    return out


@pytest.mark.parametrize('name', README_ENCODINGS)
def test_every_encoding_gives_the_reference_pixels_with_and_without_cv_bridge(name):
    numpy_only = ImageConverter(use_cv_bridge=False)
    bridged = ImageConverter(use_cv_bridge=True)
    used = []
    if bridged._bridge is not None:
        real = bridged._bridge
        bridged._bridge = lambda msg: (used.append(msg.encoding), real(msg))[1]
    for seed, (pad, big) in enumerate(_layouts(name)):
        pixels, want, tol = _case(name, seed)
        if big:
            pixels = pixels.astype('>u2')
        msg = _msg(pixels, name, pad=pad, bigendian=big)
        ours = numpy_only.image(msg)
        theirs = bridged.image(msg)
        assert ours.dtype == np.uint8 and ours.shape == want.shape
        inner = (slice(2, -2), slice(2, -2)) if ENCODINGS[name].pixels.is_bayer else ...
        assert np.abs(ours[inner].astype(float) - want[inner]).max() <= tol, (pad, big)
        np.testing.assert_array_equal(theirs, ours, err_msg=f'pad {pad} big-endian {big}')
    assert bridged.notes == []  # cv_bridge never failed on a frame it was given
    if BRIDGE is not None and name in CV_BRIDGE_ENCODINGS:
        assert name in used  # where cv_bridge is present it really converted this encoding


@pytest.mark.skipif(BRIDGE is None, reason='cv_bridge is not installed (it comes with a ROS 2 '
                    'distribution; ../shared/ros-distro builds it)')
@pytest.mark.parametrize('name', README_ENCODINGS)
def test_the_cv_bridge_list_is_exactly_what_cv_bridge_converts_right(name):
    pixels, _, _ = _case(name, 7)
    msg = _msg(pixels, name)
    try:
        got = BRIDGE(msg)
    except Exception:  # noqa: BLE001 (CvBridgeError: an encoding it does not know)
        got = None
    same = got is not None and got.shape == pixels.shape[:2] + (3,) and \
        np.array_equal(got, image_to_rgb(msg))
    assert same == (name in CV_BRIDGE_ENCODINGS), name


@pytest.mark.parametrize('msg', [
    Image(height=48, width=63, encoding='yuv422', step=126, data=bytes(48 * 126)),
    Image(height=48, width=63, encoding='yuyv', step=126, data=bytes(48 * 126)),
    Image(height=47, width=64, encoding='bayer_rggb8', step=64, data=bytes(47 * 64)),
    Image(height=4, width=4, encoding='bayer_rggb16', step=7, data=bytes(28)),
    Image(height=4, width=4, encoding='rgb8', step=12, data=bytes(40)),
], ids=['yuv422-odd-width', 'yuyv-odd-width', 'bayer-odd-height', 'short-step', 'short-data'])
def test_invalid_frames_never_reach_a_converter(msg):
    calls = []
    conv = ImageConverter(use_cv_bridge=True)
    conv._bridge = lambda m: calls.append(m)
    real = convert.numpy_rgb
    convert.numpy_rgb = lambda raw: calls.append(raw)
    try:
        with pytest.raises(ImageRejected):
            conv.image(msg)
    finally:
        convert.numpy_rgb = real
    assert calls == []


def _compressed(data: bytes, fmt: str) -> CompressedImage:
    return CompressedImage(format=fmt, data=data)


@pytest.mark.parametrize('ext,progressive', [('.png', False), ('.jpg', False), ('.jpg', True)])
def test_the_header_gives_the_size_without_decoding(ext, progressive):
    img = _rgb(3, 37, 53)
    flags = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else []
    ok, enc = cv2.imencode(ext, img, flags)
    kind = convert.Compression.PNG if ext == '.png' else convert.Compression.JPEG
    assert kind.starts(enc) and kind.ends(enc)
    assert kind.declared_size(enc.reshape(-1)) == (53, 37)


def test_a_decompression_bomb_is_refused_from_its_header(monkeypatch):
    def never(*_):
        raise AssertionError('the image was decoded')
    monkeypatch.setattr(convert.cv2, 'imdecode', never)
    conv = ImageConverter(use_cv_bridge=False)  # the default bound, 4096 x 4096
    for data, fmt in ((png_bomb(), 'png'), (jpeg_declaring(), 'jpeg')):
        with pytest.raises(TooLarge, match='30000x30000') as err:
            conv.compressed(_compressed(data, fmt))
        assert err.value.reason == Rejection.TOO_LARGE and 'max_input_pixels' in str(err.value)


def test_the_bound_is_the_configured_one_and_inclusive():
    ok, enc = cv2.imencode('.png', _rgb(1, 20, 30))
    msg = _compressed(enc.tobytes(), 'png')
    assert ImageConverter(False, max_pixels=600).compressed(msg).shape == (20, 30, 3)
    with pytest.raises(TooLarge):
        ImageConverter(False, max_pixels=599).compressed(msg)
    raw = _msg(_rgb(1, 20, 30), 'rgb8')  # a raw image is bounded by the same parameter
    assert ImageConverter(False, max_pixels=600).image(raw).shape == (20, 30, 3)
    with pytest.raises(TooLarge):
        ImageConverter(False, max_pixels=599).image(raw)


def test_headers_that_say_nothing_usable_are_corrupt():
    ok, enc = cv2.imencode('.jpg', _rgb(2))
    data = enc.tobytes()
    at = data.index(b'\xff\xc0')
    no_frame = data[:at] + b'\xff\xfe\x00\x04ab' + data[data.index(b'\xff\xda'):]
    with pytest.raises(CorruptImage, match='SOFn'):
        compressed_to_rgb(_compressed(no_frame, 'jpeg'))
    ok, png = cv2.imencode('.png', _rgb(2))
    wrong = bytearray(png.tobytes())
    wrong[12:16] = b'tEXt'  # IHDR must come first
    with pytest.raises(CorruptImage, match='IHDR'):
        compressed_to_rgb(_compressed(bytes(wrong), 'png'))
    with pytest.raises(BadSize):
        compressed_to_rgb(_compressed(jpeg_declaring(0, 10), 'jpeg'))
