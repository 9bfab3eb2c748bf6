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
Keyframe policies: which streaming frames stay in the caches.

A policy sees ``since_keyframe``, the number of frames since the last committed
frame (the last scale frame counts as one), and ``first``, true for the first
streaming frame of a stream. The interval policy knows its answer before the
forward (so a keyframe runs without deferred eviction); the flow policy needs the
forward's pose and depth and answers afterwards.

The interval rule "keyframe iff ``since_keyframe >= interval``" equals the
reference's ``(i - scale) % interval == 0`` while the interval is constant, and
stays sensible when the interval changes at runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from lingbot_ros.streaming.config import KeyframeMode, StreamConfig


@dataclass(frozen=True)
class IntervalPolicy:
    """Every ``interval``-th streaming frame is a keyframe (1: all of them)."""

    interval: int = 1
    needs_flow = False

    def before(self, since_keyframe: int, first: bool) -> Optional[bool]:
        """Decide up front: the reference's fixed-interval rule."""
        return first or self.interval <= 1 or since_keyframe >= self.interval

    def after(self, since_keyframe: int, first: bool, flow_px: float) -> bool:
        """Never asked: :meth:`before` always answers."""
        return bool(self.before(since_keyframe, first))


@dataclass(frozen=True)
class FlowPolicy:
    """
    Keyframe when the predicted motion since the last keyframe is large enough.

    ``flow_px`` is the mean image-plane flow (pixels of the model grid) that the
    frame's predicted pose and depth induce against the last keyframe's camera.
    The first streaming frame is always a keyframe, and so is a frame that reaches
    ``max_gap`` frames since the last keyframe (the reference's rules).
    """

    threshold_px: float
    max_gap: int = 30
    needs_flow = True

    def before(self, since_keyframe: int, first: bool) -> Optional[bool]:
        """Undecided until the forward has run."""
        return None

    def after(self, since_keyframe: int, first: bool, flow_px: float) -> bool:
        """Decide from the frame's flow against the last keyframe."""
        return first or flow_px > self.threshold_px or since_keyframe >= self.max_gap


Policy = Union[IntervalPolicy, FlowPolicy]


def make_policy(cfg: StreamConfig) -> Policy:
    """Build the policy ``cfg.keyframe_mode`` names."""
    if cfg.keyframe_mode == KeyframeMode.FLOW:
        return FlowPolicy(threshold_px=float(cfg.flow_threshold_px), max_gap=cfg.max_keyframe_gap)
    return IntervalPolicy(interval=cfg.keyframe_interval)
