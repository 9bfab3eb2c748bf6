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
A ``sensor_msgs/Image`` read straight from its serialized bytes, pixels not copied.

rclpy turns a taken image into a Python message: the pixels are copied into an
``array.array`` (921,600 bytes for 640x480 rgb8) and every field becomes a Python object,
on the executor's thread, before the callback starts. Subscribed raw, the callback gets
the sample's CDR bytes; :func:`parse_image` reads the few header fields and views the
pixels in place, which shortens the way from stamp to callback.

Only plain little-endian CDR (encapsulation ``00 01``, what rmw_fastrtps and the other
rmws write on the hosts we run on) is read here; :class:`NotPlainCdr` tells the caller to
fall back to ``rclpy.serialization.deserialize_message``. Nothing here imports rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
import struct

CDR_LE = b'\x00\x01'  # the encapsulation kind of plain little-endian CDR (XCDR1)
_U32 = struct.Struct('<I')
_STAMP = struct.Struct('<iI')


class NotPlainCdr(ValueError):
    """Bytes this reader does not take (another encapsulation, or a malformed sample)."""


@dataclass(frozen=True)
class Stamp:
    sec: int
    nanosec: int


@dataclass(frozen=True)
class Header:
    stamp: Stamp
    frame_id: str


@dataclass(frozen=True)
class ImageView:
    """The fields of ``sensor_msgs/Image`` the node reads; ``data`` views the sample."""

    header: Header
    height: int
    width: int
    encoding: str
    is_bigendian: int
    step: int
    data: memoryview


class _Reader:
    """Reads CDR fields in order; offsets align relative to the payload, as CDR says."""

    def __init__(self, buf: memoryview) -> None:
        self.buf, self.pos = buf, 4  # after the encapsulation header

    def _need(self, n: int) -> None:
        if n < 0 or self.pos + n > len(self.buf):
            raise NotPlainCdr(f'sample of {len(self.buf)} bytes ends inside a field at '
                              f'{self.pos} (+{n})')

    def align(self, n: int) -> None:
        self.pos += (-(self.pos - 4)) % n

    def u32(self) -> int:
        self.align(4)
        self._need(4)
        value = _U32.unpack_from(self.buf, self.pos)[0]
        self.pos += 4
        return value

    def u8(self) -> int:
        self._need(1)
        value = self.buf[self.pos]
        self.pos += 1
        return value

    def string(self) -> str:
        n = self.u32()  # length with the terminating NUL
        self._need(n)
        if n == 0 or self.buf[self.pos + n - 1] != 0:
            raise NotPlainCdr('a string without its terminating NUL')
        try:
            text = bytes(self.buf[self.pos:self.pos + n - 1]).decode('utf-8')
        except UnicodeDecodeError as exc:
            raise NotPlainCdr(f'a string that is not UTF-8: {exc}') from None
        self.pos += n
        return text

    def octets(self) -> memoryview:
        n = self.u32()
        self._need(n)
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view


def parse_image(sample: bytes) -> ImageView:
    """Read a serialized ``sensor_msgs/Image``; NotPlainCdr for bytes it does not take."""
    buf = memoryview(sample)
    if len(buf) < 4 or bytes(buf[:2]) != CDR_LE:
        raise NotPlainCdr(f'encapsulation {bytes(buf[:2]).hex() or "(none)"} is not '
                          f'plain little-endian CDR ({CDR_LE.hex()})')
    r = _Reader(buf)
    r._need(_STAMP.size)
    sec, nanosec = _STAMP.unpack_from(buf, r.pos)
    r.pos += _STAMP.size
    frame_id = r.string()
    height, width = r.u32(), r.u32()
    encoding = r.string()
    is_bigendian = r.u8()
    step = r.u32()
    data = r.octets()
    return ImageView(Header(Stamp(sec, nanosec), frame_id), height, width, encoding,
                     is_bigendian, step, data)
