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
The node's services: reset, and the saves of trajectory, map, COLMAP model and state.

``~/reset``, ``~/save_trajectory``, ``~/save_map``, ``~/save_colmap``, ``~/save_state``
(its work in :mod:`~lingbot_ros.ros.state_service`).

Created by configure and destroyed by cleanup (the lifecycle thread); the handlers run in
the node's service callback group, one at a time. They only read what the node offers in
public (:class:`ServedNode`: its params, cameras, engine, worker and map thread), so this
module does not import the node; ``~/reset`` and ``~/save_state`` hand their work to the
worker and wait for it on a future, so no executor thread blocks meanwhile.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Callable, List, Optional, Protocol, Sequence, Tuple

from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.map_thread import MapThread, save_colmap
from lingbot_ros.ros.state_service import Exports, save_state, wait_for_worker
from lingbot_ros.ros.worker import Worker
from lingbot_ros.streaming.parameters import Params
from lingbot_ros.streaming.ply import write_ply
from lingbot_ros.streaming.trajectory import write_npz, write_tum
import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.clock import Clock
from rclpy.executors import Executor
from std_srvs.srv import Trigger

RESET_WAIT_S = 60.0        # ~/reset answers 'still waiting' after this long
SAVE_DRAIN_S = 10.0        # ~/save_map waits this long for queued keyframes to merge


class ServedNode(Protocol):
    """What the services use of the node: rclpy's Node, and what a configured one holds."""

    params: Optional[Params]
    cameras: list
    engine: Any
    executor: Optional[Executor]

    @property
    def worker(self) -> Optional[Worker]: ...

    @property
    def maps(self) -> Optional[MapThread]: ...

    @property
    def outputs(self) -> Exports: ...

    @property
    def steady_clock(self) -> Clock: ...

    def camera_frames(self, cam: CameraStream) -> tuple: ...

    def create_service(self, *args: Any, **kwargs: Any) -> Any: ...

    def destroy_service(self, service: Any) -> Any: ...

    def create_timer(self, *args: Any, **kwargs: Any) -> Any: ...

    def destroy_timer(self, timer: Any) -> Any: ...

    def get_logger(self) -> Any: ...


class Services:
    """The five services of a configured node, and their handlers."""

    def __init__(self, node: ServedNode, group: CallbackGroup) -> None:
        """Register the services in ``group`` (the node's service callback group)."""
        self._node = node
        self._group = group
        self._handles = [
            node.create_service(Trigger, '~/reset', self._on_reset, callback_group=group),
            node.create_service(Trigger, '~/save_trajectory', self._on_save, callback_group=group),
            node.create_service(Trigger, '~/save_map', self._on_save_map, callback_group=group),
            node.create_service(Trigger, '~/save_colmap', self._on_save_colmap,
                                callback_group=group),
            node.create_service(Trigger, '~/save_state', self._on_save_state,
                                callback_group=group)]

    def destroy(self) -> None:
        """Take the services down (cleanup, shutdown, error or exit)."""
        for srv in self._handles:
            self._node.destroy_service(srv)
        self._handles = []

    def _logged(self, response: Trigger.Response) -> Trigger.Response:
        """Log a save service's answer (what was written) and return it."""
        self._node.get_logger().info(response.message)
        return response

    async def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        """
        Rebuild every session; answered once the worker did it, without blocking a thread.

        The worker serves the reset between two frames. This coroutine waits on a future
        the worker completes, so the executor goes on running image callbacks and
        diagnostics meanwhile; after RESET_WAIT_S it answers that the reset is still
        pending (it then runs before the next frame).
        """
        node = self._node
        worker = node.worker
        if worker is None:
            response.success, response.message = False, 'not configured: nothing to reset'
            return response
        done = await wait_for_worker(node, self._group, RESET_WAIT_S,
                                     lambda finished: worker.request_reset(on_done=finished))
        response.success = done
        response.message = (f'reset {len(node.cameras)} session(s): the next frames start a '
                            'new map' if done else
                            f'reset still pending after {RESET_WAIT_S:.0f} s (the worker is '
                            'inside a step); it runs before the next frame')
        node.get_logger().info(response.message)
        return response

    async def _on_save_state(self, request: Trigger.Request,
                             response: Trigger.Response) -> Any:
        """Write each camera's stream state and map into trajectory_dir (state_service)."""
        return await save_state(self._node, self._group, response)

    def _on_save(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        node = self._node
        if node.params is None:
            response.success, response.message = False, 'not configured: no trajectory'
            return response
        folder = Path(node.params.trajectory_dir).expanduser()
        try:
            written, empty = save_trajectories(
                folder, node.cameras, node.camera_frames, node.params.map_convention.value)
        except OSError as exc:
            response.success, response.message = False, f'cannot write to {folder}: {exc}'
            return response
        return _answer(response, written, empty, 'poses')

    def _on_save_map(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        """Write each camera's map (binary PLY) and trajectory (TUM) into trajectory_dir."""
        node = self._node
        maps, params = node.maps, node.params
        if maps is None or params is None:
            response.success, response.message = False, 'not configured: no map'
            return response
        if not params.publish_map:
            response.success = False
            response.message = 'publish_map is false: no map is accumulated (set it true)'
            return response
        maps.drain(SAVE_DRAIN_S)  # keyframes already handed over belong in the file
        folder = Path(params.trajectory_dir).expanduser()
        try:
            written, empty = save_maps(folder, node.cameras, maps)
        except OSError as exc:
            response.success, response.message = False, f'cannot write to {folder}: {exc}'
            return response
        return self._logged(_answer(response, written, empty, 'map points'))

    def _on_save_colmap(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        """Write each camera's kept keyframes and map as a COLMAP model into trajectory_dir."""
        node = self._node
        maps, params = node.maps, node.params
        refusal = ('not configured: no map' if maps is None or params is None else
                   'publish_map is false: no map is accumulated (set it true)'
                   if not params.publish_map else
                   'colmap_max_keyframes is 0: no keyframe image is kept (set it > 0 and '
                   'restart)' if not maps.max_keyframe_images else None)
        if refusal:
            response.success, response.message = False, refusal
            return response
        maps.drain(SAVE_DRAIN_S)  # keyframes already handed over belong in the model
        folder = Path(params.trajectory_dir).expanduser()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            when = datetime.now().strftime('%Y%m%d-%H%M%S-%f')  # two calls never share one
            written, empty = save_colmap(maps, [c.name for c in node.cameras], folder, when)
        except OSError as exc:
            response.success, response.message = False, f'cannot write to {folder}: {exc}'
            return response
        return self._logged(_answer(response, written, empty, 'keyframe images'))


def _trajectory(cam: CameraStream) -> Optional[tuple]:
    """Return a camera's published (stamps_ns [N], poses [N, 4, 4]), or None before any."""
    records = cam.track.records()
    if not records:
        return None
    return (np.array([s for s, _ in records], dtype=np.int64),
            np.stack([p for _, p in records]))


def save_trajectories(folder: Path, cameras: Sequence[CameraStream],
                      frames: Callable[[CameraStream], tuple],
                      convention: str) -> Tuple[List[str], List[str]]:
    """
    Write each camera's published poses as ``<camera>_<time>.tum`` and ``.npz``.

    ``frames(camera)`` names its (map frame, tracked frame, ...). Returns (files written,
    cameras without a pose yet). Each file appears whole or not at all; never overwrites.
    """
    written, empty = [], []
    folder.mkdir(parents=True, exist_ok=True)
    when = _now_text()
    for cam in cameras:
        track = _trajectory(cam)
        if track is None:
            empty.append(cam.name)
            continue
        stamps, poses = track
        base = _fresh(folder / f'{cam.name}_{when}', ('.tum', '.npz'))
        write_tum(base.with_suffix('.tum'), stamps * 1e-9, poses)
        map_frame, child = frames(cam)[:2]
        write_npz(base.with_suffix('.npz'), {
            'stamps_ns': stamps, 'poses': poses,
            'map_frame': np.array(map_frame), 'camera_frame': np.array(child),
            'map_convention': np.array(convention)})
        written += [str(base.with_suffix('.tum')), str(base.with_suffix('.npz'))]
    return written, empty


def save_maps(folder: Path, cameras: Sequence[CameraStream],
              maps: MapThread) -> Tuple[List[str], List[str]]:
    """
    Write each camera's map as ``<camera>_<time>_map.ply`` and its poses as ``.tum``.

    Returns (files written, cameras without a map point yet). Each file appears whole or
    not at all; never overwrites.
    """
    written, empty = [], []
    folder.mkdir(parents=True, exist_ok=True)
    when = _now_text()
    for cam in cameras:
        points, _ = maps.snapshot(cam.index)
        if points.xyz.shape[0] == 0:
            empty.append(cam.name)
            continue
        base = _fresh(folder / f'{cam.name}_{when}', ('.tum', '_map.ply'))
        ply = base.with_name(base.name + '_map.ply')
        write_ply(ply, points.xyz, points.rgb, points.confidence)
        written.append(str(ply))
        track = _trajectory(cam)
        if track is not None:
            write_tum(base.with_suffix('.tum'), track[0] * 1e-9, track[1])
            written.append(str(base.with_suffix('.tum')))
    return written, empty


def _now_text() -> str:
    """Return local time to the millisecond for file names, e.g. 20260101-120000-123."""
    return datetime.now().strftime('%Y%m%d-%H%M%S-%f')[:-3]


def _fresh(base: Path, endings: tuple) -> Path:
    """Return ``base``, or ``base_2``, ``base_3`` ...: the first no earlier save used."""
    candidate, n = base, 1
    while any(candidate.with_name(candidate.name + e).exists() for e in endings):
        n += 1
        candidate = base.with_name(f'{base.name}_{n}')
    return candidate


def _answer(response: Any, written: list, empty: list, what: str) -> Any:
    """Fill a save service's answer: the files written, and the cameras with nothing yet."""
    response.success = bool(written)
    parts = (['wrote ' + ', '.join(written)] if written else []) + (
        [f'no {what} yet for ' + ', '.join(empty)] if empty else [])
    response.message = '; '.join(parts)
    return response
