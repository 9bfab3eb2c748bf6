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
The attention backends a cache may run, as one enum, without importing torch.

:mod:`~lingbot_ros.cache.backends` resolves and runs them (and re-exports the enum); the
node checks its ``attention_backend`` parameter against it before it imports torch or
loads the model's code.
"""

from __future__ import annotations

from enum import Enum
from typing import Union


class AttentionBackend(str, Enum):
    """
    How attention over a cache's pages runs; ``resolve_backend`` picks or checks one.

    - ``AUTO``: a request, never a result: FlashInfer on CUDA in half precision when it is
      importable, else SDPA, with a reason the node can report (no choice to get wrong).
    - ``SDPA``: PyTorch scaled-dot-product attention over the stream's contiguous run
      (views, no gather); runs on every device, the CPU included.
    - ``FLASHINFER``: FlashInfer's ragged prefill kernel over the contiguous run: the
      fastest on CUDA, but optional and CUDA-only.
    - ``PAGED_SDPA``: the page table read back in PyTorch (gather + masked SDPA), which
      tests check the page tables with. Not a user choice (:data:`USER_BACKENDS`).
    """

    AUTO = 'auto'
    SDPA = 'sdpa'
    FLASHINFER = 'flashinfer'
    PAGED_SDPA = 'paged_sdpa'

    @classmethod
    def of(cls, value: Union['AttentionBackend', str]) -> 'AttentionBackend':
        """Return the member ``value`` is or names (ValueError naming what is allowed)."""
        try:
            return cls(value)  # a member, or the value of one
        except ValueError:
            raise ValueError(f'backend={value!r} is not allowed: one of '
                             f'{tuple(m.value for m in cls)}') from None


# What a user may ask for (engine configuration, node parameter, command lines).
USER_BACKENDS = tuple(b for b in AttentionBackend if b is not AttentionBackend.PAGED_SDPA)
