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
A model call's outputs on the host in one copy.

Copied one by one, a streamed frame's outputs (pose encodings, the per-iteration ones,
depth, confidence, camera tokens, the frame's colours) cost six waits for the device and
six copies through pageable memory, each on the worker's critical path. Here they are
laid end to end as bytes on the device (one concatenation), copied once (into pinned
memory on a GPU) and read back as numpy arrays of their own, so no view of a reused
buffer ever leaves this module. Values are bit for bit those of ``tensor.float().cpu()``
(floating outputs become float32; integer ones keep their type).
"""

from __future__ import annotations

from typing import Mapping, Optional

import numpy as np
import torch


_NUMPY = {torch.uint8: np.uint8, torch.int32: np.int32, torch.int64: np.int64,
          torch.bool: np.bool_}  # the integer outputs a call can have


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    t = t.detach()
    if t.is_floating_point():
        t = t.float()
    return t.contiguous().reshape(-1).view(torch.uint8)


class HostCopy:
    """
    A call's outputs on their way to the host: started without waiting, read once.

    The copy is queued behind the work that makes the outputs; :meth:`wait` blocks until
    it has landed and returns ``{name: numpy array or None}``. Between the two the
    caller may queue more device work (the next frame), which is how a stream keeps the
    device busy while the host finishes the frame before.
    """

    def __init__(self, tensors: Mapping[str, Optional[torch.Tensor]]) -> None:
        present = [(name, t) for name, t in tensors.items() if t is not None]
        self._names = list(tensors)
        # float32 parts first: each then starts 4-byte aligned in the buffer
        present.sort(key=lambda item: 0 if item[1].is_floating_point() else 1)
        self._parts: list = []  # (name, dtype of the host array, shape, bytes)
        self._host: Optional[torch.Tensor] = None
        self._event: Optional[torch.cuda.Event] = None
        if not present:
            return
        flat = [_flat_bytes(t) for _, t in present]
        for (name, t), part in zip(present, flat):
            dtype = np.float32 if t.is_floating_point() else _NUMPY[t.dtype]
            self._parts.append((name, dtype, tuple(t.shape), part.numel()))
        packed = torch.cat(flat) if len(flat) > 1 else flat[0]
        if packed.device.type == 'cuda':
            self._host = torch.empty(packed.numel(), dtype=torch.uint8, pin_memory=True)
            self._host.copy_(packed, non_blocking=True)
            self._event = torch.cuda.Event()
            self._event.record(torch.cuda.current_stream(packed.device))
        else:  # a copy now: a single part may be a view of a buffer the next call reuses
            self._host = packed.clone() if packed.device.type == 'cpu' else packed.cpu()

    def ready(self) -> bool:
        """Whether :meth:`wait` would return without blocking."""
        return self._event is None or self._event.query()

    def wait_ready(self) -> None:
        """Block until the copy has landed (releases the GIL meanwhile); read nothing."""
        if self._event is not None:
            self._event.synchronize()

    def wait(self) -> dict:
        """Block until the copy has landed; return the arrays (each a copy of its own)."""
        out: dict = dict.fromkeys(self._names)
        if self._host is None:
            return out
        self.wait_ready()
        raw = self._host.numpy()
        offset = 0
        for name, dtype, shape, n in self._parts:
            out[name] = raw[offset:offset + n].view(dtype).reshape(shape).copy()
            offset += n
        return out


def to_host(tensors: Mapping[str, Optional[torch.Tensor]]) -> dict:
    """
    Return ``{name: numpy array or None}`` of ``tensors``, fetched in one device transfer.

    Every tensor must live on one device. Float tensors come back as float32, the others
    in their own dtype; shapes are kept. None stays None.
    """
    return HostCopy(tensors).wait()
