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
Why a frame was rejected and what a logged problem is about: one list each.

``Rejection`` values are the diagnostics keys (``rejected_<value>``), so dashboards keep
their names; ``Event`` names problems that reject no frame. ``Level`` is how loud the
log line is. Nothing here imports rclpy.
"""

from __future__ import annotations

from enum import Enum
from typing import Union


class Rejection(Enum):
    """A frame that was received and counted, but produced no output."""

    ENCODING = 'encoding'                # unknown encoding or compressed format
    DEPTH_IMAGE = 'depth_image'          # depth or disparity on the colour input
    SIZE = 'size'                        # empty, odd where even is needed, step too small
    TOO_LARGE = 'too_large'              # more pixels than max_input_pixels (header says)
    TRUNCATED = 'truncated'              # fewer bytes than the header promises
    CORRUPT = 'corrupt'                  # compressed data that does not decode
    DUPLICATE_STAMP = 'duplicate_stamp'  # the same stamp twice in a row
    OUT_OF_ORDER = 'out_of_order'        # older than the newest, within reorder_window_s
    SIZE_CHANGE = 'size_change'          # a different size than the running session's
    OUT_OF_MEMORY = 'out_of_memory'      # device out-of-memory inside the step
    NAN_OUTPUT = 'nan_output'            # the model returned a non-finite pose
    ERROR = 'error'                      # any other exception inside the step


class Event(Enum):
    """A problem worth a (throttled) log line that rejects no frame by itself."""

    WORKER_ERROR = 'worker_error'        # an exception outside a step, caught by the worker
    CONFIG = 'config'                    # a runtime change the session could not take
    SESSION_RESET = 'session_reset'      # the worker rebuilt a session after bad outputs
    MAP_RESTART = 'map_restart'          # the session started a new map on its own
    RESOLUTION_CHANGE = 'resolution_change'  # a camera changed size for good: new session
    PUBLISH_FAILED = 'publish_failed'    # one output could not be published


Topic = Union[Rejection, Event]


class Level(Enum):
    """How loud a reported problem is logged."""

    WARN = 'warn'
    ERROR = 'error'
