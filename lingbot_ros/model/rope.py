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
Rotary position embeddings of the aggregator: 2D in frame blocks, 3D in global blocks.

Both are applied to q and k after the qk-norm. Tables are built once per call geometry
and shared by every block of that call (:class:`Rope2D` keeps them per grid, dtype and
device; :class:`Rope3D` keeps the spatial part per grid and adds the call's time steps).
"""

from __future__ import annotations

from typing import Dict, Tuple, Union

import torch

Table = Tuple[torch.Tensor, torch.Tensor]  # (cos, sin)


def _inverse_frequencies(dim: int, base: float, dtype: torch.dtype,
                         device: torch.device) -> torch.Tensor:
    """Return base^(-2k/dim) for k < dim/2: the standard RoPE spectrum of ``dim`` features."""
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=dtype, device=device) / dim))


class Rope2D:
    """
    Rotate-half RoPE over (row, column) for the tokens of one frame.

    The first half of a head is rotated by the row, the second by the column; patch
    (r, c) sits at (r + 1, c + 1), the special tokens at (0, 0) (no rotation).
    """

    def __init__(self, head_dim: int, frequency: float, special_tokens: int) -> None:
        if head_dim % 4:
            raise ValueError(f'2D RoPE needs head_dim divisible by 4, got {head_dim}')
        self.head_dim = head_dim
        self.frequency = frequency
        self.special_tokens = special_tokens
        self._tables: Dict[tuple, Table] = {}

    def table(self, grid_h: int, grid_w: int, device: torch.device,
              dtype: torch.dtype) -> Table:
        """Return (cos, sin), each ``[P, head_dim]``, of a ``grid_h x grid_w``-patch frame."""
        key = (grid_h, grid_w, torch.device(device), dtype)
        if key not in self._tables:
            half = self.head_dim // 2
            inv = _inverse_frequencies(half, self.frequency, torch.float32, device)
            rows = torch.arange(grid_h, device=device).repeat_interleave(grid_w) + 1
            cols = torch.arange(grid_w, device=device).repeat(grid_h) + 1
            zeros = torch.zeros(self.special_tokens, dtype=rows.dtype, device=device)
            rows, cols = torch.cat([zeros, rows]), torch.cat([zeros, cols])

            def axis(pos: torch.Tensor) -> torch.Tensor:
                angles = torch.outer(pos.to(torch.float32), inv).to(dtype)
                return torch.cat([angles, angles], dim=-1)

            angles = torch.cat([axis(rows), axis(cols)], dim=-1)
            self._tables[key] = (angles.cos().to(dtype), angles.sin().to(dtype))
        return self._tables[key]

    @staticmethod
    def apply(x: torch.Tensor, table: Table) -> torch.Tensor:
        """Rotate ``x [..., P, head_dim]``: x cos + rotate_half(x) sin, per half of the head."""
        cos, sin = table
        quarter = x.shape[-1] // 4
        parts = x.unflatten(-1, (2, 2, quarter))
        turned = torch.stack([-parts[..., 1, :], parts[..., 0, :]], dim=-2).flatten(-3)
        return x * cos + turned * sin


class Rope3D:
    """
    Interleaved-pair RoPE over (time, row, column) for the tokens of several frames.

    Head dims are split ``split = (time, row, column)`` (each even); pair k = dims (2k, 2k+1).
    Special token j of a frame with time t sits at (t, j, j), patch (r, c) at
    (t, S + r, S + c) with S special tokens. Angles are float64, cast at the end.
    """

    def __init__(self, split: Tuple[int, int, int], theta: float, special_tokens: int) -> None:
        if any(d % 2 for d in split):
            raise ValueError(f'3D RoPE split must be even numbers, got {split}')
        self.split = tuple(split)
        self.theta = theta
        self.special_tokens = special_tokens
        # On the CPU explicitly: the model may be built under a meta-device context.
        cpu = torch.device('cpu')
        self._inv = [_inverse_frequencies(d, theta, torch.float64, cpu) for d in split]
        self._spatial: Dict[tuple, torch.Tensor] = {}
        self._inv_time: Dict[torch.device, torch.Tensor] = {}

    def _spatial_angles(self, grid_h: int, grid_w: int, device: torch.device) -> torch.Tensor:
        """Row and column angles ``[P, (row + column) / 2]`` (float64) of one frame."""
        key = (grid_h, grid_w, torch.device(device))
        if key not in self._spatial:
            s = self.special_tokens
            cpu = self._inv[0].device
            special = torch.arange(s, dtype=torch.float64, device=cpu)
            rows = torch.cat([special, s + torch.arange(grid_h, dtype=torch.float64, device=cpu)
                              .repeat_interleave(grid_w)])
            cols = torch.cat([special, s + torch.arange(grid_w, dtype=torch.float64, device=cpu)
                              .repeat(grid_h)])
            angles = torch.cat([torch.outer(rows, self._inv[1]),
                                torch.outer(cols, self._inv[2])], dim=-1)
            self._spatial[key] = angles.to(device)
        return self._spatial[key]

    def _time_frequencies(self, device: torch.device) -> torch.Tensor:
        """Return the temporal spectrum on ``device`` (kept there: no copy per call)."""
        if device not in self._inv_time:
            self._inv_time[device] = self._inv[0].to(device)
        return self._inv_time[device]

    def table(self, time_start: Union[int, torch.Tensor], num_frames: int, grid_h: int,
              grid_w: int, device: torch.device, dtype: torch.dtype) -> Table:
        """
        Return (cos, sin), each ``[num_frames * P, head_dim / 2]``, times time_start + s.

        ``time_start`` may be a 0-d device tensor, so a captured CUDA graph reads the
        time from memory instead of baking a constant in.
        """
        spatial = self._spatial_angles(grid_h, grid_w, device)
        inv_time = self._time_frequencies(spatial.device)
        times = torch.arange(num_frames, dtype=torch.float64, device=spatial.device)
        times = times + (time_start.to(torch.float64) if torch.is_tensor(time_start)
                         else float(time_start))
        temporal = torch.outer(times, inv_time)
        per_token = spatial.shape[0]
        angles = torch.cat([
            temporal[:, None, :].expand(-1, per_token, -1),
            spatial[None].expand(num_frames, -1, -1)], dim=-1).reshape(num_frames * per_token, -1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    @staticmethod
    def apply(x: torch.Tensor, table: Table) -> torch.Tensor:
        """Rotate each pair (x[2k], x[2k+1]) of ``x [..., N, head_dim]`` by its angle."""
        cos, sin = table
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
