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
The accumulated maps, built off the worker's critical path.

Merging a keyframe into a voxel map costs a few milliseconds of numpy; the GPU worker only
hands the keyframe over (a bounded queue: when the map thread falls behind, the oldest
waiting keyframe is skipped and counted, never the worker held up). One thread writes the
clouds; readers (the publish timer, ``~/save_map``) take :meth:`MapThread.snapshot`, which
copies under the camera's lock. A reset of a camera's session is queued in order with its
keyframes, so points of the old map never land in the new one. The same thread keeps each
camera's last keyframe images (JPEG, at most ``max_keyframe_images``) beside its map, so
``~/save_colmap`` can write a COLMAP model at any time. ``~/save_state`` copies a camera's
voxels out through :meth:`MapThread.export`, queued in order with its keyframes like a
reset; a resume puts them back with :meth:`MapThread.restore` before the thread runs.
Nothing here imports rclpy.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future
import dataclasses
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
import threading
from typing import Deque, Optional

from lingbot_ros.streaming.colmap import (ColmapSummary, keyframe_image, KeyframeStore,
                                          write_colmap)
from lingbot_ros.streaming.map_cloud import AddOutcome, MapCloud, MapCloudConfig, MapStats
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.result import FrameResult
import numpy as np

QUEUE_FRAMES = 8  # keyframes waiting per camera before the oldest is skipped


class JobKind(Enum):
    """What the map thread does with one queued job."""

    ADD = 'add'
    CLEAR = 'clear'
    EXPORT = 'export'


@dataclass(frozen=True)
class _Job:
    kind: JobKind
    camera: int
    result: Optional[FrameResult] = None
    pose_map: Optional[np.ndarray] = None
    exported: Optional[Future] = None  # EXPORT: set to the camera's MapVoxels


@dataclass(frozen=True)
class MapCounters:
    """What /diagnostics says about one camera's map."""

    points: int = 0          # voxels held now (at most max_points)
    keyframes: int = 0       # keyframes merged into the current cloud
    dropped_points: int = 0  # voxels dropped at the bound, least recently observed first
    skipped_keyframes: int = 0  # keyframes never merged: the map thread was behind
    restarts: int = 0        # clouds started over (new map epoch, reset, voxel size change)
    version: int = 0         # changes with every merge or clear: "is there news to send"
    stamp_ns: int = 0        # stamp of the last keyframe merged


class _CameraMap:
    def __init__(self, cfg: MapCloudConfig, max_images: int) -> None:
        self.lock = threading.Lock()
        self.cloud = MapCloud(cfg)
        self.images = KeyframeStore(max_images)  # written by the map thread only
        self.counters = MapCounters()


class MapThread:
    """One thread, one voxel map per camera; see the module docstring."""

    def __init__(self, cameras: int, config: MapCloudConfig,
                 queue_frames: int = QUEUE_FRAMES, max_keyframe_images: int = 0) -> None:
        self._maps = [_CameraMap(config, max_keyframe_images) for _ in range(cameras)]
        self.max_keyframe_images = max_keyframe_images
        self._queue: Deque[_Job] = deque()
        self._per_camera = max(1, int(queue_frames))
        self._cond = threading.Condition()
        self._thread: Optional[threading.Thread] = None
        self._stop = False
        self._busy = False
        self._counter_lock = threading.Lock()  # worker, map thread and executor all count
        self.errors: list = []  # (camera, text) of merges that raised; the thread goes on

    # --- producers (the worker) --------------------------------------------------------

    def submit(self, camera: int, result: FrameResult, pose_map: np.ndarray) -> None:
        """Queue a keyframe for merging; skip (and count) the oldest one when behind."""
        with self._cond:
            waiting = [j for j in self._queue if j.camera == camera and j.kind == JobKind.ADD]
            if len(waiting) >= self._per_camera:
                self._queue.remove(waiting[0])
                self._count(camera, skipped_keyframes=1)
            self._queue.append(_Job(JobKind.ADD, camera, result, np.array(pose_map)))
            self._cond.notify()

    def clear(self, camera: int) -> None:
        """Start this camera's cloud over, after the keyframes already queued."""
        with self._cond:
            self._queue.append(_Job(JobKind.CLEAR, camera))
            self._cond.notify()

    def export(self, camera: int) -> Future:
        """Copy this camera's voxels out after the keyframes already queued (a Future)."""
        done: Future = Future()
        with self._cond:
            self._queue.append(_Job(JobKind.EXPORT, camera, exported=done))
            self._cond.notify()
        return done

    def restore(self, camera: int, voxels: MapVoxels) -> int:
        """
        Hold saved voxels as this camera's map (a resume); return those over the bound.

        ValueError (the map unchanged) for voxels of another voxel size or that cannot be
        a map's. For configure, before keyframes of the camera are queued.
        """
        cam = self._maps[camera]
        with cam.lock:
            dropped = cam.cloud.import_voxels(voxels)
            stats = cam.cloud.stats()
        self._count(camera, stats, version=1)
        return dropped

    def set_config(self, config: MapCloudConfig) -> None:
        """Apply new map parameters to every camera (a new voxel size restarts the clouds)."""
        for i, cam in enumerate(self._maps):
            with cam.lock:
                restarts = int(config.voxel_size != cam.cloud.config.voxel_size)
                cam.cloud.set_config(config)
                stats = cam.cloud.stats()
            self._count(i, stats, restarts=restarts, version=1)

    # --- readers -----------------------------------------------------------------------

    def snapshot(self, camera: int) -> tuple:
        """Return (MapPoints copy, MapCounters) of one camera, consistent with each other."""
        cam = self._maps[camera]
        with cam.lock:
            return cam.cloud.snapshot(), cam.counters

    def rows(self, camera: int) -> tuple:
        """Return one camera's map as packed float32 points (what ~/map_points sends), counters."""
        cam = self._maps[camera]
        with cam.lock:
            return cam.cloud.rows(), cam.counters

    def keyframe_images(self, camera: int) -> tuple:
        """Return (MapPoints copy, [KeyframeImage]) of one camera, of the same instant."""
        cam = self._maps[camera]
        with cam.lock:
            return cam.cloud.snapshot(), cam.images.images()

    def write_colmap(self, camera: int, folder: Path) -> Optional[ColmapSummary]:
        """Write one camera's keyframe images and map as a COLMAP model; None if no image."""
        points, images = self.keyframe_images(camera)
        if not images:
            return None
        return write_colmap(folder, images, points)

    def counters(self, camera: int) -> MapCounters:
        return self._maps[camera].counters

    def pending(self) -> int:
        with self._cond:
            return len(self._queue)

    # --- the thread ----------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name='lingbot-map', daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued job is done (for tests and for ~/save_map)."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def _loop(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._stop)
                if self._stop:
                    return
                job = self._queue.popleft()
                self._busy = True
            try:
                self.run(job)
            except Exception as exc:  # noqa: BLE001 (a bad frame must not end the maps)
                self.errors.append((job.camera, f'{type(exc).__name__}: {exc}'))
                del self.errors[:-10]
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def run(self, job: _Job) -> None:
        """Do one job (the thread's body; tests call it directly)."""
        cam = self._maps[job.camera]
        if job.kind == JobKind.EXPORT:
            try:
                with cam.lock:
                    job.exported.set_result(cam.cloud.export_voxels())
            except Exception as exc:  # noqa: BLE001 (the caller says what went wrong)
                job.exported.set_exception(exc)
            return
        if job.kind == JobKind.CLEAR:
            with cam.lock:
                had = cam.cloud.points > 0
                cam.cloud.clear()
                cam.images.clear()
                stats = cam.cloud.stats()
            self._count(job.camera, stats, restarts=int(had), version=1)
            return
        image = None  # compressed outside the lock: readers never wait for the encoder
        if self.max_keyframe_images and job.result.is_keyframe and job.result.depth is not None \
                and job.result.colors is not None:
            image = keyframe_image(job.result, job.pose_map)
        with cam.lock:
            report = cam.cloud.add(job.result, job.pose_map)
            if image is not None and report.outcome == AddOutcome.ADDED:
                cam.images.add(image)
            stats = cam.cloud.stats()
        added = report.outcome == AddOutcome.ADDED
        self._count(job.camera, stats, job.result.stamp_ns if added else None,
                    restarts=int(report.new_epoch), version=int(added))

    def _count(self, camera: int, stats: Optional[MapStats] = None,
               stamp_ns: Optional[int] = None, **add: int) -> None:
        """
        Replace a camera's counters: the cloud's own numbers (``stats``), plus increments.

        A frozen value replaced whole, under one lock (the worker, the map thread and the
        executor all count): readers never see half of an update.
        """
        with self._counter_lock:
            cam = self._maps[camera]
            c = cam.counters
            changes = {name: getattr(c, name) + n for name, n in add.items()}
            if stats is not None:
                changes.update(points=stats.points, keyframes=stats.keyframes,
                               dropped_points=stats.dropped_points)
            if stamp_ns is not None:
                changes['stamp_ns'] = stamp_ns
            cam.counters = dataclasses.replace(c, **changes)


def save_colmap(maps: MapThread, names: list, folder: Path, when: str) -> tuple:
    """
    Write each camera's COLMAP model into ``folder/<name>_<when>_colmap``; never overwrite.

    Returns (folders written, names of cameras without a keyframe image yet). A folder
    that exists already (two calls within the stamp's resolution) gets a ``_2``, ``_3``...
    suffix instead.
    """
    written, empty = [], []
    for index, name in enumerate(names):
        base = folder / f'{name}_{when}_colmap'
        target, n = base, 1
        while target.exists():
            n += 1
            target = base.with_name(f'{base.name}_{n}')
        if maps.write_colmap(index, target) is None:
            empty.append(name)
        else:
            written.append(str(target))
    return written, empty
