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
An offline run of a whole image stack, and the fixture-format arrays it returns.

``Session.run`` feeds a ``[S, 3, H, W]`` stack through the same state machine as live
frames (each streamed frame queued on the device before the one before is finished on
the host, as ``submit`` does); :class:`StackRun` holds the run's side: the stack's
frames on the device, the records and call stats as they land, progress, and the arrays
named as the parity fixtures' ``outputs.npz`` (:func:`run_arrays`), including the
aggregator's camera tokens (``debug_agg_camera_tokens``) and the camera head's
per-iteration encodings, which only these arrays read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

from lingbot_ros.streaming.call_stats import CallStats
from lingbot_ros.streaming.context import UploadFn
from lingbot_ros.streaming.flight import Record
from lingbot_ros.streaming.preprocess import Prepared
from lingbot_ros.streaming.result import FrameType
from lingbot_ros.streaming.trajectory import intrinsics_from_fov, invert_rigid, pose_enc_to_matrix
import numpy as np
import torch


@dataclass
class RunOutputs:
    """
    Fixture-format arrays of a whole run (``outputs.npz`` names) and per-call stats.

    ``kv_stats`` holds one :class:`CallStats` per model call; ``as_record()`` gives it as a
    step of the fixtures' ``kv_stats*.json``.
    """

    arrays: dict
    kv_stats: List[CallStats]
    results: list


class StackRun:
    """
    One offline run: a ``[S, 3, H, W]`` stack in [0, 1], and what has landed of it.

    ``stamps`` default to the frame index in nanoseconds; the scale phase takes
    ``min(scale_frames, S)`` frames, as the reference does. ``progress`` is called with
    the number of frames done after every call (a frame is done once its outputs are on
    the host).
    """

    def __init__(self, images: torch.Tensor, stamps: Optional[Sequence[int]],
                 scale_frames: int, progress: Optional[Callable[[int], None]] = None) -> None:
        if images.ndim != 4 or images.shape[1] != 3:
            raise ValueError(f'expected images [S, 3, H, W], got {tuple(images.shape)}')
        s = images.shape[0]
        stamps = list(range(s)) if stamps is None else [int(x) for x in stamps]
        if len(stamps) != s:
            raise ValueError(f'{len(stamps)} stamps for {s} images')
        self._images = images
        self._stamps = stamps
        self._progress = progress
        self.scale = min(scale_frames, s)
        self.records: List[Record] = []
        self.kv_stats: List[CallStats] = []

    def frames(self, device: torch.device,
               upload: Optional[UploadFn] = None) -> Iterator[Tuple[Prepared, int]]:
        """Yield each frame on ``device`` (through ``upload`` if given) with its stamp."""
        hw = (int(self._images.shape[2]), int(self._images.shape[3]))
        for image, stamp in zip(self._images, self._stamps):
            image = image.to(device) if upload is None else upload(image, device)
            yield Prepared(image=image.to(torch.float32), model_to_input=np.eye(3),
                           input_hw=hw), stamp

    def landed(self, records: List[Record], kv_stats: Sequence[CallStats] = ()) -> None:
        """Take the records a call landed and the stats of the calls it made."""
        self.records += records
        self.kv_stats += kv_stats
        if self._progress is not None:
            self._progress(len(self.records))

    def outputs(self, flow: bool, windowed: bool) -> RunOutputs:
        """Return the run's arrays (see :func:`run_arrays`), stats and results."""
        return RunOutputs(arrays=run_arrays(self.records, flow, windowed),
                          kv_stats=self.kv_stats, results=[r.result for r in self.records])


def run_arrays(records: List[Record], flow: bool, windowed: bool) -> dict:
    """
    Return the fixture arrays of a run's records, oldest first.

    ``flow``: the run decided keyframes by flow (``flow_magnitude`` per frame); ``windowed``:
    it opened a window after the first (``window_index`` per frame).
    """
    if not records:
        return {}
    res = [r.result for r in records]
    enc = np.stack([r.pose_enc for r in res]).astype(np.float32)
    mats = pose_enc_to_matrix(enc)
    h, w = res[0].model_hw
    arrays = {
        'pose_enc': enc,
        'pose_enc_iters': np.stack([r.pose_enc_iters() for r in records]),
        'extrinsic_w2c': mats[:, :3, :4].astype(np.float32),
        'extrinsic_c2w': invert_rigid(mats)[:, :3, :4].astype(np.float32),
        'intrinsic': intrinsics_from_fov(enc[:, 7], enc[:, 8], h, w).astype(np.float32),
    }
    if all(r.depth is not None for r in res):
        arrays['depth'] = np.stack([r.depth for r in res])[..., None]
        arrays['depth_conf'] = np.stack([r.depth_conf for r in records])
    arrays['debug_agg_camera_tokens'] = np.stack([r.camera_tokens for r in records])
    arrays['frame_type'] = np.array([int(r.frame_type) for r in res], dtype=np.uint8)
    arrays['is_keyframe'] = arrays['frame_type'] != FrameType.NON_KEYFRAME
    if flow:
        arrays['flow_magnitude'] = np.array([r.flow_px for r in records], dtype=np.float64)
    if windowed:
        arrays['window_index'] = np.array([r.window_index for r in res], dtype=np.int32)
    return arrays
