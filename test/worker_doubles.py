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

"""Test doubles for the worker: a fake session with Session's surface, an inline sink."""

from dataclasses import dataclass

from doubles import LandsAtOnce
from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.worker import Frame, FrameQueue, Worker
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.session import FrameRejected, SizeChanged
import numpy as np


@dataclass(frozen=True)
class Cfg:
    scale_frames: int = 2
    keyframe_interval: int = 1


class FakeSession(LandsAtOnce):
    """Same surface as streaming.Session: buffers scale frames, checks size, may emit NaN."""

    def __init__(self, nan_stamps=(), reject_stamps=()):
        self.config = Cfg()
        self.nan_stamps, self.reject_stamps = set(nan_stamps), set(reject_stamps)
        self.resets = 0
        self.updates = []
        self.reset()
        self.resets = 0

    def reset(self):
        self.resets += 1
        self.buffer, self.hw, self.index = [], None, 0

    def update(self, cfg):
        self.updates.append(cfg)
        self.config = cfg

    def stats(self):
        return CacheStats(frames=self.index, keyframes=self.index)

    def _result(self, stamp):
        pose = np.eye(4)
        pose[:3, 3] = [0.1 * self.index, 0.0, 0.5]
        if stamp in self.nan_stamps:
            pose[0, 3] = np.nan
        k = np.array([[50.0, 0, 32], [0, 50.0, 24], [0, 0, 1]])
        self.index += 1
        return FrameResult(stamp_ns=stamp, index=self.index - 1, frame_type=FrameType.KEYFRAME,
                           pose_c2w=pose, pose_enc=np.zeros(9, np.float32), intrinsics=k,
                           intrinsics_model=k, input_hw=(48, 64), model_hw=(48, 64))

    def step(self, image, stamp):
        if self.hw is not None and image.shape[:2] != self.hw:
            raise SizeChanged(f'frame size {image.shape[1]}x{image.shape[0]} differs')
        if stamp in self.reject_stamps:
            raise FrameRejected('the model returned a non-finite pose; frame dropped')
        self.hw = image.shape[:2]
        self.buffer.append(stamp)
        if len(self.buffer) < self.config.scale_frames and self.index == 0:
            return []
        out = [self._result(s) for s in self.buffer]
        self.buffer = []
        return out


class Sink:
    """Sends inline, keeping the track as the node's output thread does."""

    def __init__(self):
        self.published, self.reports, self.restarts = [], [], []

    def map_restarted(self, cam):
        self.restarts.append(cam.name)
        cam.track.clear()

    def publish(self, output):
        cam, result = output.camera, output.result
        self.published.append((cam.name, result.stamp_ns))
        cam.track.add(result.stamp_ns, result.pose_c2w, 'pose', 10)
        output.delivered(0.5)

    def flush(self, timeout):
        return True

    def report(self, cam, reason, text, level):
        self.reports.append((cam.name if cam is not None else None, reason, level))


def frame(cam, stamp, hw=(48, 64)):
    return Frame(cam, np.zeros(hw + (3,), np.uint8), stamp, 0.0, 'cam')


def rig(cameras=1, **kw):
    cams = [CameraStream(i, f'c{i}', f'/c{i}/image', FakeSession(**kw), window=50)
            for i in range(cameras)]
    queue, sink = FrameQueue(cameras, 2), Sink()
    return cams, queue, sink, Worker(cams, queue, sink, lambda: Cfg())
