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

"""What an engine lends its sessions: the model, the caches' factory, frames' way in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.streaming.caches import CacheFactory
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.preprocess import Prepared
import numpy as np
import torch

PrepareFn = Callable[[np.ndarray, StreamConfig], Prepared]
UploadFn = Callable[[torch.Tensor, torch.device], torch.Tensor]


@dataclass(frozen=True)
class SessionContext:
    """What an engine lends its sessions: the model and how to get caches and inputs."""

    model: Callable[..., Any]
    model_config: ModelConfig
    device: torch.device
    dtype: torch.dtype
    backend: AttentionBackend  # or its name: taken as the member
    cache_factory: CacheFactory
    prepare: Optional[PrepareFn] = None
    upload: Optional[UploadFn] = None  # a CPU tensor to the device (None: ``.to(device)``)
    kv_dtype: Optional[torch.dtype] = None  # the aggregator cache's storage (None: dtype)
    camera_kv_dtype: torch.dtype = torch.float32  # the camera head cache's (its compute dtype)
    kv_splits: int = 0  # FlashInfer key parts per call (0: auto)

    def __post_init__(self) -> None:
        object.__setattr__(self, 'backend', AttentionBackend.of(self.backend))
