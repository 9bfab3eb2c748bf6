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

"""The typed event a cache raises (or returns) instead of asserting when it would overflow."""

from __future__ import annotations


class CacheOverflow(Exception):
    """
    A call would not fit in the stream's stated bound; nothing was changed.

    The session handles it (typically by opening a new window); the cache's state is as
    before the call that raised it, so no committed frame is ever dropped silently.
    """

    def __init__(self, region: str, needed: int, capacity: int, unit: str,
                 frames: int) -> None:
        self.region = region        # 'patch' or 'special'
        self.needed = needed        # units the call would have needed in that region
        self.capacity = capacity    # units that region holds
        self.unit = unit            # 'pages' or 'tokens'
        self.frames = frames        # committed frames at the time
        super().__init__(f'{region} region would overflow: {needed} {unit} needed, '
                         f'{capacity} available ({frames} frames committed)')

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, CacheOverflow)
                and self.args == other.args and self.region == other.region)

    def __hash__(self) -> int:
        return hash(self.args)
