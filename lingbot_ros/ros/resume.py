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
:func:`resume_sessions` right after the sessions are built (each file is read whole,
then each session takes its saved state before its first frame; a refusal fails
configure, or with ``resume_required: false`` leaves that camera fresh and says so), and
:func:`apply_resumes` once the cameras, the map thread and the scale feed exist: the
camera's metric scale goes back to its :class:`~lingbot_ros.ros.camera_scale.CameraScale`
(estimator, metric frame, ``map -> odom`` anchor, published frame), the voxel map to the
map thread and the published track to the camera, so that ``~/pose``, ``~/path``,
``~/save_trajectory``, ``map -> odom`` and the next odometry continue in the same frame
and units. A saved scale the camera cannot take (another ``scale_source`` or
``fixed_scale``, the other role towards ``map -> odom``) is said in one line and the
camera's scale starts over; outputs saved in metres then start over too, so that nothing
mixes frames. A file without a track (saved by the replay tool) gets the track rebuilt
from the session's trajectory, in model units. Nothing here imports rclpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple

from lingbot_ros.ros import messages, path_cdr
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.camera_scale import CameraScale
from lingbot_ros.ros.conventions import map_from_optical
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.outputs import camera_frames
from lingbot_ros.ros.resume_status import ResumeOutcome, ResumeStatus
from lingbot_ros.ros.scale_feed import ScaleFeed
from lingbot_ros.streaming.errors import StateError
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.parameters import Params
from lingbot_ros.streaming.scale.metric import FrameKind
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.trajectory import PublishedTrack

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
    """One camera's resume at configure: what to report, and what it had published."""

    status: ResumeStatus
    voxels: Optional[MapVoxels] = None
    scale: Optional[SavedScale] = None
    track: Optional[PublishedTrack] = None


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
    from lingbot_ros.streaming.state import load_into, read_scale, read_track, read_voxels
    identity = engine.state_identity()
    out = []
    for name, session, path in zip(names, sessions, paths):
        try:
            voxels = read_voxels(path)  # checked whole before the session changes
            scale, track = read_scale(path), read_track(path)
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
                                        report=session.resume_report), voxels, scale, track))
    return out


def apply_resumes(resumed: Sequence[Resumed], cameras: Sequence[CameraStream],
                  maps: MapThread, feed: ScaleFeed, params: Params, log: Any) -> None:
    """Give each resumed camera its scale, map and track; note every outcome on the camera."""
    for cam, r in zip(cameras, resumed):
        if r.status.outcome is not ResumeOutcome.RESUMED:
            cam.resume = r.status
            continue
        scale = feed.cameras[cam.index]
        scale_note, dropped = _restore_scale(cam, scale, r.scale, log)
        if dropped is None:
            map_note = _restore_map(cam, maps, r.voxels, params, log)
            track_note = _restore_track(cam, cameras, scale, r, params)
        else:
            map_note = track_note = f'not restored: {dropped}'
            log.warning(f'[{cam.name}] saved track and map not restored: {dropped}')
        cam.cache_stats = cam.session.stats()
        cam.resume = ResumeStatus(r.status.path, r.status.outcome, report=r.status.report,
                                  resets=cam.counters.session_resets, map_note=map_note,
                                  scale_note=scale_note, track_note=track_note)


def _restore_scale(cam: CameraStream, scale: CameraScale, saved: Optional[SavedScale],
                   log: Any) -> Tuple[str, Optional[str]]:
    """
    Give the camera its saved scale; return what became of it, and why its outputs go.

    The second value is None when the saved track and map can stay: the scale resumed,
    or it did not but they are in model units (the first metric frame starts them over).
    """
    if saved is None:
        return 'none in the file', None
    why = scale.restore(saved)
    if why is None:
        report = scale.report
        value = '' if report.scale is None else f', {report.scale:.6g} m per model unit'
        log.info(f'[{cam.name}] scale resumed: {report.state}{value}; outputs in '
                 f'{saved.frame.value}')
        return f'restored: {report.state}{value}, outputs in {saved.frame.value}', None
    log.warning(f'[{cam.name}] saved scale not restored ({why}): the scale starts over')
    if saved.frame is FrameKind.MODEL:
        scale.assume_published(FrameKind.MODEL)
        return f'not restored: {why}', None
    return f'not restored: {why}', f'saved in {saved.frame.value} by a scale that did not resume'


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


def _restore_track(cam: CameraStream, cameras: Sequence[CameraStream], scale: CameraScale,
                   r: Resumed, params: Params) -> str:
    """
    Fill the camera's published track: the saved one, else the session's trajectory.

    The trajectory is in model units: the camera's outputs are then said to be, so that
    a metric frame starts the track over instead of mixing units.
    """
    here, track = params.map_convention.value, r.track
    if track is not None and track.frame == here:
        _fill_track(cam, cameras, track.records(), params)
        if r.scale is None:  # saved without a scale: the poses are in model units
            scale.assume_published(FrameKind.MODEL)
        return f'{len(track.stamp_ns)} poses restored'
    to_map = map_from_optical(params.map_convention)
    _fill_track(cam, cameras, [(s, to_map @ p) for s, p in cam.session.trajectory], params)
    scale.assume_published(FrameKind.MODEL)
    why = 'none in the file' if track is None else \
        f'saved in map_convention {track.frame!r}, {here!r} here'
    return f'rebuilt from the trajectory in model units ({why})'


def _fill_track(cam: CameraStream, cameras: Sequence[CameraStream], records: list,
                params: Params) -> None:
    """Fill the camera's published track with ``(stamp_ns, pose)`` records, as they were sent."""
    map_frame = camera_frames(params, list(cameras), cam)[0]
    first_path = len(records) - params.path_max_length  # older poses left ~/path already
    for i, (stamp, pose) in enumerate(records):
        path_pose = None
        if params.publish_path and i >= first_path:
            path_pose = path_cdr.pose_cdr(messages.pose_stamped(pose, stamp, map_frame))
        cam.track.add(stamp, pose, path_pose, params.path_max_length)
