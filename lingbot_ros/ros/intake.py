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
Frames a camera sent that the node never took: counted from the publishers' numbering.

A best-effort reader of depth N keeps the newest N samples and overwrites the rest without a
trace, so a node that falls behind loses frames nobody counts. DDS numbers every sample a
writer sends (1, 2, 3, ...) and rmw hands that number and the writer's GID to the callback
(``MessageInfo``), so a jump from 7 to 10 means two frames were lost before the node, on the
wire or in the reader's history. A number that goes back means that writer restarted: a new
run, nothing lost. Bounded: the newest ``MAX_WRITERS`` writers per topic are followed.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Mapping, Optional

MAX_WRITERS = 16  # writers followed per topic (a camera has one; a restarted driver, a few)


class SequenceGaps:
    """Per-writer last sequence number of one topic; ``observe`` returns frames lost."""

    def __init__(self) -> None:
        self._last: OrderedDict = OrderedDict()  # writer GID -> last sequence number seen

    def observe(self, info: Optional[Mapping[str, Any]]) -> int:
        """Count the samples between this one and the writer's previous (0 if unknown)."""
        if not info:
            return 0
        seq = info.get('publication_sequence_number')
        if not isinstance(seq, int) or seq <= 0:
            return 0  # this rmw does not number samples
        writer = _writer_key(info.get('publisher_gid'))
        last = self._last.pop(writer, None)
        self._last[writer] = seq
        while len(self._last) > MAX_WRITERS:
            self._last.popitem(last=False)
        if last is None or seq <= last:
            return 0  # first sample of this writer, or it restarted
        return seq - last - 1


def _writer_key(gid: Any) -> Any:
    """Return a hashable key for rmw's publisher GID (a dict of bytes, or None)."""
    if gid is None:
        return None
    if isinstance(gid, Mapping):
        data = gid.get('data', gid)
        try:
            return (gid.get('implementation_identifier'), bytes(data))
        except (TypeError, ValueError):
            return repr(gid)
    try:
        return bytes(gid)
    except (TypeError, ValueError):
        return repr(gid)
