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
The node's parameters: one table, each parameter declared once, without ROS.

A :class:`Spec` holds a parameter's name, default (its type follows from it), what is
allowed (choices, a range, or a check with its rule in words), whether a change needs a
restart, its group, its tier (main: what a robot engineer tunes, in ``config/lingbot.yaml``;
advanced: expert settings, in ``config/advanced.yaml``), its description, and its target:
the field of the same name in ``EngineConfig`` or ``StreamConfig``, or the node's own.

Everything else is derived from :data:`SPECS`: :func:`parse` checks a whole set into one
frozen :data:`Params`; ``EngineConfig`` / ``StreamConfig`` check their fields with
:func:`check_one` (the one range check) and are built from a ``Params`` by their targets;
``ros/`` adds the descriptors, the declaration and ``--help``; ``ros/params_files.py``
renders the two YAML files and docs/parameters.md. The table lives in ``streaming/``
because those configs check their fields with it and ``streaming`` may not import ``ros``.
"""

from __future__ import annotations

import array
import dataclasses
from dataclasses import dataclass
from enum import Enum
import math
import re
import string
from typing import Any, Callable, Mapping, Optional, Tuple

from lingbot_ros.cache.backend_choice import USER_BACKENDS
from lingbot_ros.model.config import ConfigError, PRESETS
from lingbot_ros.model.hub import (HubSpecError, is_hub_spec, parse_hub_spec, SPEC_EXAMPLE,
                                   SPEC_FORM)
from lingbot_ros.streaming.choices import (DTYPES, HeadDtype, InputTransport, KeyframeMode,
                                           KvCacheDtype, MapConvention, QosReliability,
                                           WeightsDtype)
from lingbot_ros.streaming.scale.estimate import ScaleSource


class ParamError(ConfigError):
    """A parameter value outside what is allowed; the message names all three."""


class Group(Enum):
    """Where a parameter is listed (the YAML files' sections, docs/parameters.md's)."""

    MODEL = 'Model'
    STREAMING = 'Streaming'
    INPUT = 'Input'
    FRAMES = 'Frames (REP-103 / REP-105)'
    SCALE = "Metric scale (the robot's odometry, a depth camera, or a number)"
    OUTPUTS = 'Outputs'
    MAP = 'The accumulated map (~/map_points, ~/save_map, ~/save_colmap)'
    DIAGNOSTICS = 'Diagnostics, services, lifecycle'


class Tier(Enum):
    """Which parameter file lists a parameter with its default."""

    MAIN = 'lingbot.yaml'        # what a robot engineer tunes
    ADVANCED = 'advanced.yaml'   # expert settings: memory, numerics, queues, thresholds


class Target(Enum):
    """Where a parameter's value goes: a config field of the same name, or the node."""

    ENGINE = 'EngineConfig'
    STREAM = 'StreamConfig'
    NODE = 'node'


class Kind(Enum):
    """A parameter's type, as ROS declares it (from the default)."""

    BOOL = 'true or false'
    INTEGER = 'an integer'
    DOUBLE = 'a number'
    STRING = 'a string'
    STRINGS = 'a list of strings'
    DOUBLES = 'a list of numbers'


@dataclass(frozen=True)
class Spec:
    """
    One parameter of the table.

    ``choices``: an Enum class (all its members), a tuple of members, or a tuple of names;
    a value is taken by name and kept as the member. ``check`` may raise ``ValueError``
    whose text says why a value fails (``rule`` says what passes). ``empty_is_none``: ''
    is the config field's None (no file given).
    """

    name: str
    default: Any
    group: Group
    tier: Tier
    description: str
    read_only: bool = False   # fixed when the node starts: a change needs a restart
    choices: Any = ()         # an Enum class, a tuple of its members, or a tuple of names
    low: Optional[float] = None
    high: Optional[float] = None
    check: Optional[Callable[[Any], bool]] = None
    rule: str = ''
    target: Target = Target.NODE
    empty_is_none: bool = False

    @property
    def kind(self) -> Kind:
        """Return the parameter's type: its default's."""
        default = self.default
        if isinstance(default, bool):
            return Kind.BOOL
        if isinstance(default, int):
            return Kind.INTEGER
        if isinstance(default, float):
            return Kind.DOUBLE
        if isinstance(default, str):
            return Kind.STRING
        if default and all(isinstance(v, float) for v in default):
            return Kind.DOUBLES
        return Kind.STRINGS  # an empty list too: rclpy would infer a byte array

    @property
    def members(self) -> tuple:
        """Return the allowed values: Enum members, or names."""
        return tuple(self.choices)

    @property
    def names(self) -> Tuple[str, ...]:
        """Return the allowed values as the YAML writes them."""
        return tuple(shown(c) for c in self.members)

    @property
    def allowed(self) -> str:
        """Say what is allowed, in the words every refusal uses."""
        if self.choices:
            return f'one of {list(self.names)}'
        if self.rule:
            return self.rule
        if self.low is not None and self.high is not None:
            return f'{self.kind.value} in [{self.low}, {self.high}]'
        return self.kind.value


def shown(value: Any) -> Any:
    """Return a value as ROS and the YAML write it: a member's name, tuples as lists."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (tuple, array.array)):  # rclpy's double arrays arrive as array('d')
        return [shown(v) for v in value]
    return value


def _refused(name: str, value: Any, spec: Spec, reason: str = '') -> ParamError:
    why = f' ({reason})' if reason else ''
    return ParamError(f'{name}={shown(value)!r} is invalid{why}: expected {spec.allowed}')


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


_ACCEPTS = {
    Kind.BOOL: lambda v: isinstance(v, bool),
    Kind.INTEGER: lambda v: _number(v) and isinstance(v, int),
    Kind.DOUBLE: _number,
    Kind.STRING: lambda v: isinstance(v, str),
    Kind.STRINGS: lambda v: isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v),
    Kind.DOUBLES: lambda v: isinstance(v, (list, tuple, array.array)) and all(map(_number, v)),
}


def _typed(spec: Spec, value: Any) -> Any:
    """Return ``value`` in the parameter's type (whole numbers widen to floats), or raise."""
    kind = spec.kind
    if not _ACCEPTS[kind](value):
        raise _refused(spec.name, value, spec)
    if kind is Kind.STRINGS:
        return tuple(value)
    if kind not in (Kind.DOUBLE, Kind.DOUBLES):
        return value
    numbers = tuple(float(v) for v in value) if kind is Kind.DOUBLES else (float(value),)
    if not all(map(math.isfinite, numbers)):
        raise _refused(spec.name, value, spec, 'not finite')
    return numbers if kind is Kind.DOUBLES else numbers[0]


def check_one(name: str, value: Any) -> Any:
    """
    Check one value against its row; return it as the configs hold it.

    Lists become tuples, whole numbers floats where floats are declared, names of a
    choice its member. The one range check: the node, its tools and
    ``EngineConfig`` / ``StreamConfig.validate()`` all refuse through here.
    """
    spec = SPEC.get(name)
    if spec is None:
        raise ParamError(f'{name} is not a parameter of lingbot_node')
    value = _typed(spec, value)
    if spec.choices:
        found = [m for m in spec.members if m == value or shown(m) == shown(value)]
        if not found:
            raise _refused(name, value, spec)
        return found[0]
    if (spec.low is not None and value < spec.low) or \
            (spec.high is not None and value > spec.high):
        raise _refused(name, value, spec)
    if spec.check is not None:
        try:
            ok = spec.check(value)
        except ValueError as exc:
            raise _refused(name, value, spec, str(exc)) from None
        if not ok:
            raise _refused(name, value, spec)
    return value


_DEVICE = re.compile(r'^(auto|cpu|cuda(:\d+)?)$')
_NAME = re.compile(r'^[A-Za-z][A-Za-z0-9_]*$')


def _checkpoint(value: str) -> bool:
    if is_hub_spec(value):
        try:
            parse_hub_spec(value)
        except HubSpecError as exc:
            raise ValueError(exc.reason) from None
    return True


def _camera_pattern(value: str) -> bool:
    """Accept a path whose only replacement field is ``{camera}``."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if any(f != 'camera' for f in fields):
        raise ValueError('{camera} is the only field a path may hold')
    return True


def _six_positive(value: tuple) -> bool:
    return len(value) == 6 and all(v > 0 for v in value)


MODEL, STREAMING, INPUT, FRAMES = Group.MODEL, Group.STREAMING, Group.INPUT, Group.FRAMES
SCALE = Group.SCALE
OUTPUTS, MAP, DIAGNOSTICS = Group.OUTPUTS, Group.MAP, Group.DIAGNOSTICS
MAIN, ADVANCED = Tier.MAIN, Tier.ADVANCED
ENGINE, STREAM = Target.ENGINE, Target.STREAM

SPECS: Tuple[Spec, ...] = (
    # --- model: fixed for the life of the node ----------------------------------------
    Spec('checkpoint', '', MODEL, MAIN, 'LingBot-Map weights: a .pt or .safetensors file, '
         'or one on the Hugging Face hub (fetched into its cache on first use, offline '
         'afterwards). Empty: random weights of the preset (tiny by default), for trying the '
         'plumbing only.', read_only=True, check=_checkpoint,
         rule=f'a file path, {SPEC_FORM} (e.g. {SPEC_EXAMPLE}), or empty', target=ENGINE,
         empty_is_none=True),
    Spec('device', 'auto', MODEL, MAIN, "Torch device: 'auto' (CUDA when available), 'cpu', "
         "'cuda', 'cuda:N'.", read_only=True, check=lambda v: bool(_DEVICE.match(v)),
         rule="'auto', 'cpu', 'cuda' or 'cuda:N'", target=ENGINE),
    Spec('image_size', 518, MODEL, MAIN, 'Model input width in pixels (a multiple of the '
         '14-pixel patch); the height follows the camera aspect ratio. Smaller: faster and '
         'less memory, less detail.', read_only=True, low=28, high=1036,
         check=lambda v: v % 14 == 0, rule='a multiple of 14 in [28, 1036]', target=STREAM),
    Spec('preset', 'auto', MODEL, ADVANCED, "Network structure. 'auto': release with a "
         'checkpoint, tiny without one; release without a checkpoint runs random weights of '
         'the released size (memory and speed measurements).', read_only=True,
         choices=('auto',) + tuple(sorted(PRESETS)), target=ENGINE),
    Spec('model_config', '', MODEL, ADVANCED, 'Optional JSON file with a model structure '
         '(overrides preset).', read_only=True, rule='a file path, or empty', target=ENGINE,
         empty_is_none=True),
    Spec('dtype', 'auto', MODEL, ADVANCED, "Compute dtype. 'auto': bfloat16 on CUDA, float32 "
         'on the CPU.', read_only=True, choices=('auto',) + DTYPES, target=ENGINE),
    Spec('attention_backend', 'auto', MODEL, ADVANCED, 'Attention over the paged KV cache. '
         "'auto': FlashInfer where installed on CUDA, else PyTorch SDPA.", read_only=True,
         choices=USER_BACKENDS, target=ENGINE),
    Spec('cuda_graphs', True, MODEL, ADVANCED, 'Replay each streaming frame as one CUDA graph, '
         "attention over the cache included, and each live frame's resize as one more (CUDA "
         'only; falls back to eager, reported in diagnostics).', read_only=True,
         target=ENGINE),
    Spec('torch_compile', True, MODEL, ADVANCED, "torch.compile the blocks' work around "
         'attention and the depth decoder (CUDA only; no effect on the CPU). The first start '
         'on a machine compiles for tens of seconds (said in the log and /diagnostics); '
         'lingbot-ros-prepare does it ahead into caches that survive a restart.',
         read_only=True, target=ENGINE),
    Spec('head_dtype', HeadDtype.FLOAT16.value, MODEL, ADVANCED, 'What the camera and depth '
         "heads compute in. 'float16': under autocast in float16; 'compute': under autocast "
         "in dtype; 'float32': autocast off in the heads, as the reference. Under autocast "
         "the convolutions run channels-last and the heads' last layers, exp and LayerNorm "
         'statistics stay float32, and their linear and convolution weights are kept in the '
         "heads' dtype whatever weights_dtype says. No effect when dtype is float32 (the "
         "CPU's). Float16 heads drift no more than float32 heads against a float32 run "
         '(docs/performance.md); bfloat16 heads drift more.', read_only=True,
         choices=HeadDtype, target=ENGINE),
    Spec('weights_dtype', WeightsDtype.AUTO.value, MODEL, ADVANCED, 'How weights are stored. '
         "'auto': the aggregator's linear and convolution weights in dtype (its norms, "
         "scales and tokens in float32), float32 heads' weights in float32 (as released); "
         "'compute': float32 heads' linear and convolution weights in dtype too, but for "
         'their last layers (they still compute in float32; about 0.34 GiB less for the '
         'release model).', read_only=True, choices=WeightsDtype, target=ENGINE),
    Spec('kv_cache_dtype', KvCacheDtype.AUTO.value, MODEL, ADVANCED, 'Aggregator KV cache '
         "storage. 'auto': the compute dtype; 'float8_e4m3': half the bytes of bfloat16, "
         'so twice the window in the same memory (its drift: docs/memory.md).',
         read_only=True, choices=KvCacheDtype, target=ENGINE),
    Spec('depth_chunk_frames', 0, MODEL, ADVANCED, 'Frames the depth head decodes at once in '
         "a multi-frame call (0: the model's own, 8); 1 bounds the memory of the scale call "
         '(the 8 GB profile).', read_only=True, low=0, high=64, target=ENGINE),
    Spec('expandable_segments', False, MODEL, ADVANCED, "PyTorch CUDA allocator's expandable "
         'segments: memory one phase frees is usable by the next instead of stranded in '
         'half-used blocks (the 8 GB profile needs it to capture its graphs).',
         read_only=True, target=ENGINE),
    # --- streaming ---------------------------------------------------------------------
    Spec('sliding_window', 64, STREAMING, MAIN, 'Keyframes kept in the KV cache window '
         '(besides the scale frames): a longer memory of the scene for more device memory; '
         'sizes the page pool.', read_only=True, low=1, high=1024, target=STREAM),
    Spec('keyframe_mode', KeyframeMode.INTERVAL.value, STREAMING, MAIN, "'interval': every "
         "Nth frame is a keyframe; 'flow': a frame is a keyframe when the image moved "
         'enough.', choices=KeyframeMode, target=STREAM),
    Spec('keyframe_interval', 1, STREAMING, MAIN, 'Every Nth frame is a keyframe (interval '
         'mode).', low=1, high=1000, target=STREAM),
    Spec('flow_threshold_px', 3.0, STREAMING, MAIN, 'Mean optical flow (pixels) that makes a '
         'keyframe (flow mode).', low=0.01, high=1000.0, target=STREAM),
    Spec('max_keyframe_gap', 30, STREAMING, MAIN, 'A keyframe at least every this many frames '
         '(flow mode).', low=1, high=10000, target=STREAM),
    Spec('scale_frames', 8, STREAMING, ADVANCED, 'Frames buffered at start and run together '
         'to fix the map scale; no output until they are in.', read_only=True, low=1,
         high=64, target=STREAM),
    Spec('max_window_frames', 0, STREAMING, ADVANCED, 'Frames one window commits before a new '
         "one is seeded from its last scale_frames (0: the model's 1024); sizes the "
         'special-token pages (the 8 GB profile uses 256).', read_only=True, low=0,
         high=1024, target=STREAM),
    Spec('camera_iterations', 0, STREAMING, ADVANCED, 'Refinement iterations of the camera '
         "head (fewer: faster; 0: the model's own number).", read_only=True, low=0, high=8,
         target=STREAM),
    # --- input -------------------------------------------------------------------------
    Spec('camera_topics', ['image'], INPUT, MAIN, 'Image topics, one streaming session each '
         '(relative names resolve in the node namespace; remap or list absolute names).',
         read_only=True, check=lambda v: len(v) >= 1 and all(v) and len(set(v)) == len(v),
         rule='a non-empty list of distinct, non-empty topic names'),
    Spec('camera_names', [], INPUT, MAIN, 'One name per topic, used in output namespaces and '
         'diagnostics. Empty: derived from the topics.', read_only=True,
         check=lambda v: all(_NAME.match(n) for n in v) and len(set(v)) == len(v),
         rule='distinct names of letters, digits and underscores, starting with a letter'),
    Spec('input_transport', InputTransport.RAW.value, INPUT, MAIN, "'raw': "
         "sensor_msgs/Image on each topic; 'compressed': sensor_msgs/CompressedImage on "
         '<topic>/compressed.', read_only=True, choices=InputTransport),
    Spec('qos_reliability', QosReliability.BEST_EFFORT.value, INPUT, MAIN, 'Image '
         "subscription reliability (sensor data: best_effort); 'reliable' only hears a "
         'reliable publisher.', read_only=True, choices=QosReliability),
    Spec('reorder_window_s', 0.5, INPUT, MAIN, "A frame stamped earlier than the camera's "
         'newest by at most this many seconds is dropped and counted as out of order '
         '(rejected_out_of_order: a driver that swapped two frames); a larger jump back (a '
         "looped bag, a restarted driver) resets the camera's session: a new map "
         '(stamp_resets). 0: every jump back resets.', low=0.0, high=3600.0),
    Spec('qos_depth', 5, INPUT, ADVANCED, 'Image subscription history depth (sensor data: 5). '
         'Frames the history overwrites before the node takes them are counted as lost '
         'before the node (frames_lost_before_node).', read_only=True, low=1, high=100),
    Spec('queue_size', 1, INPUT, ADVANCED, 'Frames waiting per camera for the worker; when '
         'full the oldest is dropped (newest wins) and counted.', read_only=True, low=1,
         high=32),
    Spec('use_cv_bridge', True, INPUT, ADVANCED, 'Use cv_bridge for raw images where it is '
         "installed (false: the node's own converter for every encoding).", read_only=True),
    Spec('max_input_pixels', 4096 * 4096, INPUT, ADVANCED, 'Largest image (width x height) '
         'accepted; the default is 4096 x 4096. A compressed image is measured from its PNG '
         '/ JPEG header before it is decoded, so a small file that declares a huge image (a '
         'decompression bomb) is refused at once (rejected_too_large) instead of being '
         'decoded into gigabytes.', low=1, high=2**31 - 1),
    # --- frames --------------------------------------------------------------------------
    Spec('map_frame', 'lingbot_map', FRAMES, MAIN, 'Frame of poses, path and points (with '
         'several cameras <map_frame>_<camera>, but for the camera that drives '
         'publish_map_to_odom). The default is an island of its own, not connected to the '
         "robot's tree. With publish_map_to_odom set it to 'map' (REP-105's global frame, "
         "nav2's and the localisers').", read_only=True, check=bool,
         rule='a non-empty frame id'),
    Spec('camera_frame', '', FRAMES, MAIN, 'Child frame of odom and TF (the tracked optical '
         "frame). Empty: <image frame_id>_lingbot, so the robot's own camera frame keeps its "
         "URDF parent. camera_info and depth keep the image's frame_id.", read_only=True,
         rule='a frame id, or empty'),
    Spec('map_convention', MapConvention.REP103.value, FRAMES, MAIN, "'rep103': map is x "
         "forward, y left, z up at the first camera pose; 'optical': map is the first "
         "camera's optical frame.", read_only=True, choices=MapConvention),
    Spec('base_frame', 'base_link', FRAMES, MAIN, "The robot's frame (REP-105). The node looks "
         "up base_frame -> each image's frame_id on TF (the URDF's static transform) for the "
         'odometry scale, ~/base_odom and map -> odom; without it, it says so and goes on.',
         read_only=True, check=bool, rule='a non-empty frame id'),
    Spec('odom_frame', 'odom', FRAMES, MAIN, "Frame of the robot's odometry (REP-105): "
         'odom_frame -> base_frame on TF, or odometry_topic.', read_only=True, check=bool,
         rule='a non-empty frame id'),
    Spec('publish_map_to_odom', False, FRAMES, MAIN, 'With a scale, broadcast map_frame -> '
         'odom_frame so that map_frame -> odom_frame -> base_frame is the pose of the robot '
         'the node estimates (REP-105, as SLAM nodes do), instead of map_frame -> camera. Set '
         'map_frame: map. Needs tf2_ros and odom_frame -> base_frame on TF.', read_only=True),
    Spec('map_to_odom_camera', '', FRAMES, ADVANCED, 'The camera whose poses drive map_frame -> '
         'odom_frame (a name of camera_names, or derived from the topics); empty: the '
         'first.', read_only=True, check=lambda v: v == '' or bool(_NAME.match(v)),
         rule='a camera name, or empty'),
    Spec('map_to_odom_future_s', 0.2, FRAMES, ADVANCED, 'map_frame -> odom_frame is stamped '
         'this long after the image it comes from (as slam_toolbox future-dates it by its '
         'transform_timeout), so that lookups at the current time between two images need '
         'no extrapolation; 0: the image stamp.', low=0.0, high=10.0),
    # --- metric scale ------------------------------------------------------------------------
    Spec('scale_source', ScaleSource.NONE.value, SCALE, MAIN, "Where metres come from. 'none': "
         "model units (no metric output); 'odometry': fitted per window to the robot's "
         'odometry (TF odom_frame -> base_frame, or odometry_topic) through base_frame -> '
         "camera; 'depth': fitted to a registered depth image (depth_topics); 'fixed': "
         'fixed_scale. With a scale every output is in metres; /diagnostics says its state.',
         read_only=True, choices=ScaleSource),
    Spec('odometry_topic', '', SCALE, ADVANCED, 'nav_msgs/Odometry of base_frame in odom_frame '
         'for the odometry scale; empty: TF odom_frame -> base_frame at the image stamps.',
         read_only=True, rule='a topic name, or empty'),
    Spec('depth_topics', [], SCALE, ADVANCED, 'One registered depth image topic per camera for '
         'the depth scale (sensor_msgs/Image, 16UC1 in millimetres or 32FC1 in metres, on the '
         "colour image's pixels, stamped as it). Empty: depth_registered/image_rect for one "
         'camera, <camera name>/depth_registered/image_rect for several (relative: remap '
         'them).', read_only=True, check=lambda v: all(v) and len(set(v)) == len(v),
         rule='distinct, non-empty topic names (one per camera_topics entry), or empty'),
    Spec('depth_time_tolerance_s', 0.02, SCALE, ADVANCED, 'A depth image is paired with the '
         'colour image stamped at most this far from it (0: the same stamp only).', low=0.0,
         high=1.0),
    Spec('fixed_scale', 1.0, SCALE, ADVANCED, 'Metres per model unit for scale_source fixed.',
         read_only=True, check=lambda v: 0 < v <= 1e6, rule='a number in (0, 1e6]'),
    # --- outputs (apply from the next frame) ---------------------------------------------
    Spec('publish_tf', True, OUTPUTS, MAIN, 'Broadcast map -> camera frame on /tf (needs '
         'tf2_ros).'),
    Spec('publish_odom', True, OUTPUTS, MAIN, 'Publish ~/odom (nav_msgs/Odometry).'),
    Spec('publish_path', True, OUTPUTS, MAIN, 'Publish ~/path (nav_msgs/Path).'),
    Spec('publish_depth', False, OUTPUTS, MAIN, "Publish ~/depth (32FC1 on the camera's "
         'pixels).'),
    Spec('publish_points', False, OUTPUTS, MAIN, 'Publish ~/points (PointCloud2 xyz + rgb).'),
    Spec('publish_camera_info', True, OUTPUTS, MAIN, "Publish ~/camera_info (the model's "
         'intrinsics at the input resolution).'),
    Spec('pose_covariance', [0.01] * 6, OUTPUTS, MAIN, '~/odom pose covariance diagonal (x, '
         'y, z, roll, pitch, yaw; model units squared and rad^2) without a scale: a stated '
         'guess for fusion (robot_localization), never zero. With a scale the fit states '
         'it (m^2, rad^2).',
         check=_six_positive, rule='6 positive numbers'),
    Spec('twist_covariance', [0.05] * 6, OUTPUTS, MAIN, '~/odom twist covariance diagonal '
         '(vx, vy, vz, wx, wy, wz; (model units/s)^2 and (rad/s)^2; with a scale the linear '
         'part is converted to (m/s)^2).', check=_six_positive,
         rule='6 positive numbers'),
    Spec('points_decimation', 4, OUTPUTS, MAIN, 'Take every Nth pixel in both directions for '
         '~/points and the map.', low=1, high=64),
    Spec('publish_base_pose', False, OUTPUTS, ADVANCED, "Publish ~/base_odom: base_frame's "
         'pose in the map frame (nav_msgs/Odometry, child base_frame), once there is a scale '
         'and base_frame -> camera is known.'),
    Spec('path_max_length', 2000, OUTPUTS, ADVANCED, 'Poses kept in ~/path (oldest dropped).',
         low=1, high=1000000),
    Spec('path_period', 0.5, OUTPUTS, ADVANCED, 'Seconds between ~/path messages (the whole '
         'path is sent each time; 0: every frame).', low=0.0, high=3600.0),
    Spec('points_min_confidence', 0.0, OUTPUTS, ADVANCED, 'Drop points below this confidence '
         '(0: off).', low=0.0, high=1e9),
    Spec('points_confidence_percentile', 50.0, OUTPUTS, ADVANCED, "Drop the frame's points "
         'below this confidence percentile (0: off).', low=0.0, high=99.9),
    # --- the accumulated map (apply from the next keyframe) ------------------------------
    Spec('publish_map', False, MAP, MAIN, 'Accumulate keyframe points into a voxel map per '
         'camera and publish it on ~/map_points (xyz + rgb + confidence, map frame); '
         '~/save_map writes it as PLY, ~/save_colmap as a COLMAP model. Uses the points_* '
         'filters.'),
    Spec('map_voxel_size', 0.02, MAP, MAIN, 'Voxel edge of the map in model units (metres '
         'with a scale); the points of a voxel merge into their mean. A change starts the map '
         'over.', low=0.0001,
         high=100.0),
    Spec('map_period', 1.0, MAP, ADVANCED, 'Seconds between ~/map_points messages (the whole '
         'map is sent each time, only when it changed).', low=0.1, high=3600.0),
    Spec('map_max_points', 500000, MAP, ADVANCED, 'Voxels kept per camera (about 180 bytes '
         'each); beyond, the least recently observed are dropped first (counted in '
         'diagnostics).', low=1, high=100000000),
    Spec('colmap_max_keyframes', 100, MAP, ADVANCED, 'Keyframe images kept per camera (JPEG '
         'in memory, about 30-80 kB each at a 518-pixel-wide model grid) so that '
         '~/save_colmap can write a COLMAP model of the map at any time; the oldest go first. '
         '0: none kept (~/save_colmap refuses). Needs publish_map.', read_only=True, low=0,
         high=100000),
    # --- diagnostics, services, lifecycle ------------------------------------------------
    Spec('trajectory_dir', '~/.ros/lingbot_ros', DIAGNOSTICS, MAIN, 'Folder ~/save_trajectory, '
         '~/save_map, ~/save_colmap and ~/save_state write into.', check=bool,
         rule='a non-empty path'),
    Spec('resume_state', '', DIAGNOSTICS, MAIN, 'A state ~/save_state wrote '
         '(<trajectory_dir>/<camera>_state.safetensors), read at configure: each camera '
         'continues its saved map, in the same frame and scale. With several cameras a '
         'pattern: {camera} stands for each name. A state of another model, checkpoint, '
         'dtype or stream settings, or a bad file, fails configure (see resume_required). '
         'Empty: start a new map.', read_only=True, check=_camera_pattern,
         rule='a file path, a pattern with {camera}, or empty'),
    Spec('resume_required', True, DIAGNOSTICS, ADVANCED, 'A resume_state that cannot be '
         'resumed (missing, refused) fails configure; false: the camera starts a new map '
         'instead, said as WARN in the log and /diagnostics.', read_only=True),
    Spec('resume_far_distance', 1.0, DIAGNOSTICS, ADVANCED, 'After a resume, /diagnostics '
         'says far from the saved map (WARN) when the median distance of the first resumed '
         'camera positions to the nearest saved keyframe exceeds this (model units). '
         'Meaningful with real weights only.', low=0.0, high=1e6),
    Spec('autostart', True, DIAGNOSTICS, MAIN, 'Configure and activate on start (plain ros2 '
         'run / launch); false waits in unconfigured for a lifecycle manager.',
         read_only=True),
    Spec('diagnostics_period', 1.0, DIAGNOSTICS, ADVANCED, 'Seconds between /diagnostics '
         'messages.', read_only=True, low=0.05, high=60.0),
    Spec('drop_rate_warn', 0.5, DIAGNOSTICS, ADVANCED, 'WARN when this fraction of received '
         'frames is dropped (over the last frames).', low=0.0, high=1.0),
    Spec('pool_use_warn', 0.95, DIAGNOSTICS, ADVANCED, 'WARN when this fraction of the GPU '
         'memory pool is in use (KV pools, model, activations, other processes): the margin '
         'before out-of-memory. The KV pools themselves are sized up front and full by '
         'design.', low=0.0, high=1.0),
    Spec('stall_error_s', 10.0, DIAGNOSTICS, ADVANCED, 'ERROR when input arrives but no frame '
         'was processed for this many seconds (after the scale phase has had its frames).',
         low=0.1, high=3600.0),
)
SPEC = {s.name: s for s in SPECS}

Params = dataclasses.make_dataclass(
    'Params', [(s.name, Any) for s in SPECS], frozen=True,
    namespace={'__doc__': 'A whole set of parameter values, checked together by parse(): '
                          'one field per row of the table (choices as their members, lists '
                          'as tuples).', '__module__': __name__})


def parse(values: Mapping[str, Any]) -> 'Params':
    """Check a set of values (the table's defaults fill the gaps); return it as ``Params``."""
    unknown = sorted(set(values) - set(SPEC))
    if unknown:
        raise ParamError(f'{unknown[0]} is not a parameter of lingbot_node (unknown: {unknown})')
    checked = {s.name: check_one(s.name, values.get(s.name, s.default)) for s in SPECS}
    topics = checked['camera_topics']
    for name, what in (('camera_names', 'name'), ('depth_topics', 'topic')):
        given = checked[name]
        if given and len(given) != len(topics):
            raise ParamError(f'{name}={list(given)!r} is invalid: expected one {what} per '
                             f'camera_topics entry ({len(topics)})')
    resume = checked['resume_state']
    if resume and len(topics) > 1 and '{camera}' not in resume:
        raise ParamError(f'resume_state={resume!r} is invalid: expected a pattern with '
                         f'{{camera}} for {len(topics)} cameras (one state per camera)')
    return Params(**checked)


def as_values(params: 'Params') -> dict:
    """Return name -> value as ROS and the YAML write them (names of members, lists)."""
    return {s.name: shown(getattr(params, s.name)) for s in SPECS}


def update(current: 'Params', changes: Mapping[str, Any]) -> 'Params':
    """Apply runtime changes to a checked set; read-only ones are refused (a restart)."""
    for name in changes:
        if name in SPEC and SPEC[name].read_only:
            raise ParamError(f'{name} is read-only: it needs a restart of the node')
    return parse({**as_values(current), **changes})


def targeted(target: Target) -> Tuple[Spec, ...]:
    """Return the rows whose value goes to ``target`` (its field of the same name)."""
    return tuple(s for s in SPECS if s.target is target)


def config_fields(params: 'Params', target: Target) -> dict:
    """Return ``target``'s fields from a checked set, '' as None where the row says so."""
    out = {}
    for spec in targeted(target):
        value = getattr(params, spec.name)
        out[spec.name] = None if spec.empty_is_none and value == '' else value
    return out


def check_fields(config: Any, target: Target) -> None:
    """Check a config's fields that are parameters, by their rows (None where '' is)."""
    for spec in targeted(target):
        value = getattr(config, spec.name)
        if spec.empty_is_none and value is None:
            continue
        if spec.empty_is_none and value == '':
            raise ParamError(f"{spec.name}='' is invalid: expected None or {spec.allowed}")
        check_one(spec.name, value)


def resolved_preset(preset: str, checkpoint: Optional[str]) -> str:
    """Return the structure 'auto' means: the release one with weights, tiny without."""
    if preset != 'auto':
        return preset
    return 'release' if checkpoint else 'tiny'


def resolved_dtype(dtype: str, device: str, cuda_available: bool) -> str:
    """Return the dtype 'auto' means: bfloat16 on CUDA, float32 on the CPU."""
    if dtype != 'auto':
        return dtype
    on_cuda = device.startswith('cuda') or (device == 'auto' and cuda_available)
    return 'bfloat16' if on_cuda else 'float32'
