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
``resume_state`` at configure: each camera continues the map ``~/save_state`` saved.

configure runs this in two steps, before any thread touches a camera:
:func:`resume_sessions` right after the sessions are built (each session takes its saved
state before its first frame; a refusal fails configure, or with
``resume_required: false`` leaves that camera fresh and says so), and
:func:`apply_resumes` once the cameras and the map thread exist (the voxel map goes back
to the map thread, the published track is rebuilt from the session's trajectory, so
``~/path``, ``~/save_trajectory`` and the next odometry continue from the saved poses).
Nothing here imports rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence

from lingbot_ros.ros import messages, path_cdr
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.conventions import map_from_optical
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.outputs import camera_frames
from lingbot_ros.ros.resume_status import ResumeOutcome, ResumeStatus
from lingbot_ros.streaming.errors import StateError
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.parameters import Params

STATE_SUFFIX = '_state.safetensors'   # ~/save_state writes <trajectory_dir>/<camera><this>


def state_file(folder: Path, camera: str) -> Path:
    """Return the file ``~/save_state`` writes for a camera (each save replaces it)."""
    return folder / f'{camera}{STATE_SUFFIX}'


def resume_paths(params: Params, names: Sequence[str]) -> List[Path]:
    """Return each camera's resume file ([] when ``resume_state`` is empty)."""
    pattern = params.resume_state
    return [Path(pattern.format(camera=name)).expanduser() for name in names] if pattern \
        else []


@dataclass(frozen=True)
class Resumed:
    """One camera's resume at configure: what to report, and its saved voxel map."""

    status: ResumeStatus
    voxels: Optional[MapVoxels] = None


def resume_sessions(engine: Any, sessions: Sequence[Any], names: Sequence[str],
                    params: Params, log: Any) -> List[Resumed]:
    """
    Start each session from its file (none before its first frame); return the outcomes.

    A refused state (another model, checkpoint, dtype or settings; missing, cut short,
    corrupt, newer) leaves its session fresh. With ``resume_required`` the first refusal
    raises :class:`StateError`, one line naming the camera and what differs; without,
    the camera starts a new map and a WARN says why.
    """
    paths, required = resume_paths(params, names), params.resume_required
    if not paths:
        return []
    from lingbot_ros.streaming.state import load_into, read_voxels
    identity = engine.state_identity()
    out = []
    for name, session, path in zip(names, sessions, paths):
        try:
            voxels = read_voxels(path)  # checked whole before the session changes
            load_into(session, path, identity)
        except StateError as exc:
            if required:
                raise StateError(f'camera {name}: {exc}') from exc
            log.warning(f'[{name}] resume refused, starting a new map (resume_required is '
                        f'false): {exc}')
            out.append(Resumed(ResumeStatus(str(path), ResumeOutcome.REFUSED, reason=str(exc))))
            continue
        stats = session.stats()
        log.info(f'[{name}] resumed from {path}: frame {session.frames_seen}, window '
                 f'{stats.window_index}, {stats.keyframes} keyframes; the next frame '
                 'continues the saved map')
        out.append(Resumed(ResumeStatus(str(path), ResumeOutcome.RESUMED,
                                        report=session.resume_report), voxels))
    return out


def apply_resumes(resumed: Sequence[Resumed], cameras: Sequence[CameraStream],
                  maps: MapThread, params: Params, log: Any) -> None:
    """Give each resumed camera its saved map and track; note every outcome on the camera."""
    for cam, r in zip(cameras, resumed):
        if r.status.outcome is ResumeOutcome.RESUMED:
            note = _restore_map(cam, maps, r.voxels, params, log)
            _rebuild_track(cam, cameras, params)
            cam.cache_stats = cam.session.stats()
            cam.resume = ResumeStatus(r.status.path, r.status.outcome, report=r.status.report,
                                      resets=cam.counters.session_resets, map_note=note)
        else:
            cam.resume = r.status


def _restore_map(cam: CameraStream, maps: MapThread, voxels: Optional[MapVoxels],
                 params: Params, log: Any) -> str:
    """Put the saved voxels back into the camera's map; return what became of them."""
    if voxels is None:
        return 'none in the file'
    here = params.map_convention.value
    why = None
    if voxels.frame != here:
        why = f'saved in map_convention {voxels.frame!r}, {here!r} here'
    else:
        try:
            dropped = maps.restore(cam.index, voxels)
        except ValueError as exc:
            why = str(exc)
        else:
            return f'{len(voxels) - dropped} voxels restored' + (
                f' ({dropped} over map_max_points dropped)' if dropped else '')
    log.warning(f'[{cam.name}] saved map not restored ({why}): the map restarts from the '
                'next keyframes')
    return f'not restored: {why}'


def _rebuild_track(cam: CameraStream, cameras: Sequence[CameraStream], params: Params) -> None:
    """Fill the camera's published track with the session's trajectory, as it was sent."""
    to_map = map_from_optical(params.map_convention)
    map_frame = camera_frames(params, list(cameras), cam)[0]
    records = list(cam.session.trajectory)
    first_path = len(records) - params.path_max_length  # older poses left ~/path already
    for i, (stamp, pose_c2w) in enumerate(records):
        pose = to_map @ pose_c2w
        path_pose = None
        if params.publish_path and i >= first_path:
            path_pose = path_cdr.pose_cdr(messages.pose_stamped(pose, stamp, map_frame))
        cam.track.add(stamp, pose, path_pose, params.path_max_length)
