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
Which dtype each part of an engine computes and stores in, from its configuration.

One place for the rules, read by the engine when it loads and by the memory estimate
before anything is loaded, so the two always agree.
"""

from __future__ import annotations

from typing import Optional

from lingbot_ros.streaming.config import EngineConfig, HeadDtype, KvCacheDtype, WeightsDtype
import torch

DTYPES = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}


def dtype_name(dtype: torch.dtype) -> str:
    """Return the configuration's name of a compute dtype (``torch.bfloat16`` -> 'bfloat16')."""
    return next(name for name, value in DTYPES.items() if value == dtype)


def kv_storage_dtype(cfg: EngineConfig) -> torch.dtype:
    """Return the aggregator cache's storage dtype: the compute dtype, or float8 e4m3."""
    if cfg.kv_cache_dtype == KvCacheDtype.FLOAT8_E4M3:
        return torch.float8_e4m3fn
    return DTYPES[cfg.dtype]


def head_storage_dtype(cfg: EngineConfig) -> torch.dtype:
    """
    Return the dtype float32-computing heads keep their weights in.

    Heads under autocast (:func:`heads_autocast`) keep theirs as the aggregator does
    (linear and convolution weights in ``dtype``, the rest float32) instead.
    """
    return DTYPES[cfg.dtype] if cfg.weights_dtype == WeightsDtype.COMPUTE else torch.float32


def heads_autocast(cfg: EngineConfig) -> Optional[torch.dtype]:
    """Return the dtype the heads compute in under autocast; None: float32, autocast off."""
    compute = DTYPES[cfg.dtype]
    if compute == torch.float32 or cfg.head_dtype is HeadDtype.FLOAT32:
        return None
    return torch.float16 if cfg.head_dtype is HeadDtype.FLOAT16 else compute


def camera_kv_dtype(cfg: EngineConfig) -> torch.dtype:
    """Return the camera head cache's storage dtype: what the head's attention runs in."""
    return heads_autocast(cfg) or torch.float32
