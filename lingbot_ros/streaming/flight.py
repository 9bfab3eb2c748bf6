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
Model calls on their way from the device to the host, and the frame queued ahead.

A call is launched (queued on the device, its outputs' copy to the host queued behind
it) and later landed: its outputs waited for and checked. A streamed frame whose
keyframe decision is known before its forward (interval mode) is committed or rolled
back at once and left in flight: the next frame is queued behind it on the device
before it lands, so the device never waits for the host between frames.

A kept frame found non-finite when it lands has been attended to by the frame queued
behind it: both are rejected (:class:`FrameRejected` counts them) and the window is
spoiled, so the next frame opens a new one from the last keyframes.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
import time
from typing import Callable, Optional, Tuple

from lingbot_ros.streaming.call_stats import CallStats
from lingbot_ros.streaming.errors import FrameRejected
from lingbot_ros.streaming.host import HostCopy
from lingbot_ros.streaming.preprocess import Prepared
from lingbot_ros.streaming.result import FrameResult, FrameTimings, FrameType
from lingbot_ros.streaming.trajectory import intrinsics_from_fov, pose_enc_to_matrix
from lingbot_ros.streaming.windows import map_pose_enc, Sim3, Window
import numpy as np
import torch


@dataclass(frozen=True)
class HostOutputs:
    """A call's outputs on the host, one row per frame of the call (float32 unless noted)."""

    pose_enc: np.ndarray          # [S, 9]
    pose_enc_iters: np.ndarray    # [S, iterations, 9]
    camera_tokens: np.ndarray     # [S, 4, 2C]
    depth: Optional[np.ndarray]   # [S, H, W, 1]; None: the call ran without depth
    depth_conf: Optional[np.ndarray]  # [S, H, W]
    colors: Optional[np.ndarray]  # [S, H, W, 3] uint8


def host_copy(out, images: torch.Tensor, with_depth: bool) -> HostCopy:
    """Queue the copy of a model call's outputs (and the input's colours) to the host."""
    colors = None
    if with_depth:  # the model input as the uint8 RGB [S, H, W, 3] that colours the points
        colors = (images.detach().float().clamp(0, 1) * 255).round().to(torch.uint8) \
            .permute(0, 2, 3, 1)
    return HostCopy({
        'pose_enc': out.pose_enc, 'pose_enc_iters': out.pose_enc_iters,
        'depth': out.depth if with_depth else None,
        'depth_conf': out.depth_conf if with_depth else None,
        'colors': colors, 'camera_tokens': out.camera_tokens,
    })


@dataclass(frozen=True)
class Launched:
    """A model call queued on the device, its outputs on their way to the host."""

    frames: int
    copy: HostCopy
    started: float    # perf_counter seconds when the call began
    stats: CallStats  # as it began (completed when the call is committed or rolled back)


@dataclass(frozen=True)
class Landed:
    """A model call whose outputs are on the host: its size, outputs, time and stats."""

    frames: int
    host: HostOutputs
    model_ms: float
    stats: CallStats


def land(launched: Launched, window: Optional[Window], what: str) -> Landed:
    """
    Wait for a launched call's outputs; refuse a non-finite pose.

    ``window``: the call's, while the call is still open there (rolled back on failure);
    None for a call already committed or rolled back.
    """
    try:
        host = HostOutputs(**launched.copy.wait())
        if not np.all(np.isfinite(host.pose_enc)):
            raise FrameRejected(f'the model returned a non-finite pose for {what}; '
                                'frame dropped')
    except BaseException:
        if window is not None:
            window.abort()
        raise
    model_ms = (time.perf_counter() - launched.started) * 1e3
    return Landed(launched.frames, host, model_ms, launched.stats)


@dataclass
class Record:
    """A landed frame: its result, plus what only an offline run's arrays read of it."""

    result: FrameResult
    window_iters: np.ndarray  # the camera head's per-iteration encodings, window frame
    sim3: Sim3                # the window's alignment into the map when they were made
    camera_tokens: np.ndarray
    depth_conf: Optional[np.ndarray]
    flow_px: float = math.nan

    def pose_enc_iters(self) -> np.ndarray:
        """
        Return the per-iteration encodings in the map frame, for the run arrays.

        Mapped only here: only an offline run reads them, and mapping every iteration
        through the Sim(3) would cost each live frame host time for nothing.
        """
        return np.stack([map_pose_enc(self.sim3, e) for e in self.window_iters])


def frame_record(call: Landed, j: int, prep: Prepared, stamp_ns: int, ftype: FrameType,
                 window: Window, index: int, model_hw: Tuple[int, int],
                 map_epoch: int) -> Record:
    """Build frame ``j`` of a call's host outputs, mapped into the map frame."""
    host, model_ms = call.host, call.model_ms
    h, w = model_hw
    sim3 = window.sim3
    enc = map_pose_enc(sim3, host.pose_enc[j])
    pose = pose_enc_to_matrix(enc)
    k_model = intrinsics_from_fov(enc[7], enc[8], h, w)
    depth = conf = colors = None
    if host.depth is not None:
        depth = (host.depth[j, ..., 0] * sim3.scale).astype(np.float32, copy=False)
        conf = host.depth_conf[j]
        colors = host.colors[j]
    result = FrameResult(
        stamp_ns=stamp_ns, index=index, frame_type=ftype, pose_c2w=pose,
        pose_enc=enc, intrinsics=np.asarray(prep.model_to_input, np.float64) @ k_model,
        intrinsics_model=k_model, input_hw=tuple(prep.input_hw), model_hw=(h, w),
        window_index=window.index, depth=depth, confidence=conf, colors=colors,
        timings=FrameTimings(model=model_ms), map_epoch=map_epoch)
    return Record(result=result, window_iters=host.pose_enc_iters[j], sim3=sim3,
                  camera_tokens=host.camera_tokens[j], depth_conf=conf)


@dataclass(frozen=True)
class InFlight:
    """
    A streamed frame launched ahead, its outputs not yet on the host.

    Committed or rolled back already (its fate was known before its forward). Landed by
    the next frame's call (after that frame is queued behind it on the device) or by
    ``drain``.
    """

    launched: Launched
    prep: Prepared
    stamp_ns: int
    index: int
    window: Window
    kept: bool
    prepare_ms: Optional[float]


class FramesInFlight:
    """
    The one frame a session has in flight, and the rules for landing it.

    ``landed`` turns a frame in flight into the session's record of it (waiting for its
    outputs, raising :class:`FrameRejected` for a non-finite one); ``spoil`` tells the
    session's windows that a kept frame's keys are unusable.
    """

    def __init__(self, landed: Callable[[InFlight], Record], spoil: Callable[[], None]) -> None:
        self._landed = landed
        self._spoil = spoil
        self._frame: Optional[InFlight] = None

    @property
    def busy(self) -> bool:
        """Whether a frame is in flight."""
        return self._frame is not None

    def ready(self) -> bool:
        """Whether landing would find the frame in flight done on the device (or none)."""
        return self._frame is None or self._frame.launched.copy.ready()

    def waiter(self) -> Callable[[], None]:
        """Return a call that blocks until the frame now in flight is done on the device."""
        if self._frame is None:
            return lambda: None
        return self._frame.launched.copy.wait_ready

    def queue(self, frame: InFlight) -> Optional[Record]:
        """
        Leave ``frame`` in flight; land the frame that was, now queued before it.

        If that earlier frame was kept and is rejected, ``frame`` attended to it: both go
        (:class:`FrameRejected` with ``frames=2``) and the window is spoiled.
        """
        earlier, self._frame = self._frame, frame
        if earlier is None:
            return None
        try:
            return self._landed(earlier)
        except FrameRejected as exc:
            if not earlier.kept:
                raise  # rolled back: the frame queued behind it never saw it
            self._frame = None
            frame.launched.copy.wait()
            self._spoil()
            raise FrameRejected(f'{exc}; the frame queued behind it (stamp '
                                f'{frame.stamp_ns}) is dropped with it and the window is '
                                're-seeded', frames=2) from exc

    def land(self, with_current: bool = False) -> Optional[Record]:
        """
        Land the frame in flight, if any; return its record.

        ``with_current``: called for a frame not yet run, which a rejection of the frame in
        flight then drops too (and says so: ``FrameRejected.frames`` counts it).
        """
        frame, self._frame = self._frame, None
        if frame is None:
            return None
        try:
            return self._landed(frame)
        except FrameRejected as exc:
            if frame.kept:
                self._spoil()  # kept: the window's keys are spoiled
            if not with_current:
                raise
            raise FrameRejected(f'{exc}; the frame that came after it is dropped with it',
                                frames=exc.frames + 1) from exc
