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
Coloured point clouds as binary PLY: the map in a file any viewer opens.

PLY because MeshLab, CloudCompare, Open3D and Blender read it without plugins and it
carries colour and an extra per-point property (the confidence) in one file. The
layout is fixed: binary little-endian, one ``vertex`` element with ``float x, y, z``,
``uchar red, green, blue`` and ``float confidence``, 19 bytes per point, packed.
:func:`read_ply` reads that layout back (for tests and tools) and refuses any other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Union

from lingbot_ros.streaming.atomic import atomic_file
import numpy as np

PathLike = Union[str, Path]
VERTEX_DTYPE = np.dtype([('x', '<f4'), ('y', '<f4'), ('z', '<f4'), ('red', 'u1'),
                         ('green', 'u1'), ('blue', 'u1'), ('confidence', '<f4')])
FORMAT = 'binary_little_endian 1.0'
_PLY_TYPES = {'<f4': 'float', 'u1': 'uchar'}
_TYPE_ALIASES = {'float': 'float', 'float32': 'float', 'uchar': 'uchar', 'uint8': 'uchar'}
MAX_HEADER_BYTES = 4096


class PlyError(ValueError):
    """A file that is not the PLY layout this module writes; the message says what differs."""


def _header(count: int) -> bytes:
    lines = ['ply', f'format {FORMAT}', 'comment lingbot_ros accumulated map',
             f'element vertex {count}']
    lines += [f'property {_PLY_TYPES[VERTEX_DTYPE[name].str.lstrip("|")]} {name}'
              for name in VERTEX_DTYPE.names]
    lines.append('end_header')
    return ('\n'.join(lines) + '\n').encode('ascii')


def write_ply(path: PathLike, xyz: np.ndarray, rgb: np.ndarray, confidence: np.ndarray) -> int:
    """
    Write points as binary little-endian PLY; return the number written.

    ``xyz [N, 3]`` (stored float32), ``rgb [N, 3]`` uint8, ``confidence [N]`` (float32).
    Written whole or not at all (:func:`~lingbot_ros.streaming.atomic.atomic_file`): a
    reader, or a save killed midway, never leaves a half-written map under ``path``.
    """
    xyz = np.asarray(xyz)
    n = xyz.shape[0] if xyz.ndim == 2 else -1
    rgb, confidence = np.asarray(rgb), np.asarray(confidence)
    if xyz.shape != (n, 3) or rgb.shape != (n, 3) or confidence.shape != (n,):
        raise ValueError(f'xyz {xyz.shape}, rgb {rgb.shape}, confidence {confidence.shape}: '
                         'expected [N, 3], [N, 3] and [N]')
    if rgb.dtype != np.uint8:
        raise ValueError(f'rgb has dtype {rgb.dtype}: expected uint8')
    vertices = np.empty(n, VERTEX_DTYPE)
    vertices['x'], vertices['y'], vertices['z'] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    vertices['red'], vertices['green'], vertices['blue'] = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    vertices['confidence'] = confidence
    with atomic_file(path) as fh:
        fh.write(_header(n))
        fh.write(vertices.tobytes())
    return n


def read_ply(path: PathLike) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read a file :func:`write_ply` wrote: ``xyz [N, 3]`` float32, ``rgb`` uint8, confidence."""
    path = Path(path)
    data = path.read_bytes()
    end = data.find(b'end_header\n', 0, MAX_HEADER_BYTES)
    if not data.startswith(b'ply\n') or end < 0:
        raise PlyError(f'{path}: not a PLY file (no "ply" line or no end_header in the first '
                       f'{MAX_HEADER_BYTES} bytes)')
    lines = [ln.strip() for ln in data[:end].decode('ascii', 'replace').splitlines()[1:]]
    lines = [ln for ln in lines if ln and not ln.startswith(('comment', 'obj_info'))]
    expected = [(_PLY_TYPES[VERTEX_DTYPE[n].str.lstrip('|')], n) for n in VERTEX_DTYPE.names]
    if not lines or lines[0] != f'format {FORMAT}':
        raise PlyError(f'{path}: {lines[0] if lines else "no format line"!r} is not '
                       f'supported: expected "format {FORMAT}"')
    element = lines[1].split() if len(lines) > 1 else []
    if len(element) != 3 or element[:2] != ['element', 'vertex'] or not element[2].isdigit():
        raise PlyError(f'{path}: expected "element vertex <count>" after the format line, '
                       f'found {" ".join(element)!r}')
    count = int(element[2])
    found = []
    for ln in lines[2:]:
        parts = ln.split()
        if len(parts) != 3 or parts[0] != 'property':
            raise PlyError(f'{path}: {ln!r} is not supported: expected only the vertex '
                           f'properties {expected}')
        found.append((_TYPE_ALIASES.get(parts[1], parts[1]), parts[2]))
    if found != expected:
        raise PlyError(f'{path}: vertex properties {found} are not supported: expected '
                       f'{expected}')
    body = data[end + len(b'end_header\n'):]
    if len(body) != count * VERTEX_DTYPE.itemsize:
        raise PlyError(f'{path}: {len(body)} bytes of vertex data for {count} vertices: '
                       f'expected {count * VERTEX_DTYPE.itemsize}')
    vertices = np.frombuffer(body, VERTEX_DTYPE)
    xyz = np.stack([vertices['x'], vertices['y'], vertices['z']], axis=1)
    rgb = np.stack([vertices['red'], vertices['green'], vertices['blue']], axis=1)
    return xyz, rgb, vertices['confidence'].copy()
