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
The parameter table as the node uses it: ROS descriptors and what the node derives.

The table itself (names, defaults, ranges, groups, descriptions) is
:mod:`lingbot_ros.streaming.parameters`, below both this layer and the streaming configs
that check their fields with it. Here: the ``ParameterDescriptor`` of a row (type, range,
choices, read-only), the camera names, whether the sessions make depth, and the stream
and map configurations built from a checked set and what is listened to.
"""

from __future__ import annotations

from dataclasses import dataclass
import re

from lingbot_ros.ros.conventions import map_from_optical
from lingbot_ros.streaming.config import FrameProducts, PointsSpec, StreamConfig
from lingbot_ros.streaming.map_cloud import MapCloudConfig
from lingbot_ros.streaming.parameters import Kind, Params, Spec
from lingbot_ros.streaming.scale.estimate import ScaleSource
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType)

ROS_TYPES = {Kind.BOOL: ParameterType.PARAMETER_BOOL,
             Kind.INTEGER: ParameterType.PARAMETER_INTEGER,
             Kind.DOUBLE: ParameterType.PARAMETER_DOUBLE,
             Kind.STRING: ParameterType.PARAMETER_STRING,
             Kind.STRINGS: ParameterType.PARAMETER_STRING_ARRAY,
             Kind.DOUBLES: ParameterType.PARAMETER_DOUBLE_ARRAY}


def descriptor(spec: Spec) -> ParameterDescriptor:
    """Build the ROS descriptor of a row: type, range, description (with choices), read_only."""
    desc = ParameterDescriptor(name=spec.name, type=ROS_TYPES[spec.kind],
                               description=spec.description, read_only=spec.read_only)
    if spec.choices or spec.rule:
        desc.additional_constraints = spec.allowed
    if spec.low is not None and spec.kind is Kind.INTEGER:
        desc.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high),
                                           step=0)]
    elif spec.low is not None and spec.kind is Kind.DOUBLE:
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(spec.low), to_value=float(spec.high), step=0.0)]
    return desc


def camera_names(p: Params) -> tuple:
    """Return the cameras' names: ``camera_names``, or derived from the topics."""
    return p.camera_names or camera_names_from_topics(p.camera_topics)


def camera_names_from_topics(topics) -> tuple:
    """Derive short, distinct names: the first topic segment that tells cameras apart."""
    if len(topics) == 1:
        return ('camera',)
    parts = [[p for p in t.strip('/').split('/') if p] for t in topics]
    for i in range(max(len(p) for p in parts)):
        names = [_sanitise(p[i] if i < len(p) else p[-1]) for p in parts]
        if len(set(names)) == len(names):
            return tuple(names)
    return tuple(f'camera{i}' for i in range(len(topics)))


def _sanitise(text: str) -> str:
    text = re.sub(r'[^A-Za-z0-9_]', '_', text)
    return text if text[:1].isalpha() else 'c' + text


def with_depth(p: Params) -> bool:
    """Whether the sessions decode depth: an output of the node, or the depth scale, needs it."""
    return p.publish_depth or p.publish_points or p.publish_map \
        or p.scale_source is ScaleSource.DEPTH


def map_config(p: Params) -> MapCloudConfig:
    """Build the accumulated map's configuration (the ~/points filters, the map's voxels)."""
    return MapCloudConfig(voxel_size=p.map_voxel_size, max_points=p.map_max_points,
                          decimation=p.points_decimation,
                          min_confidence=p.points_min_confidence,
                          confidence_percentile=p.points_confidence_percentile)


@dataclass(frozen=True)
class Listened:
    """Whether any subscription (of any camera) reads ``~/depth`` and ``~/points`` now."""

    depth: bool = True
    points: bool = True


def stream_config(p: Params, listened: Listened = Listened()) -> StreamConfig:
    """
    Build the StreamConfig every camera session shares.

    ``listened``: which of depth and points someone reads; the sessions make only those
    (the others cost the worker host time every frame for nothing).
    """
    return StreamConfig.from_parameters(p, with_depth=with_depth(p),
                                        products=frame_products(p, listened))


def frame_products(p: Params, listened: Listened = Listened()) -> FrameProducts:
    """
    Say what the sessions make for ``~/depth`` and ``~/points`` from their results.

    The depth on the camera's pixels and the filtered, coloured points in the map frame of
    the configured convention: the output thread then only wraps their bytes.
    """
    points = None
    if p.publish_points and listened.points:
        to_map = map_from_optical(p.map_convention)
        points = PointsSpec(decimation=p.points_decimation,
                            min_confidence=float(p.points_min_confidence),
                            percentile=float(p.points_confidence_percentile),
                            map_from_session=tuple(float(v) for v in to_map.reshape(-1)))
    return FrameProducts(depth_on_input=p.publish_depth and listened.depth, points=points)
