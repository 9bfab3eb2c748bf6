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
A fake model for session tests: it attends through the injected caches as the real one does.

So cache contents shape its outputs, and it can play a known camera path (``world``).
"""

import dataclasses
import math

from lingbot_ros.model.config import ModelConfig
from lingbot_ros.model.network import ModelOutput
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.session import Prepared, Session, SessionContext
from lingbot_ros.streaming.trajectory import matrix_to_quat, quat_to_matrix
import numpy as np
from oracles.dense_cache import dense_cache_factory
import torch

H, W = 28, 42  # 2 x 3 patches


def rot(axis_angle):
    v = np.asarray(axis_angle, dtype=np.float64)
    theta = np.linalg.norm(v)
    if theta == 0:
        return np.eye(3)
    q = np.concatenate([v / theta * math.sin(theta / 2), [math.cos(theta / 2)]])
    return quat_to_matrix(q)


class FakeModel:
    """
    Attends through the caches like the real model; optionally plays a known camera path.

    Frame identity is encoded in pixel (0, 0) of channel 0 (``id / 255``). With a
    ``world`` (id -> (R, c, depth)) the pose is the frame's camera expressed in the
    gauge of the first frame of the current window, scaled by that frame's depth, the
    way a real model's windows differ; otherwise the pose is a function of the cached
    context, so anything left in a cache changes later outputs.
    """

    def __init__(self, world=None, fail_on=(), nan_on=(), layers=2, trunk=2, iters=2):
        self.world, self.fail_on, self.nan_on = world, set(fail_on), set(nan_on)
        self.layers, self.trunk, self.iters = layers, trunk, iters
        self.calls = []
        self.gauge = None

    def config(self, max_frame_num=1024):
        tiny = ModelConfig.preset('tiny')
        return dataclasses.replace(
            tiny, camera_head=dataclasses.replace(tiny.camera_head, trunk_depth=self.trunk,
                                                  iterations=self.iters),
            aggregator=dataclasses.replace(tiny.aggregator, max_frame_num=max_frame_num,
                                           depth=max(self.layers, 5)))

    def __call__(self, images, *, time_index, first_frame, scale_frames, global_cache,
                 camera_cache, with_depth, camera_iterations=0):
        ids = [int(round(float(x) * 255)) for x in images[:, 0, 0, 0]]
        self.calls.append({'ids': ids, 'time': time_index, 'first': first_frame,
                           'scale': scale_frames})
        if set(ids) & self.fail_on:
            raise RuntimeError('injected failure')
        s = images.shape[0]
        grid = torch.nn.functional.avg_pool2d(images.mean(1, keepdim=True), 14).flatten(1)
        tokens = torch.cat([torch.full((s, 6), 0.5), grid], dim=1)  # [S, P]
        p = tokens.shape[1]
        # tiny's shapes: 2 global heads of 16; the camera head has 4 heads of 16
        x = tokens.reshape(1, 1, s * p, 1) * torch.linspace(-1.0, 2.0, 32).view(1, 2, 1, 16)
        x = x + 0.01 * time_index
        for layer in range(self.layers):
            x = x + global_cache.attend(layer, x, x, x)
        cam = x.view(1, 2, s, p, 16)[:, :, :, 0].repeat(1, 2, 1, 1)
        for it in range(camera_iterations or self.iters):
            for b in range(self.trunk):
                cam = cam + 0.5 * camera_cache.attend(it * self.trunk + b, cam, cam, cam)
        cam = cam[0, 0, :, :4]  # [S, 4]
        enc = torch.zeros(s, 9)
        depth = torch.ones(s, images.shape[2], images.shape[3], 1)
        if self.world is None:
            enc[:, :3] = cam[:, :3]
            enc[:, 3:7] = torch.tensor([0.0, 0.0, 0.0, 1.0]) + 0.1 * cam[:, [3, 2, 1, 0]]
        else:
            if first_frame:
                self.gauge = ids[0]
            rg, cg, dg = self.world[self.gauge]
            for j, i in enumerate(ids):
                ri, ci, di = self.world[i]
                enc[j, :3] = torch.from_numpy((rg.T @ (ci - cg)) / dg)
                enc[j, 3:7] = torch.from_numpy(matrix_to_quat(rg.T @ ri))
                depth[j] = di / dg
        enc[:, 7:] = 1.0
        if set(ids) & self.nan_on:
            enc[:, 0] = float('nan')
        return ModelOutput(pose_enc=enc, pose_enc_iters=enc[:, None].repeat(1, 2, 1),
                           depth=depth if with_depth else None,
                           depth_conf=depth[..., 0] + 1 if with_depth else None,
                           camera_tokens=cam[:, None].repeat(1, 4, 1))


def prepare(image_rgb, cfg):
    t = torch.from_numpy(image_rgb).permute(2, 0, 1).float() / 255
    return Prepared(image=t, model_to_input=np.eye(3), input_hw=image_rgb.shape[:2])


def session(model, max_frame_num=1024, factory=dense_cache_factory, **stream):
    ctx = SessionContext(model=model, model_config=model.config(max_frame_num),
                         device=torch.device('cpu'), dtype=torch.float32, backend='sdpa',
                         cache_factory=factory, prepare=prepare)
    return Session(ctx, 'cam', StreamConfig(**stream))


def frame(i, seed=0):
    rng = np.random.default_rng(1000 * seed + i)
    img = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    img[0, 0, 0] = i
    return img


def feed(session, ids, stamp0=0):
    out = []
    for i in ids:
        out += session.step(frame(i), stamp0 + i * 1000)
    return out


def world(n):
    rng = np.random.default_rng(7)
    return {i: (rot(rng.normal(0, 0.3, 3)), rng.normal(0, 2, 3), float(rng.uniform(1, 3)))
            for i in range(n)}
