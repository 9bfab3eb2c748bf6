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
The named choices of the parameters: one Enum each, no ROS and no torch.

The streaming configs take these members (``EngineConfig.head_dtype``,
``StreamConfig.keyframe_mode`` ...), and the parameter table
(:mod:`~lingbot_ros.streaming.parameters`) offers their values as a parameter's choices. The
node's own (``input_transport``, ``qos_reliability``, ``map_convention``) are here too, below
the table that names them; ``ros/`` gives them their meaning.
"""

from __future__ import annotations

from enum import Enum

# What the model may compute in (``dtype``); the node's 'auto' resolves to one of them.
DTYPES = ('float32', 'bfloat16', 'float16')


class KeyframeMode(str, Enum):
    """Which frames of a stream become keyframes (committed to the cache)."""

    INTERVAL = 'interval'  # every Nth frame
    FLOW = 'flow'          # a frame whose image moved enough since the last keyframe


class WeightsDtype(str, Enum):
    """
    How the weights are stored on the device (``dtype`` is what the aggregator runs in).

    For the heads this matters only while they compute in float32 (``head_dtype``
    float32); heads under autocast keep their weights as the aggregator does.
    """

    AUTO = 'auto'        # the aggregator in dtype, the heads in float32 (as the reference)
    COMPUTE = 'compute'  # every weight in dtype; float32 heads still compute in float32


class HeadDtype(str, Enum):
    """
    What the camera and depth heads compute in (``dtype`` is what the aggregator runs in).

    Under autocast (``COMPUTE``, ``FLOAT16``) their linear and convolution weights are
    kept in the heads' dtype and their other parameters in float32, whatever
    ``weights_dtype`` says (``weights_dtype`` only decides how heads that compute in
    float32 keep their weights). A float32 engine has no autocast: there every choice
    runs the same float32 heads.

    ``FLOAT16`` is there for accuracy at the speed of ``COMPUTE`` on a bfloat16 engine:
    float16 keeps 10 mantissa bits to bfloat16's 7. Its range ends at 65504; a frame whose
    outputs overflow it is not finite and is rejected and counted, as any other.
    """

    FLOAT32 = 'float32'  # autocast off in the heads, as the reference
    COMPUTE = 'compute'  # under autocast in dtype: channels-last convolutions, low GEMMs
    FLOAT16 = 'float16'  # under autocast in float16 whatever dtype is (not on float32)


class KvCacheDtype(str, Enum):
    """How the aggregator's KV cache is stored (attention always runs in ``dtype``)."""

    AUTO = 'auto'                # the compute dtype
    FLOAT8_E4M3 = 'float8_e4m3'  # half of bf16's bytes; values clamped to +-448


class InputTransport(str, Enum):
    """What the cameras' topics carry (parameter ``input_transport``)."""

    RAW = 'raw'                # sensor_msgs/Image on each topic
    COMPRESSED = 'compressed'  # sensor_msgs/CompressedImage on <topic>/compressed


class QosReliability(str, Enum):
    """The image subscriptions' reliability (parameter ``qos_reliability``)."""

    BEST_EFFORT = 'best_effort'  # sensor data's
    RELIABLE = 'reliable'


class MapConvention(str, Enum):
    """The axes of the map frame poses and points are published in (``map_convention``)."""

    REP103 = 'rep103'    # x forward, y left, z up at the first camera pose
    OPTICAL = 'optical'  # the first camera's optical frame: x right, y down, z forward
