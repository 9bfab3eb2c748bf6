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
A run as a COLMAP model: what nerfstudio, gsplat and other splat / NeRF trainers read.

Layout of the folder written by :func:`write_colmap`::

    DIR/images/<frame>.jpg        the keyframes as the model saw them (the model grid)
    DIR/sparse/0/cameras.txt|bin  one PINHOLE camera per image, at that image's size
    DIR/sparse/0/images.txt|bin   world-to-camera pose of each image
    DIR/sparse/0/points3D.txt|bin the accumulated map: xyz, rgb, an error, empty tracks

Both the text and the binary form are written (some readers take only one of them);
they hold the same numbers. Facts of the format used here: camera and image ids start
at 1; an image's pose is ``qw qx qy qz tx ty tz`` of ``R_cw, t_cw`` (world to camera,
camera axes x right, y down, z forward: the optical frame our poses are of); pixel
coordinates are continuous with the image's top-left corner at (0, 0), so the centre of
pixel ``u`` is at ``u + 0.5``. This package (like ROS's ``camera_info``) puts that centre
at ``u``: depth pixel ``u`` is unprojected with ``x = (u - cx) z / fx``. So ``cx`` and
``cy`` are written 0.5 larger, and every map point projects onto the centre of the
pixel it came from.

What is not known is written as such: no 2D keypoints (every image's POINTS2D line is
empty) and no tracks (which images saw a point is not recorded by the voxel map). The
ERROR of a point is not a reprojection error: it is ``1 / confidence`` of the map's most
confident observation (the model's confidence is > 1, so the error is in (0, 1), lower
is better as readers assume), or -1 (COLMAP's "unknown") without a confidence. The
scale is the model's (arbitrary units), and the world is the frame the poses are in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from pathlib import Path
import struct
from typing import Deque, Iterable, Optional, Sequence, Union

import cv2
from lingbot_ros.streaming.atomic import atomic_folder
from lingbot_ros.streaming.map_cloud import MapPoints
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.trajectory import invert_rigid, matrix_to_quat
import numpy as np

PathLike = Union[str, Path]
PINHOLE_ID = 1  # COLMAP's camera model id of PINHOLE (fx, fy, cx, cy)
JPEG_QUALITY = 90
MODEL_ENTRIES = ('images', 'sparse')  # what a model folder holds (and may be replaced)
_POINT_BIN = np.dtype([('id', '<u8'), ('xyz', '<f8', 3), ('rgb', 'u1', 3), ('error', '<f8'),
                       ('track', '<u8')])


@dataclass(frozen=True)
class KeyframeImage:
    """
    One keyframe as COLMAP will see it: its picture (JPEG bytes) and its camera.

    ``pose_c2w`` maps the optical camera frame into the world of the model (the same
    world the points are in); ``intrinsics`` are pinhole pixels of the JPEG's own size.
    """

    name: str
    pose_c2w: np.ndarray  # [4, 4] float64
    intrinsics: np.ndarray  # [3, 3] float64
    width: int
    height: int
    jpeg: bytes
    epoch: int = 0  # map_epoch of the frame: images of one map only go together


def keyframe_image(result: FrameResult, pose_c2w: Optional[np.ndarray] = None,
                   quality: int = JPEG_QUALITY) -> KeyframeImage:
    """
    Compress a keyframe's model-grid colours with the model-grid intrinsics.

    The model grid is what the depth, and so every map point, was made on: written at
    that size, the images and the points agree pixel for pixel. ``pose_c2w`` (camera to
    the map frame the points were placed in) defaults to ``result.pose_c2w``.
    """
    if result.colors is None:
        raise ValueError(f'frame {result.index} has no colours to write')
    rgb = np.ascontiguousarray(result.colors, dtype=np.uint8)
    ok, buf = cv2.imencode('.jpg', cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f'frame {result.index}: JPEG encoding failed')
    pose = result.pose_c2w if pose_c2w is None else pose_c2w
    h, w = rgb.shape[:2]
    return KeyframeImage(name=f'{result.index:06d}.jpg',
                         pose_c2w=np.array(pose, dtype=np.float64),
                         intrinsics=np.array(result.intrinsics_model, dtype=np.float64),
                         width=int(w), height=int(h), jpeg=buf.tobytes(),
                         epoch=int(result.map_epoch))


class KeyframeStore:
    """
    The last ``max_keyframes`` keyframe images of one map, compressed, oldest first.

    Bounded: at most ``max_keyframes`` JPEGs (about 30-80 kB each at a 518-pixel-wide
    grid), the oldest dropped first. A keyframe of another map epoch (the session
    started a new map) empties the store first, like the voxel map. One writer; readers
    go through :meth:`images` (a copy of the list) under the owner's lock.
    """

    def __init__(self, max_keyframes: int) -> None:
        if not isinstance(max_keyframes, int) or max_keyframes < 0:
            raise ValueError(f'max_keyframes={max_keyframes!r} is invalid: expected an '
                             'integer >= 0')
        self.max_keyframes = max_keyframes
        self._images: Deque[KeyframeImage] = deque(maxlen=max(1, max_keyframes))
        self.dropped = 0  # images pushed out by the bound since the store last started

    def add(self, image: KeyframeImage) -> None:
        """Keep ``image``; a new epoch clears the store first."""
        if self.max_keyframes == 0:
            return
        if self._images and self._images[-1].epoch != image.epoch:
            self.clear()
        if len(self._images) == self._images.maxlen:
            self.dropped += 1
        self._images.append(image)

    def clear(self) -> None:
        self._images.clear()
        self.dropped = 0

    def images(self) -> list:
        return list(self._images)

    @property
    def nbytes(self) -> int:
        """Bytes of JPEG data held now."""
        return sum(len(i.jpeg) for i in self._images)

    def __len__(self) -> int:
        return len(self._images)


@dataclass(frozen=True)
class ColmapSummary:
    """What :func:`write_colmap` wrote."""

    folder: Path
    images: int
    points: int


def point_errors(confidence: np.ndarray) -> np.ndarray:
    """ERROR column of points3D: ``1 / confidence``, -1 where no confidence is known."""
    conf = np.asarray(confidence, dtype=np.float64)
    out = np.full(conf.shape, -1.0)
    known = np.isfinite(conf) & (conf > 0)
    out[known] = 1.0 / conf[known]
    return out


def world_to_camera(pose_c2w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return COLMAP's ``(q_cw as w, x, y, z; t_cw)`` of a camera-to-world pose."""
    w2c = invert_rigid(np.asarray(pose_c2w, dtype=np.float64))
    qx, qy, qz, qw = matrix_to_quat(w2c[:3, :3])
    return np.array([qw, qx, qy, qz]), w2c[:3, 3]


def write_colmap(folder: PathLike, images: Sequence[KeyframeImage],
                 points: MapPoints) -> ColmapSummary:
    """
    Write ``images`` and ``points`` as a COLMAP model in ``folder`` (see the module doc).

    The model is built in a temporary folder beside ``folder`` and renamed onto it, so
    ``folder`` holds a whole model or none (:func:`~lingbot_ros.streaming.atomic.
    atomic_folder`). A ``folder`` that exists is replaced if it holds a model (only
    ``images`` and ``sparse``) or nothing; one holding anything else is refused, never
    deleted.
    """
    if not images:
        raise ValueError('no keyframe images to write: a COLMAP model needs at least one')
    names = [i.name for i in images]
    if len(set(names)) != len(names):
        raise ValueError('keyframe image names are not distinct')
    folder = Path(folder)
    if folder.is_dir():
        other = sorted(p.name for p in folder.iterdir() if p.name not in MODEL_ENTRIES)
        if other:
            raise ValueError(f'{folder} exists and holds more than a COLMAP model '
                             f'({", ".join(other[:5])}{" ..." if len(other) > 5 else ""}): '
                             'choose a new folder')
    elif folder.exists():
        raise ValueError(f'{folder} exists and is not a folder: choose a new folder')
    folder.parent.mkdir(parents=True, exist_ok=True)
    xyz = np.asarray(points.xyz, dtype=np.float64).reshape(-1, 3)
    rgb = np.asarray(points.rgb, dtype=np.uint8).reshape(-1, 3)
    errors = point_errors(points.confidence)
    with atomic_folder(folder) as partial:
        (partial / 'images').mkdir()
        for image in images:
            (partial / 'images' / image.name).write_bytes(image.jpeg)
        sparse = partial / 'sparse' / '0'
        sparse.mkdir(parents=True)
        _write_cameras(sparse, images)
        _write_images(sparse, images)
        _write_points(sparse, xyz, rgb, errors)
    return ColmapSummary(folder, len(images), len(xyz))


PIXEL_CENTRE = 0.5  # COLMAP's centre of pixel 0 minus ours (see the module docstring)


def colmap_pinhole(intrinsics: np.ndarray) -> tuple:
    """PINHOLE params ``fx, fy, cx, cy`` in COLMAP's pixel convention from our ``K``."""
    k = np.asarray(intrinsics, dtype=np.float64)
    return (float(k[0, 0]), float(k[1, 1]), float(k[0, 2]) + PIXEL_CENTRE,
            float(k[1, 2]) + PIXEL_CENTRE)


def _write_cameras(sparse: Path, images: Sequence[KeyframeImage]) -> None:
    lines = ['# Camera list with one line of data per camera:',
             '#   CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]',
             f'# Number of cameras: {len(images)} (one per image: the model predicts '
             'intrinsics per frame)']
    blob = [struct.pack('<Q', len(images))]
    for cid, image in enumerate(images, start=1):
        params = colmap_pinhole(image.intrinsics)
        lines.append(f'{cid} PINHOLE {image.width} {image.height} '
                     + ' '.join(repr(p) for p in params))
        blob.append(struct.pack('<iiQQ4d', cid, PINHOLE_ID, image.width, image.height,
                                *params))
    (sparse / 'cameras.txt').write_text('\n'.join(lines) + '\n')
    (sparse / 'cameras.bin').write_bytes(b''.join(blob))


def _write_images(sparse: Path, images: Sequence[KeyframeImage]) -> None:
    lines = ['# Image list with two lines of data per image:',
             '#   IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME',
             '#   POINTS2D[] as (X, Y, POINT3D_ID)',
             f'# Number of images: {len(images)}, mean observations per image: 0 (no 2D '
             'keypoints: every POINTS2D line is empty)']
    blob = [struct.pack('<Q', len(images))]
    for iid, image in enumerate(images, start=1):
        q, t = world_to_camera(image.pose_c2w)
        values = ' '.join(repr(float(v)) for v in (*q, *t))
        lines += [f'{iid} {values} {iid} {image.name}', '']
        blob.append(struct.pack('<I7dI', iid, *q, *t, iid) + image.name.encode() + b'\0'
                    + struct.pack('<Q', 0))
    (sparse / 'images.txt').write_text('\n'.join(lines) + '\n')
    (sparse / 'images.bin').write_bytes(b''.join(blob))


def _write_points(sparse: Path, xyz: np.ndarray, rgb: np.ndarray, errors: np.ndarray) -> None:
    n = len(xyz)
    header = ['# 3D point list with one line of data per point:',
              '#   POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[] as (IMAGE_ID, POINT2D_IDX)',
              f'# Number of points: {n}, mean track length: 0 (tracks are empty: the '
              'voxel map does not record which images saw a point)',
              '# ERROR is 1 / confidence of the most confident observation (-1: unknown), '
              'not a reprojection error']
    rows = _text_rows(np.arange(1, n + 1), xyz, rgb, errors)
    (sparse / 'points3D.txt').write_text('\n'.join(header + rows) + '\n')
    rec = np.zeros(n, _POINT_BIN)
    rec['id'], rec['xyz'], rec['rgb'], rec['error'] = np.arange(1, n + 1), xyz, rgb, errors
    (sparse / 'points3D.bin').write_bytes(struct.pack('<Q', n) + rec.tobytes())


def _text_rows(ids: np.ndarray, xyz: np.ndarray, rgb: np.ndarray,
               errors: np.ndarray) -> Iterable[str]:
    """One text line per point; float32 map coordinates survive ``%.9g`` exactly."""
    columns = zip(ids.tolist(), xyz.tolist(), rgb.tolist(), errors.tolist())
    return [f'{i} {x:.9g} {y:.9g} {z:.9g} {r} {g} {b} {e:.9g}'
            for i, (x, y, z), (r, g, b), e in columns]
