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
A procedurally rendered image sequence with known camera motion: the demo's input.

A textured box-shaped room (floor, ceiling, three walls) is ray-cast with numpy for
each camera pose of a smooth forward-and-turn path; textures are seeded noise and
grid lines, so every run renders the same pixels and no external images are needed.
Poses are camera-to-world in OpenCV optical axes (x right, y down, z forward), the
same convention as the model's outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

ROOM = {'x': (-3.0, 3.0), 'y': (-1.5, 1.2), 'z': (-2.0, 9.0)}  # metres; y down
TEXTURE = 512


@dataclass(frozen=True)
class Frame:
    """One rendered view: RGB pixels, the true camera-to-world pose and the intrinsics."""

    index: int
    image: np.ndarray     # [H, W, 3] uint8 RGB
    pose_c2w: np.ndarray  # [4, 4]
    intrinsics: np.ndarray  # [3, 3]


def _texture(seed: int, tint: tuple) -> np.ndarray:
    rng = np.random.default_rng(seed)
    base = np.zeros((TEXTURE, TEXTURE), np.float32)
    for octave, weight in ((8, 0.5), (32, 0.3), (128, 0.2)):
        noise = rng.random((octave, octave)).astype(np.float32)
        base += weight * cv2.resize(noise, (TEXTURE, TEXTURE), interpolation=cv2.INTER_CUBIC)
    blobs = np.zeros_like(base)
    for _ in range(60):
        centre = tuple(int(v) for v in rng.integers(0, TEXTURE, 2))
        cv2.circle(blobs, centre, int(rng.integers(6, 30)), float(rng.random()), -1)
    img = np.clip(0.6 * base + 0.4 * blobs, 0, 1)
    img[::64, :] = img[:, ::64] = 0.05  # grid lines: strong corners for the model
    rgb = np.stack([img * t for t in tint], axis=-1)
    return np.ascontiguousarray(np.clip(rgb * 255, 0, 255).astype(np.uint8))


def _planes(seed: int) -> list:
    """(axis, value, texture, (u axis, v axis)) for the six room faces."""
    tints = [(1.0, 0.85, 0.7), (0.7, 0.8, 1.0), (0.8, 1.0, 0.75), (1.0, 0.75, 0.9),
             (0.9, 0.9, 0.9), (0.75, 0.95, 1.0)]
    faces = [('y', ROOM['y'][1], ('x', 'z')), ('y', ROOM['y'][0], ('x', 'z')),
             ('x', ROOM['x'][0], ('z', 'y')), ('x', ROOM['x'][1], ('z', 'y')),
             ('z', ROOM['z'][1], ('x', 'y')), ('z', ROOM['z'][0], ('x', 'y'))]
    return [(a, v, _texture(seed + i, tints[i]), uv) for i, (a, v, uv) in enumerate(faces)]


def trajectory(n: int) -> list:
    """Return camera-to-world poses of a smooth walk forward with a slow turn and bob."""
    poses = []
    for i in range(n):
        s = i / max(1, n - 1)
        yaw = 0.35 * np.sin(2 * np.pi * s)
        pitch = 0.08 * np.sin(4 * np.pi * s)
        cy, sy, cp, sp = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch)
        r_yaw = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
        r_pitch = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
        pose = np.eye(4)
        pose[:3, :3] = r_yaw @ r_pitch
        pose[:3, 3] = [0.8 * np.sin(np.pi * s), 0.05 * np.sin(6 * np.pi * s), 3.5 * s]
        poses.append(pose)
    return poses


def intrinsics(width: int, height: int, fov_deg: float = 70.0) -> np.ndarray:
    f = 0.5 * width / np.tan(np.radians(fov_deg) / 2)
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1.0]])


def depth(pose: np.ndarray, k: np.ndarray, width: int, height: int,
          pixel_offset: float = 0.0) -> np.ndarray:
    """
    Return the room's ground-truth z-depth seen from ``pose`` (float32, [height, width]).

    The nearest wall along each pixel ray. Pixel u's ray goes through x = (u + offset -
    cx) / fx: ``pixel_offset`` 0 is the convention the node unprojects depth with, 0.5 the
    pixel centres :func:`render` samples.
    """
    u, v = np.meshgrid(np.arange(width) + pixel_offset, np.arange(height) + pixel_offset)
    rays = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones(u.shape)], -1)
    dirs = rays @ pose[:3, :3].T
    best = np.full((height, width), np.inf)
    for axis, name in enumerate('xyz'):
        for wall in ROOM[name]:
            with np.errstate(divide='ignore', invalid='ignore'):
                t = (wall - pose[axis, 3]) / dirs[..., axis]
            best = np.where((t > 0) & (t < best), t, best)
    return best.astype(np.float32)  # rays have z = 1: the ray parameter is the z-depth


def render(pose: np.ndarray, k: np.ndarray, width: int, height: int, planes: list) -> np.ndarray:
    """Ray-cast the room from ``pose``; nearest face wins; bilinear texture lookup."""
    u, v = np.meshgrid(np.arange(width) + 0.5, np.arange(height) + 0.5)
    rays = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1)
    dirs = rays @ pose[:3, :3].T
    origin = pose[:3, 3]
    axis = {'x': 0, 'y': 1, 'z': 2}
    best = np.full((height, width), np.inf)
    out = np.zeros((height, width, 3), np.float32)
    for name, value, tex, (ua, va) in planes:
        a = axis[name]
        with np.errstate(divide='ignore', invalid='ignore'):
            t = (value - origin[a]) / dirs[..., a]
        hit = (t > 1e-6) & (t < best)
        if not hit.any():
            continue
        pts = origin + dirs * t[..., None]
        scale = TEXTURE / 4.0  # texture repeats every 4 m
        map_u = np.mod(pts[..., axis[ua]] * scale, TEXTURE).astype(np.float32)
        map_v = np.mod(pts[..., axis[va]] * scale, TEXTURE).astype(np.float32)
        sampled = cv2.remap(tex, map_u, map_v, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
        shade = np.clip(1.2 - 0.06 * t, 0.35, 1.0)[..., None]  # distance fog: depth cue
        out[hit] = (sampled * shade)[hit]
        best[hit] = t[hit]
    return np.clip(out, 0, 255).astype(np.uint8)


def frames(n: int, width: int = 320, height: int = 240, seed: int = 7) -> Iterator[Frame]:
    """Render ``n`` frames of the walk (lazily: one at a time)."""
    planes = _planes(seed)
    k = intrinsics(width, height)
    for i, pose in enumerate(trajectory(n)):
        yield Frame(i, render(pose, k, width, height, planes), pose, k)


def write(folder: Path, n: int, width: int = 320, height: int = 240, seed: int = 7) -> Path:
    """
    Render to ``folder``: frame_00000.png ... and groundtruth.tum (TUM, seconds = index).

    The folder appears whole once every frame is in (an existing one must be empty).
    """
    from lingbot_ros.streaming.atomic import atomic_folder
    from lingbot_ros.streaming.trajectory import write_tum
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise FileExistsError(f'{folder} exists and is not an empty folder')
    folder.parent.mkdir(parents=True, exist_ok=True)
    poses = []
    with atomic_folder(folder) as partial:
        for f in frames(n, width, height, seed):
            if not cv2.imwrite(str(partial / f'frame_{f.index:05d}.png'), f.image[..., ::-1]):
                raise OSError(f'cannot write frame {f.index} into {partial}')
            poses.append(f.pose_c2w)
        write_tum(partial / 'groundtruth.tum', [float(i) for i in range(n)], poses)
    return folder
