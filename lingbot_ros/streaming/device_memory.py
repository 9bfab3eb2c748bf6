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
A CUDA device's memory as the process that runs the model sees it.

Read by the engine, which owns the device; the node's diagnostics only format it, so they
never touch CUDA themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

MB = 1024 * 1024


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes of one CUDA device: this process's allocator, and the device as a whole."""

    allocated: int          # held by tensors of the model's process
    reserved: int           # held by that process's caching allocator
    used_fraction: Optional[float] = None  # of the whole device, every process (None: unknown)
    capacity: Optional[int] = None         # what the model's process may use (its fraction)

    def describe(self) -> str:
        """Say allocated and reserved in MB, as ``/diagnostics`` shows them."""
        return (f'{self.allocated / MB:.1f} MB allocated, '
                f'{self.reserved / MB:.1f} MB reserved')


def read_device_memory(device: Any) -> Optional[DeviceMemory]:
    """Return ``device``'s memory (None for a CPU device or where CUDA cannot say)."""
    if device is None or getattr(device, 'type', str(device)) != 'cuda':
        return None
    try:
        import torch
        allocated = int(torch.cuda.memory_allocated(device))
        reserved = int(torch.cuda.memory_reserved(device))
    except Exception:  # noqa: BLE001 (a diagnostic must not fail the caller)
        return None
    used = capacity = None
    try:
        free, total = torch.cuda.mem_get_info(device)
        used = 1.0 - free / total
        fraction = getattr(torch.cuda, 'get_per_process_memory_fraction', None)
        capacity = int(total * (fraction(device) if fraction else 1.0))
    except Exception:  # noqa: BLE001,S110 (the allocator's numbers still stand)
        pass
    return DeviceMemory(allocated, reserved, used, capacity)
