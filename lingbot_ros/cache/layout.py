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
How much one stream may cache, and what that costs: the pool size as data.

A stream's region of the pool is ``pages`` pages of ``page_size`` tokens, per layer,
for keys and for values. Patch pages (one per frame) sit below the special pages so
that everything a frame may attend to is one contiguous run of memory:

    patch_pages   = scale_frames + sliding_window + max_call_frames   (0 without patches)
    special_pages = ceil(special_capacity * special_tokens / page_size)
    pages         = patch_pages + special_pages
    bytes         = 2 * layers * pages * page_size * heads * head_dim * dtype_bytes

``max_call_frames`` is the headroom for the frames of one open call (and for the window
frames such a call hides until it commits or rolls back). ``special_capacity`` is the
number of frames whose special tokens the stream keeps before it reports an overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Optional

import torch


def _require(ok: bool, name: str, value: object, allowed: str) -> None:
    if not ok:
        raise ValueError(f'{name}={value!r} is not allowed: {allowed}')


@dataclass(frozen=True)
class StreamLayout:
    """One stream's cache bounds; validated once, at construction."""

    special_tokens: int             # leading tokens of every frame kept forever (6; camera: 1)
    patch_tokens: int               # tokens of a frame recycled with the window (0: none)
    scale_frames: int               # first frames whose patches are pinned
    sliding_window: int             # window frames whose patches stay visible
    special_capacity: int           # frames whose special tokens fit
    max_call_frames: int = 1        # frames one call may add beyond a full window
    page_size: Optional[int] = None  # tokens per page; must equal patch_tokens when > 0

    def __post_init__(self) -> None:
        _require(self.special_tokens >= 0, 'special_tokens', self.special_tokens, '>= 0')
        _require(self.patch_tokens >= 0, 'patch_tokens', self.patch_tokens, '>= 0')
        _require(self.special_tokens + self.patch_tokens > 0, 'special_tokens + patch_tokens',
                 self.special_tokens + self.patch_tokens, '> 0')
        _require(self.scale_frames >= 0, 'scale_frames', self.scale_frames, '>= 0')
        _require(self.sliding_window >= 1, 'sliding_window', self.sliding_window, '>= 1')
        _require(self.special_capacity >= 1, 'special_capacity', self.special_capacity, '>= 1')
        _require(self.max_call_frames >= 1, 'max_call_frames', self.max_call_frames, '>= 1')
        if self.patch_tokens > 0:
            _require(self.page_size in (None, self.patch_tokens), 'page_size', self.page_size,
                     f'None or patch_tokens ({self.patch_tokens}): one page holds one frame')
        else:
            _require(self.page_size is not None and self.page_size >= 1, 'page_size',
                     self.page_size, '>= 1 when patch_tokens == 0')

    @property
    def page(self) -> int:
        """Tokens per page."""
        return self.patch_tokens if self.patch_tokens > 0 else int(self.page_size)

    @property
    def tokens_per_frame(self) -> int:
        """Count special plus patch tokens of one frame, as the model hands them over."""
        return self.special_tokens + self.patch_tokens

    @property
    def patch_pages(self) -> int:
        """Pages for patch tokens: pinned scale frames, the window and one call's headroom."""
        if self.patch_tokens == 0:
            return 0
        return self.scale_frames + self.sliding_window + self.max_call_frames

    @property
    def special_pages(self) -> int:
        """Pages for the special tokens of ``special_capacity`` frames, packed densely."""
        return math.ceil(self.special_capacity * self.special_tokens / self.page)

    @property
    def pages(self) -> int:
        """Pages of this stream's region (per layer, for keys and for values alike)."""
        return self.patch_pages + self.special_pages

    def nbytes(self, layers: int, heads: int, head_dim: int, dtype: torch.dtype) -> int:
        """KV bytes the region reserves: 2 * layers * pages * page * heads * head_dim * size."""
        size = torch.empty((), dtype=dtype).element_size()
        return 2 * layers * self.pages * self.page * heads * head_dim * size


def aggregator_layout(patch_tokens: int, scale_frames: int = 8, sliding_window: int = 64,
                      special_capacity: int = 2048, special_tokens: int = 6,
                      max_call_frames: int = 1) -> StreamLayout:
    """Bounds for the aggregator's global blocks (the released model: 6 special tokens)."""
    return StreamLayout(special_tokens=special_tokens, patch_tokens=patch_tokens,
                        scale_frames=scale_frames, sliding_window=sliding_window,
                        special_capacity=special_capacity, max_call_frames=max_call_frames)


def camera_head_layout(capacity: int = 2048, page_size: int = 64) -> StreamLayout:
    """
    Bounds for the camera head's cache: one token per frame, kept for ``capacity`` frames.

    The reference keeps every camera token forever (its defect 3); ours is bounded and
    reports an overflow when the ``capacity + 1``-th frame would be cached.
    """
    return StreamLayout(special_tokens=1, patch_tokens=0, scale_frames=0, sliding_window=1,
                        special_capacity=capacity, page_size=page_size)
