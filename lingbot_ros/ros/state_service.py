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
``~/save_state``: each camera's stream state and voxel map, one file per camera.

One file per camera (``<trajectory_dir>/<camera>_state.safetensors``), because a state
is one session's: each camera is resumed, refused or started fresh on its own, a camera
can be moved to another node, and ``resume_state``'s ``{camera}`` names each one's file.
Each save replaces the camera's file whole or not at all (a crash leaves the previous
one).

Who does what, so that each piece is touched by the thread that owns it:

1. The worker (owner of the sessions), between two frames: the frames in flight land
   and go to the output thread; each session's state is copied to host memory; a copy
   of each camera's scale and published track is queued on the output thread behind
   those frames; once the output thread has sent what the worker handed it (the
   keyframes to merge included), an export is queued on the map thread behind those
   keyframes. The worker then goes on with the next frame: it pauses for the copy and
   the flush, never for the file.
2. The output thread (owner of the scales and tracks) copies each camera's
   (:meth:`~lingbot_ros.ros.outputs.Outputs.export`) when it reaches the job: after
   exactly the frames the worker handed over before the capture.
3. The map thread (owner of the voxel maps) copies each camera's voxels out in order.
4. This handler (the service callback group) writes the files and answers.

So a file holds one instant of its camera: the session, the metric scale (estimator,
metric frame, ``map -> odom`` anchor, published frame), the published track (in metres
where it was) and the map, each as of the same last frame.
"""

from __future__ import annotations

from concurrent.futures import Future as ThreadFuture, TimeoutError as ThreadTimeout
import dataclasses
from pathlib import Path
import threading
from typing import Any, Callable, List, Optional, Protocol, Tuple

from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.resume import state_file
from lingbot_ros.ros.worker import Worker
from rclpy.task import Future

SAVE_WAIT_S = 60.0    # the worker's part answers 'still busy' after this long
FLUSH_S = 10.0        # the worker waits this long for the output thread to send
MAP_EXPORT_S = 30.0   # the handler waits this long for the map thread's copies
OUTPUT_EXPORT_S = 30.0  # and this long for the output thread's (scale and track)


class Exports(Protocol):
    """The output thread's side of a save (:class:`~lingbot_ros.ros.outputs.Outputs`)."""

    def export(self, cam: CameraStream) -> ThreadFuture: ...


@dataclasses.dataclass(frozen=True)
class _Captured:
    """One camera's part of a save: the session's state, and its outputs' copies to come."""

    camera: CameraStream
    state: Any                          # streaming.state.Captured
    voxels: Optional[ThreadFuture]      # MapVoxels from the map thread; None: no map thread
    outputs: Optional[ThreadFuture] = None  # SavedOutputs from the output thread; None: none


def capture_all(worker: Worker, maps: Optional[MapThread], identity: Any,
                outputs: Optional[Exports] = None) -> List[_Captured]:
    """
    Copy every camera's state (run on the worker thread, between frames).

    Cameras that have seen no frame are left out. Each camera's scale and track copy is
    queued on the output thread right behind the frames the worker handed it; the map
    exports are queued once the output thread has sent them, behind the keyframes it
    queued. The map is saved whatever ``publish_map`` says now: a map resumed while it is
    off would otherwise be lost at the next save (while off, it merges no keyframe).
    """
    from lingbot_ros.streaming.state import capture
    taken = []
    for cam in worker.cameras:
        if cam.session.frames_seen == 0:
            continue
        state = capture(cam.session, identity)
        if state.landed:  # the worker lands every frame before a job: none may be left
            raise RuntimeError(f'{cam.name}: {len(state.landed)} frame(s) landed during '
                               'the save; nothing written')
        taken.append((cam, state, None if outputs is None else outputs.export(cam)))
    if taken and maps is not None and not worker.sink.flush(FLUSH_S):
        raise RuntimeError(f'the outputs did not go out within {FLUSH_S:.0f} s; nothing '
                           'written')
    return [_Captured(cam, state, maps.export(cam.index) if maps is not None else None, out)
            for cam, state, out in taken]


def write_all(folder: Path, taken: List[_Captured],
              convention: str) -> Tuple[List[str], List[str]]:
    """Write each captured camera's file; return (what was written, with sizes; failures)."""
    from lingbot_ros.streaming.state import write_captured
    written, failed = [], []
    folder.mkdir(parents=True, exist_ok=True)
    for part in taken:
        name = part.camera.name
        voxels = published = None
        try:
            if part.outputs is not None:
                published = part.outputs.result(OUTPUT_EXPORT_S)
        except ThreadTimeout:
            failed.append(f'{name}: the output thread did not copy the scale and track within '
                          f'{OUTPUT_EXPORT_S:.0f} s')
            continue
        except Exception as exc:  # noqa: BLE001 (the copy failed: this camera is not saved)
            failed.append(f'{name}: cannot copy the scale and track: {type(exc).__name__}: '
                          f'{exc}')
            continue
        if part.voxels is not None:
            try:
                voxels = dataclasses.replace(part.voxels.result(MAP_EXPORT_S), frame=convention)
            except ThreadTimeout:
                failed.append(f'{name}: the map thread did not copy the map within '
                              f'{MAP_EXPORT_S:.0f} s')
                continue
        path = state_file(folder, name)
        scale = None if published is None else published.scale
        track = None if published is None else published.track
        try:
            saved = write_captured(part.state, path, voxels, scale, track)
        except OSError as exc:
            failed.append(f'{name}: cannot write {path}: {exc}')
            continue
        s = part.state.state
        cached = s.windows.current.agg.frames if s.windows.current is not None else 0
        extra = '' if track is None else f', {len(track.stamp_ns)} track poses'
        if scale is not None:
            extra += f', outputs in {scale.frame.value}'
        written.append(f'{saved.path} ({saved.size_bytes / 1e6:.1f} MB: frame {s.index}, '
                       f'{cached} cached frames, '
                       f"{'no map' if voxels is None else f'{len(voxels)} map voxels'}{extra})")
    return written, failed


async def wait_for_worker(node: Any, group: Any, wait_s: float,
                          start: Callable[[Callable[[], None]], None]) -> bool:
    """
    Wait, without holding a thread, for work the worker does between frames.

    ``start`` hands the worker a callback to call once the work is done; the coroutine
    resumes then (True) or after ``wait_s`` (False: the worker is still inside a step).
    The executor goes on running image callbacks and diagnostics meanwhile.
    """
    future = Future(executor=node.executor)
    future.add_done_callback(lambda _: None)  # a done callback wakes the executor
    lock = threading.Lock()

    def finish(done: bool) -> None:
        with lock:
            if not future.done():
                future.set_result(done)
    timer = node.create_timer(wait_s, lambda: finish(False), callback_group=group,
                              clock=node.steady_clock)
    start(lambda: finish(True))
    done = await future
    node.destroy_timer(timer)
    return bool(done)


async def save_state(node: Any, group: Any, response: Any) -> Any:
    """
    Answer ``~/save_state`` (see the module docstring); never blocks the worker on disk.

    ``node``: the services' ServedNode; ``group``: their callback group (its timer).
    """
    worker, params, engine = node.worker, node.params, node.engine
    if worker is None or params is None or engine is None:
        response.success, response.message = False, 'not configured: no state'
        return response
    try:
        identity = engine.state_identity()
    except Exception as exc:  # noqa: BLE001 (EngineError, an unreadable checkpoint)
        response.success, response.message = False, f'no state identity: {exc}'
        return response
    maps, outputs = node.maps, node.outputs
    job = worker.run_between_frames(lambda: capture_all(worker, maps, identity, outputs))
    done = await wait_for_worker(node, group, SAVE_WAIT_S,
                                 lambda finished: job.add_done_callback(lambda _: finished()))
    if not done:
        response.success = False
        response.message = (f'save still pending after {SAVE_WAIT_S:.0f} s (the worker is '
                            'inside a step); nothing written yet, call again')
        return response
    try:
        taken = job.result()
    except Exception as exc:  # noqa: BLE001 (a capture that failed: nothing written)
        response.success, response.message = False, f'cannot save: {type(exc).__name__}: {exc}'
        return response
    folder = Path(params.trajectory_dir).expanduser()
    seen = {part.camera.name for part in taken}
    empty = [c.name for c in node.cameras if c.name not in seen]
    try:
        written, failed = write_all(folder, taken, params.map_convention.value)
    except OSError as exc:
        written, failed = [], [f'cannot write to {folder}: {exc}']
    response.success = bool(written) and not failed
    parts = (['wrote ' + ', '.join(written)] if written else []) + failed + (
        ['no frame yet for ' + ', '.join(empty)] if empty else [])
    response.message = '; '.join(parts)
    (node.get_logger().info if response.success else node.get_logger().warning)(
        response.message)
    return response
