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
Frames onto the device without the host waiting for it: a pinned ring and graphed resizes.

An engine owns one :class:`FrameUploads` and hands it to whatever puts frames on its
device: the live frames' preprocessing and an offline run's stack.
"""

from __future__ import annotations

import threading
from typing import Optional, Union
import warnings

from lingbot_ros.model.graphs import CaptureStreams
from lingbot_ros.streaming.preprocess.resample import Resampler
from lingbot_ros.streaming.preprocess.transform import FrameTransform
import numpy as np
import torch


def from_numpy(frame: np.ndarray) -> torch.Tensor:
    """Return a tensor over ``frame``'s memory (read-only buffers are fine: never written)."""
    with warnings.catch_warnings():  # read-only buffers (ROS messages, PIL) are fine here
        warnings.simplefilter('ignore', UserWarning)
        return torch.from_numpy(frame)


def _host_copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """
    Copy a frame between host tensors on this thread, the GIL held (numpy's copy).

    ``Tensor.copy_`` may split a frame's copy over PyTorch's intra-op threads, which sleep
    between a camera's frames and must wake first: on the live path that waking cost more
    than the copy itself, so a frame is copied by numpy on the calling thread.
    """
    try:
        np.copyto(dst.numpy(), src.numpy())
    except TypeError:  # a dtype numpy lacks (bfloat16): PyTorch's copy
        dst.copy_(src)


class PinnedUpload:
    """
    Reused page-locked buffers per frame shape and dtype, so a frame goes up asynchronously.

    From pageable memory ``.to('cuda')`` returns only once the copy is done, and the copy
    runs on the device's stream behind every kernel queued before it: with a frame
    queued ahead, the host then waits for that whole frame before it can prepare the
    next one, and the device idles while it does. The frame is copied into a buffer on
    the host instead and uploaded without waiting; an event recorded after the upload
    guards the buffer until the device has read it. Each key has ``RING`` buffers used in
    turn: with frames queued ahead an upload waits on the device behind the frames before
    it, and reusing the last buffer would make the next frame wait for all of them on the
    host. Bounded: at most ``MAX_SHAPES`` keys, the oldest dropped first. Where
    page-locked memory cannot be had (a container's locked-memory limit), frames go up
    the plain way. Frames are numpy arrays (a camera's) or CPU tensors (a stack run as a
    whole).
    """

    MAX_SHAPES = 4
    RING = 4  # > frames that can be queued on the device at once (one per camera, +1)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rings: dict = {}  # (shape, dtype, device) -> ([pinned tensor, event] list, turn)
        self.unavailable: Optional[str] = None  # why pinning failed, once it has

    def __call__(self, frame: Union[np.ndarray, torch.Tensor], device: torch.device,
                 into: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Return ``frame`` on ``device``; with ``into`` (on ``device``), copied into it."""
        src = frame if isinstance(frame, torch.Tensor) else from_numpy(frame)
        key = (tuple(src.shape), src.dtype, str(device))
        with self._lock:
            ring = self._rings.pop(key, None)
            if ring is None and self.unavailable is None:
                while len(self._rings) >= self.MAX_SHAPES:
                    self._rings.pop(next(iter(self._rings)))
                try:
                    ring = [[[torch.empty(src.shape, dtype=src.dtype, pin_memory=True),
                              None] for _ in range(self.RING)], 0]
                except RuntimeError as exc:
                    self.unavailable = str(exc).splitlines()[0] if str(exc) else repr(exc)
            if ring is None:
                return src.to(device) if into is None else into.copy_(src)
            self._rings[key] = ring  # the most recently used last
            entries, turn = ring
            ring[1] = (turn + 1) % len(entries)
            entry = entries[turn]
            buf, uploaded = entry
            if uploaded is not None:
                uploaded.synchronize()  # that buffer's last upload has left it
            _host_copy(buf, src)
            out = buf.to(device, non_blocking=True) if into is None \
                else into.copy_(buf, non_blocking=True)
            entry[1] = torch.cuda.Event()
            entry[1].record(torch.cuda.current_stream(device))
            return out


class GraphedResampler:
    """
    One frame shape's torch resampler, captured once as a CUDA graph and replayed.

    Eager, a frame's resize is a dozen launches and their Python on the thread that
    prepares frames, for little work of the device's own. Replayed, it is the frame's
    upload into a fixed buffer, one graph launch and a copy of the result (the graph
    overwrites its output at the next replay; the model keeps some frames).
    """

    def __init__(self, shape: tuple, plan: FrameTransform, device: torch.device,
                 resampler: Resampler, upload: PinnedUpload,
                 streams: CaptureStreams) -> None:
        self.frame = torch.zeros(shape, dtype=torch.uint8, device=device)
        self.graph = torch.cuda.CUDAGraph()
        self._upload = upload
        stream = streams(device)  # shared: one cuBLAS workspace for every capture
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            resampler(self.frame, plan)  # the weight matrices and the table exist first
            self._held = resampler.inputs_of(self.frame, plan)  # the graph reads them
            # not torch.cuda.graph(): it synchronizes the whole device first, and another
            # camera's frame may be in flight; other threads may wait on events meanwhile
            self.graph.capture_begin(capture_error_mode='thread_local')
            try:
                self.output = resampler(self.frame, plan)
            finally:
                self.graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(stream)

    def __call__(self, frame: np.ndarray) -> torch.Tensor:
        self._upload(frame, self.frame.device, into=self.frame)  # shape, dtype checked by copy_
        self.graph.replay()
        return self.output.clone()


class GraphedResizes:
    """The graphed resamplers of one engine, by frame shape and grid; bounded, locked."""

    MAX_SHAPES = 4

    def __init__(self, resampler: Resampler, upload: PinnedUpload,
                 streams: CaptureStreams) -> None:
        self._resampler = resampler
        self._upload = upload
        self._streams = streams
        self._lock = threading.Lock()
        self._graphs: dict = {}  # (shape, plan, device) -> GraphedResampler
        self.failed: Optional[str] = None  # why a capture failed (from then on: eager)

    def run(self, frame: np.ndarray, plan: FrameTransform,
            device: torch.device) -> Optional[torch.Tensor]:
        """Return the frame resampled by its shape's graph; None: resample it eagerly."""
        key = (frame.shape, plan, str(device))  # a checked frame: [H, W, 3] or [H, W, 1]
        with self._lock:  # one replay at a time: the graph's buffers are shared
            graphed = self._graphs.get(key)
            if graphed is None:
                if self.failed is not None:
                    return None
                while len(self._graphs) >= self.MAX_SHAPES:
                    self._graphs.pop(next(iter(self._graphs)))
                try:
                    graphed = GraphedResampler(frame.shape, plan, device, self._resampler,
                                               self._upload, self._streams)
                except RuntimeError as exc:  # capture refused (memory too): eager from now
                    self.failed = str(exc).splitlines()[0] if str(exc) else repr(exc)
                    return None
                self._graphs[key] = graphed
            return graphed(frame)

    def status(self) -> str:
        """Say how frames are resized on the device, for diagnostics ('' before any)."""
        with self._lock:
            if self.failed is not None:
                return f'eager (capture failed: {self.failed})'
            return f'graphed ({len(self._graphs)} frame shapes)' if self._graphs else ''


class FrameUploads:
    """
    How one engine's frames reach its device, and what that keeps between frames.

    A CPU frame goes to a CUDA device through :class:`PinnedUpload`, so the host does not
    wait for the device and frames queued ahead keep it busy; elsewhere it is
    ``.to(device)``. With ``graphed``, a numpy frame resampled on a CUDA device replays
    its shape's CUDA graph (:class:`GraphedResizes`: the same values, a fraction of the
    host's time), captured on ``streams`` (the engine's, shared with the model's graphs).
    ``resampler`` keeps the resampler's weight matrices.
    """

    def __init__(self, graphed: bool = False,
                 streams: Optional[CaptureStreams] = None) -> None:
        self.resampler = Resampler()
        self.pinned = PinnedUpload()
        self.graphs = None
        if graphed:
            self.graphs = GraphedResizes(self.resampler, self.pinned,
                                         streams or CaptureStreams())

    def upload(self, frame: torch.Tensor, device: Union[str, torch.device]) -> torch.Tensor:
        """Return a tensor on ``device``; a CPU tensor goes to CUDA through the pinned ring."""
        device = torch.device(device)
        if device.type == 'cuda' and frame.device.type == 'cpu':
            return self.pinned(frame, device)
        return frame.to(device)

    def frame_to(self, frame: Union[np.ndarray, torch.Tensor],
                 device: torch.device) -> torch.Tensor:
        """Return a uint8 ``[H, W, C]`` frame on ``device`` (never written to)."""
        if isinstance(frame, np.ndarray) and device.type == 'cuda':
            return self.pinned(frame, device)
        return plain_frame_to(frame, device)

    def resized(self, frame: Union[np.ndarray, torch.Tensor], plan: FrameTransform,
                device: torch.device) -> Optional[torch.Tensor]:
        """Return ``frame`` resampled by a replayed graph; None where it is not graphed."""
        if self.graphs is None or device.type != 'cuda' or not isinstance(frame, np.ndarray):
            return None
        return self.graphs.run(frame, plan, device)

    def resize_status(self) -> str:
        """Say how live frames are resized on the device ('' before the first, or eager)."""
        return '' if self.graphs is None else self.graphs.status()


def plain_frame_to(frame: Union[np.ndarray, torch.Tensor],
                   device: torch.device) -> torch.Tensor:
    """Return a uint8 ``[H, W, C]`` frame on ``device`` without a pinned buffer."""
    if isinstance(frame, np.ndarray):
        frame = from_numpy(frame)
    return frame.to(device, non_blocking=True)
