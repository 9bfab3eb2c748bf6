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
The node's parameters: one table, declared once, mapped onto frozen dataclasses.

Every parameter has a type, a default, a rule (range or choices) and a description.
``read_only`` ones need a restart (they size the model or the pools, or the DDS
entities); the others apply from the next frame. :func:`parse` validates a whole set
at once and raises :class:`ParamError` naming the parameter, the value and what is
allowed, so start-up and runtime refusals read the same.
"""

from __future__ import annotations

import array
from dataclasses import dataclass, fields
from enum import Enum
import os
import re
from typing import Any, Callable, Mapping, Optional

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.ros.conventions import map_from_optical, MapConvention
from lingbot_ros.streaming.config import (BACKENDS, EngineConfig, FrameProducts, HeadDtype,
                                          KeyframeMode, KvCacheDtype, PointsSpec,
                                          StreamConfig, WeightsDtype)
from lingbot_ros.streaming.map_cloud import MapCloudConfig
from rcl_interfaces.msg import (FloatingPointRange, IntegerRange, ParameterDescriptor,
                                ParameterType)


class ParamError(ValueError):
    """A parameter value outside what is allowed; the message names all three."""


class InputTransport(str, Enum):
    """What the cameras' topics carry (parameter ``input_transport``)."""

    RAW = 'raw'                # sensor_msgs/Image on each topic
    COMPRESSED = 'compressed'  # sensor_msgs/CompressedImage on <topic>/compressed


class QosReliability(str, Enum):
    """The image subscriptions' reliability (parameter ``qos_reliability``)."""

    BEST_EFFORT = 'best_effort'  # sensor data's
    RELIABLE = 'reliable'


@dataclass(frozen=True)
class Spec:
    """One parameter: name, default, rule and why it exists."""

    name: str
    default: Any
    description: str
    read_only: bool = False
    choices: tuple = ()
    low: Optional[float] = None
    high: Optional[float] = None
    check: Optional[Callable[[Any], bool]] = None
    rule: str = ''

    @property
    def allowed(self) -> str:
        if self.choices:
            return 'one of ' + ', '.join(repr(c) for c in self.choices)
        if self.rule:
            return self.rule
        kind = _type_name(self.default)
        if self.low is not None and self.high is not None:
            return f'{kind} in [{self.low}, {self.high}]'
        return kind


_DEVICE = re.compile(r'^(auto|cpu|cuda(:\d+)?)$')
_NAME = re.compile(r'^[A-Za-z][A-Za-z0-9_]*$')

SPECS: tuple[Spec, ...] = (
    # --- model: fixed for the life of the node --------------------------------------
    Spec('checkpoint', '', 'LingBot-Map weights: a .pt or .safetensors file, or '
         'hf://<owner>/<repo>[@<revision>]/<file> (fetched into the Hugging Face cache on '
         'first use, offline afterwards). Empty: random weights of the preset (tiny by '
         'default), for trying the plumbing only.',
         read_only=True, rule='a file path, an hf:// spec, or empty'),
    Spec('preset', 'auto', "Network structure. 'auto': release with a checkpoint, tiny "
         'without one.', read_only=True, choices=('auto', 'release', 'tiny')),
    Spec('model_config', '', 'Optional JSON file with a model structure (overrides preset).',
         read_only=True, rule='a file path, or empty'),
    Spec('device', 'auto', "Torch device: 'auto' (CUDA when available), 'cpu', 'cuda', "
         "'cuda:N'.", read_only=True, check=lambda v: bool(_DEVICE.match(v)),
         rule="'auto', 'cpu', 'cuda' or 'cuda:N'"),
    Spec('dtype', 'auto', "Compute dtype. 'auto': bfloat16 on CUDA, float32 on CPU.",
         read_only=True, choices=('auto', 'float32', 'bfloat16', 'float16')),
    Spec('attention_backend', 'auto', 'Attention over the paged KV cache. auto: FlashInfer '
         'where installed on CUDA, else PyTorch SDPA.', read_only=True, choices=BACKENDS),
    Spec('seed', 0, 'Seed for random weights (no checkpoint).', read_only=True,
         low=0, high=2**31 - 1),
    Spec('cuda_graphs', True, 'Replay each streaming frame as one CUDA graph, attention over '
         "the cache included, and each live frame's resize as one more (CUDA only; falls "
         'back to eager, reported in diagnostics).',
         read_only=True),
    Spec('torch_compile', True, "torch.compile the blocks' work around attention and the "
         'depth decoder (CUDA only; no effect on the CPU). The first start on a machine '
         'compiles for tens of seconds (said in the log and /diagnostics); '
         'lingbot-ros-prepare does it ahead into caches that survive a restart.',
         read_only=True),
    Spec('attention_kv_splits', 0, "FlashInfer: cut each frame's cached keys into this many "
         'parts that run side by side, so one frame fills the GPU (0: chosen from the frame '
         'size and the GPU: 4 for the release model on an H200).', read_only=True,
         low=0, high=16),
    Spec('weights_dtype', 'auto', "How weights are stored. 'auto': the aggregator's linear "
         'and convolution weights in dtype (its norms, scales and tokens in float32), the '
         "heads in float32 (as released); 'compute': the heads' linear and convolution "
         'weights in dtype too, but for their last layers (they still compute in float32; '
         'about 0.34 GiB less for the release model; depth drift on the CPU smoke run 0.28 % '
         'instead of 0.17 %).', read_only=True, choices=tuple(w.value for w in WeightsDtype)),
    Spec('kv_cache_dtype', 'auto', "Aggregator KV cache storage. 'auto': the compute dtype; "
         "'float8_e4m3': half the bytes of bfloat16 (opt-in; drift against float32 on real "
         'images 0.32 deg rotation, 0.68 % depth, as with the bf16 cache: see the README).',
         read_only=True, choices=tuple(k.value for k in KvCacheDtype)),
    Spec('head_dtype', 'float16', "What the camera and depth heads compute in. 'float16': "
         "under autocast in float16; 'compute': under autocast in dtype; 'float32': autocast "
         'off in the heads, as the reference. Under autocast the convolutions run '
         "channels-last and the heads' last layers, exp and LayerNorm statistics stay "
         "float32; their linear and convolution weights are kept in the heads' dtype, "
         "whatever weights_dtype says. No effect when dtype is float32 (the CPU's). "
         'float16 heads drift no more than float32 heads against a float32 run '
         '(docs/performance.md); bfloat16 heads drift more.', read_only=True,
         choices=tuple(h.value for h in HeadDtype)),
    Spec('depth_chunk_frames', 0, 'Frames the depth head decodes at once in a multi-frame '
         "call (0: the model's own, 8); 1 bounds the scale call's memory (about 1.1 GiB less "
         'at 294x518).', read_only=True, low=0, high=64),
    Spec('expandable_segments', False, "PyTorch CUDA allocator's expandable segments: memory "
         'one phase frees is usable by the next instead of stranded in half-used blocks '
         '(what lets window 48 capture its graphs under 8 GiB).', read_only=True),
    Spec('image_size', 518, 'Model input width in pixels (a multiple of the 14 px patch); '
         'the height follows the camera aspect ratio.', read_only=True, low=28, high=1036,
         check=lambda v: v % 14 == 0, rule='a multiple of 14 in [28, 1036]'),
    # --- streaming -------------------------------------------------------------------
    Spec('scale_frames', 8, 'Frames buffered at start and run together to fix the map scale; '
         'no output until they are in.', read_only=True, low=1, high=64),
    Spec('sliding_window', 64, 'Keyframes kept in the KV cache window (besides the scale '
         'frames); sizes the page pool.', read_only=True, low=2, high=1024),
    Spec('max_window_frames', 0, 'Frames one window commits before a new one is seeded from '
         "its last scale_frames (0: the model's 1024); sizes the special-token pages (256 "
         'saves about 0.6 GiB).', read_only=True, low=0, high=1024),
    Spec('keyframe_mode', 'interval', "'interval': every Nth frame is a keyframe; 'flow': "
         'a frame is a keyframe when the image moved enough.',
         choices=tuple(m.value for m in KeyframeMode)),
    Spec('keyframe_interval', 1, 'Every Nth frame is a keyframe (interval mode).',
         low=1, high=1000),
    Spec('flow_threshold_px', 3.0, 'Mean optical flow (pixels) that makes a keyframe '
         '(flow mode).', low=0.01, high=1000.0),
    Spec('max_keyframe_gap', 30, 'A keyframe at least every this many frames (flow mode).',
         low=1, high=10000),
    Spec('camera_iterations', 0, 'Refinement iterations of the camera head (fewer: faster; '
         "0: the model's own number).", read_only=True, low=0, high=8),
    # --- input -----------------------------------------------------------------------
    Spec('camera_topics', ['image'], 'Image topics, one streaming session each (relative '
         'names resolve in the node namespace; remap or list absolute names).',
         read_only=True, check=lambda v: len(v) >= 1 and all(v) and len(set(v)) == len(v),
         rule='a non-empty list of distinct, non-empty topic names'),
    Spec('camera_names', [], 'One name per topic, used in output namespaces and '
         'diagnostics. Empty: derived from the topics.', read_only=True,
         check=lambda v: all(_NAME.match(n) for n in v) and len(set(v)) == len(v),
         rule='distinct names of letters, digits and underscores, starting with a letter'),
    Spec('input_transport', InputTransport.RAW.value, "'raw': sensor_msgs/Image on each "
         "topic; 'compressed': sensor_msgs/CompressedImage on <topic>/compressed.",
         read_only=True, choices=tuple(t.value for t in InputTransport)),
    Spec('qos_reliability', QosReliability.BEST_EFFORT.value, 'Image subscription '
         'reliability (sensor data: best_effort).', read_only=True,
         choices=tuple(r.value for r in QosReliability)),
    Spec('qos_depth', 5, 'Image subscription history depth (sensor data: 5). Frames the '
         'history overwrites before the node takes them are counted as lost before the node.',
         read_only=True, low=1, high=100),
    Spec('queue_size', 1, 'Frames waiting per camera for the worker; when full the oldest '
         'is dropped (newest wins) and counted.', read_only=True, low=1, high=32),
    Spec('use_cv_bridge', True, 'Use cv_bridge for raw images where it is installed.',
         read_only=True),
    Spec('max_input_pixels', 4096 * 4096, 'Largest image (width x height) accepted. A '
         'compressed image is measured from its PNG / JPEG header before it is decoded, so '
         'a small file that declares a huge image (a decompression bomb) is refused at once '
         '(rejected_too_large) instead of being decoded into gigabytes.',
         low=1, high=2**31 - 1),
    Spec('reorder_window_s', 0.5, "A frame stamped earlier than the camera's newest by at "
         'most this many seconds is dropped and counted as out of order '
         '(rejected_out_of_order: a driver that swapped two frames); a larger jump back (a '
         "looped bag, a restarted driver) resets the camera's session: a new map "
         '(stamp_resets). 0: every jump back resets.', low=0.0, high=3600.0),
    # --- frames ----------------------------------------------------------------------
    Spec('map_frame', 'lingbot_map', 'Frame of poses, path and points (with several cameras '
         "<map_frame>_<camera>). Not 'map': that is the global map of nav2 and the "
         'localisers (REP-105), and this map has its own origin and arbitrary scale.',
         read_only=True, check=bool, rule='a non-empty frame id'),
    Spec('camera_frame', '', 'Child frame of odom and TF (the tracked optical frame). Empty: '
         "<image frame_id>_lingbot, so the robot's own camera frame keeps its URDF parent. "
         "camera_info and depth keep the image's frame_id.", read_only=True,
         rule='a frame id, or empty'),
    Spec('map_convention', MapConvention.REP103.value, "'rep103': map is x forward, y left, "
         "z up at the first camera pose; 'optical': map is the first camera's optical frame.",
         read_only=True, choices=tuple(c.value for c in MapConvention)),
    # --- outputs (apply from the next frame) -----------------------------------------
    Spec('publish_tf', True, 'Broadcast map -> camera frame on /tf (needs tf2_ros).'),
    Spec('publish_odom', True, 'Publish ~/odom (nav_msgs/Odometry).'),
    Spec('publish_path', True, 'Publish ~/path (nav_msgs/Path).'),
    Spec('publish_depth', False, 'Publish ~/depth (32FC1, model grid).'),
    Spec('publish_points', False, 'Publish ~/points (PointCloud2 xyz + rgb).'),
    Spec('publish_camera_info', True, "Publish ~/camera_info (the model's intrinsics at the "
         'input resolution).'),
    Spec('pose_covariance', [0.01, 0.01, 0.01, 0.01, 0.01, 0.01], '~/odom pose covariance '
         'diagonal (x, y, z, roll, pitch, yaw; model units squared and rad^2). The model '
         'gives no uncertainty: this is a stated guess for fusion (robot_localization), '
         'never zero.', check=lambda v: len(v) == 6 and all(x > 0 for x in v),
         rule='6 positive numbers'),
    Spec('twist_covariance', [0.05, 0.05, 0.05, 0.05, 0.05, 0.05], '~/odom twist covariance '
         'diagonal (vx, vy, vz, wx, wy, wz; (model units/s)^2 and (rad/s)^2).',
         check=lambda v: len(v) == 6 and all(x > 0 for x in v), rule='6 positive numbers'),
    Spec('path_max_length', 2000, 'Poses kept in ~/path (oldest dropped).', low=1,
         high=1000000),
    Spec('path_period', 0.5, 'Seconds between ~/path messages (the whole path is sent each '
         'time; 0: every frame).', low=0.0, high=3600.0),
    Spec('points_decimation', 4, 'Take every Nth pixel in both directions for ~/points.',
         low=1, high=64),
    Spec('points_min_confidence', 0.0, 'Drop points below this confidence (0: off).',
         low=0.0, high=1e9),
    Spec('points_confidence_percentile', 50.0, "Drop the frame's points below this "
         'confidence percentile (0: off).', low=0.0, high=99.9),
    # --- the accumulated map (~/map_points, ~/save_map) ------------------------------
    Spec('publish_map', False, 'Accumulate keyframe points into a voxel map per camera and '
         'publish it on ~/map_points (xyz + rgb + confidence, map frame); ~/save_map writes '
         'it as PLY. Uses the points_* filters.'),
    Spec('map_period', 1.0, 'Seconds between ~/map_points messages (the whole map is sent '
         'each time, only when it changed).', low=0.1, high=3600.0),
    Spec('map_voxel_size', 0.02, 'Voxel edge of the map in model units; the points of a voxel '
         'merge into their mean. A change starts the map over.', low=0.0001, high=100.0),
    Spec('map_max_points', 500000, 'Voxels kept per camera (about 180 bytes each); beyond, the '
         'least recently observed are dropped first (counted in diagnostics).', low=1,
         high=100000000),
    Spec('colmap_max_keyframes', 100, 'Keyframe images kept per camera (JPEG in memory, '
         'about 30-80 kB each at a 518-pixel-wide model grid: ~3-8 MB at 100) so that '
         '~/save_colmap can write a COLMAP model of the map at any time; the oldest go first. '
         '0: none kept (~/save_colmap refuses). Needs publish_map.', read_only=True, low=0,
         high=100000),
    # --- diagnostics and services ----------------------------------------------------
    Spec('diagnostics_period', 1.0, 'Seconds between /diagnostics messages.', read_only=True,
         low=0.05, high=60.0),
    Spec('stats_window', 200, 'Frames in the latency / rate windows.', low=2, high=100000),
    Spec('drop_rate_warn', 0.5, 'WARN when this fraction of received frames is dropped '
         '(over the stats window).', low=0.0, high=1.0),
    Spec('pool_use_warn', 0.95, 'WARN when this fraction of the GPU memory pool is in use '
         '(KV pools, model, activations, other processes): the margin before out-of-memory. '
         'The KV pools themselves are sized up front and full by design.',
         low=0.0, high=1.0),
    Spec('stall_error_s', 10.0, 'ERROR when input arrives but no frame was processed for '
         'this many seconds (after the scale phase has had its frames).', low=0.1,
         high=3600.0),
    Spec('trajectory_dir', '~/.ros/lingbot_ros', 'Folder ~/save_trajectory writes '
         '<camera>_<time>.tum and .npz into.', check=bool, rule='a non-empty path'),
    Spec('autostart', True, 'Configure and activate on start (plain ros2 run / launch).',
         read_only=True),
)
SPEC = {s.name: s for s in SPECS}


# --- typed views ---------------------------------------------------------------------


@dataclass(frozen=True)
class ModelParams:
    """What Engine.load needs; fixed for the node's life."""

    checkpoint: str
    preset: str
    model_config: str
    device: str
    dtype: str
    attention_backend: str
    seed: int
    cuda_graphs: bool
    torch_compile: bool
    attention_kv_splits: int
    weights_dtype: str
    kv_cache_dtype: str
    head_dtype: str
    depth_chunk_frames: int
    expandable_segments: bool


@dataclass(frozen=True)
class StreamParams:
    """What each camera session needs; keyframe ones may change at runtime."""

    scale_frames: int
    sliding_window: int
    max_window_frames: int
    keyframe_mode: str
    keyframe_interval: int
    flow_threshold_px: float
    max_keyframe_gap: int
    camera_iterations: int
    image_size: int


@dataclass(frozen=True)
class InputParams:
    """Subscriptions and the worker queue."""

    camera_topics: tuple
    camera_names: tuple
    input_transport: InputTransport
    qos_reliability: QosReliability
    qos_depth: int
    queue_size: int
    use_cv_bridge: bool
    max_input_pixels: int
    reorder_window_s: float
    map_frame: str
    camera_frame: str
    map_convention: MapConvention

    def __post_init__(self) -> None:
        # parse() has checked the names against the choices: take the enum members
        for name, kind in (('input_transport', InputTransport),
                           ('qos_reliability', QosReliability),
                           ('map_convention', MapConvention)):
            object.__setattr__(self, name, kind(getattr(self, name)))


@dataclass(frozen=True)
class OutputParams:
    """Publishing switches and shaping; read by the worker at every frame."""

    publish_tf: bool
    publish_odom: bool
    publish_path: bool
    publish_depth: bool
    publish_points: bool
    publish_camera_info: bool
    pose_covariance: tuple
    twist_covariance: tuple
    path_max_length: int
    path_period: float
    points_decimation: int
    points_min_confidence: float
    points_confidence_percentile: float
    publish_map: bool
    map_period: float
    map_voxel_size: float
    map_max_points: int
    colmap_max_keyframes: int


@dataclass(frozen=True)
class DiagParams:
    """Diagnostics period, windows and level thresholds."""

    diagnostics_period: float
    stats_window: int
    drop_rate_warn: float
    pool_use_warn: float
    stall_error_s: float


@dataclass(frozen=True)
class NodeParams:
    """All parameters, validated together."""

    model: ModelParams
    stream: StreamParams
    inputs: InputParams
    outputs: OutputParams
    diag: DiagParams
    trajectory_dir: str
    autostart: bool

    @property
    def resolved_preset(self) -> str:
        if self.model.preset != 'auto':
            return self.model.preset
        return 'release' if self.model.checkpoint else 'tiny'

    @property
    def resolved_camera_names(self) -> tuple:
        return self.inputs.camera_names or camera_names_from_topics(self.inputs.camera_topics)

    @property
    def with_depth(self) -> bool:
        out = self.outputs
        return out.publish_depth or out.publish_points or out.publish_map


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


def _coerce(spec: Spec, value: Any) -> Any:
    default = spec.default
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif isinstance(default, str):
        ok = isinstance(value, str)
    elif is_number_list(default):
        ok = isinstance(value, (list, tuple, array.array)) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
        value = tuple(float(v) for v in value) if ok else value
    else:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    if not ok:
        raise ParamError(f'{spec.name}={shown(value)!r} is invalid: expected {spec.allowed}')
    return value


def shown(value: Any) -> Any:
    """Return a value as the YAML writes it: rclpy's tuples and array('d') as lists."""
    return list(value) if isinstance(value, (tuple, array.array)) else value


def is_number_list(default: Any) -> bool:
    """Whether a default is a list of numbers (a DOUBLE_ARRAY parameter)."""
    return isinstance(default, (list, tuple)) and bool(default) and all(
        isinstance(v, float) for v in default)


def _type_name(default: Any) -> str:
    if is_number_list(default):
        return 'a list of numbers'
    if isinstance(default, (list, tuple)):
        return 'a list of strings'
    return {bool: 'true or false', int: 'an integer', float: 'a number', str: 'a string'}[
        type(default)]


def check_one(name: str, value: Any) -> Any:
    """Validate one value; return it normalised (lists become tuples)."""
    spec = SPEC.get(name)
    if spec is None:
        raise ParamError(f'{name} is not a parameter of lingbot_node')
    value = _coerce(spec, value)
    bad = (
        (spec.choices and value not in spec.choices)
        or (spec.low is not None and value < spec.low)
        or (spec.high is not None and value > spec.high)
        or (spec.check is not None and not spec.check(value))
    )
    if bad:
        raise ParamError(f'{name}={shown(value)!r} is invalid: expected {spec.allowed}')
    return value


def parse(values: Mapping[str, Any]) -> NodeParams:
    """Validate a full set (defaults fill the gaps) and build the typed view."""
    v = {s.name: check_one(s.name, values.get(s.name, s.default)) for s in SPECS}
    unknown = sorted(set(values) - set(SPEC))
    if unknown:
        raise ParamError(f'{unknown[0]} is not a parameter of lingbot_node (unknown: {unknown})')
    names, topics = v['camera_names'], v['camera_topics']
    if names and len(names) != len(topics):
        raise ParamError(f'camera_names={list(names)!r} is invalid: expected one name per '
                         f'camera_topics entry ({len(topics)})')

    def pick(kind):
        return kind(**{f.name: v[f.name] for f in fields(kind)})
    return NodeParams(model=pick(ModelParams), stream=pick(StreamParams),
                      inputs=pick(InputParams), outputs=pick(OutputParams),
                      diag=pick(DiagParams),
                      trajectory_dir=os.path.expanduser(v['trajectory_dir']),
                      autostart=v['autostart'])


def update(current: NodeParams, changes: Mapping[str, Any]) -> NodeParams:
    """Apply runtime changes; read-only ones are refused (they need a restart)."""
    for name in changes:
        if name in SPEC and SPEC[name].read_only:
            raise ParamError(f'{name} is read-only: it needs a restart of the node')
    return parse({**as_values(current), **changes})


def as_values(p: NodeParams) -> dict:
    """Flatten the typed view back to parameter name -> value."""
    out = {'trajectory_dir': p.trajectory_dir, 'autostart': p.autostart}
    for part in (p.model, p.stream, p.inputs, p.outputs, p.diag):
        for f in fields(part):
            val = getattr(part, f.name)
            if isinstance(val, Enum):
                val = val.value  # the parameter's value, as ROS and the YAML spell it
            out[f.name] = list(val) if isinstance(val, tuple) else val
    return out


def descriptor(spec: Spec) -> ParameterDescriptor:
    """Build the ROS descriptor: type, range, description (with choices), read_only."""
    default = spec.default
    kind = {bool: ParameterType.PARAMETER_BOOL, int: ParameterType.PARAMETER_INTEGER,
            float: ParameterType.PARAMETER_DOUBLE, str: ParameterType.PARAMETER_STRING,
            list: ParameterType.PARAMETER_STRING_ARRAY}[type(default)]
    if is_number_list(default):
        kind = ParameterType.PARAMETER_DOUBLE_ARRAY
    desc = ParameterDescriptor(name=spec.name, type=kind, description=spec.description,
                               read_only=spec.read_only)
    if spec.choices or spec.rule:
        desc.additional_constraints = spec.allowed
    if spec.low is not None and isinstance(default, int) and not isinstance(default, bool):
        desc.integer_range = [IntegerRange(from_value=int(spec.low), to_value=int(spec.high),
                                           step=0)]
    elif spec.low is not None and isinstance(default, float):
        desc.floating_point_range = [FloatingPointRange(
            from_value=float(spec.low), to_value=float(spec.high), step=0.0)]
    return desc


def engine_config(p: NodeParams, cuda_available: bool) -> EngineConfig:
    """Build the streaming layer's EngineConfig, resolving the 'auto' preset and dtype."""
    m = p.model
    dtype = m.dtype
    if dtype == 'auto':
        on_cuda = m.device.startswith('cuda') or (m.device == 'auto' and cuda_available)
        dtype = 'bfloat16' if on_cuda else 'float32'
    return EngineConfig(checkpoint=m.checkpoint or None, preset=p.resolved_preset,
                        model_config=m.model_config or None, device=m.device, dtype=dtype,
                        attention_backend=AttentionBackend(m.attention_backend), seed=m.seed,
                        cuda_graphs=m.cuda_graphs, weights_dtype=WeightsDtype(m.weights_dtype),
                        kv_cache_dtype=KvCacheDtype(m.kv_cache_dtype),
                        head_dtype=HeadDtype(m.head_dtype),
                        depth_chunk_frames=m.depth_chunk_frames,
                        expandable_segments=m.expandable_segments,
                        torch_compile=m.torch_compile,
                        attention_kv_splits=m.attention_kv_splits).validate()


def map_config(p: NodeParams) -> MapCloudConfig:
    """Build the accumulated map's configuration (the ~/points filters, the map's voxels)."""
    o = p.outputs
    return MapCloudConfig(voxel_size=o.map_voxel_size, max_points=o.map_max_points,
                          decimation=o.points_decimation,
                          min_confidence=o.points_min_confidence,
                          confidence_percentile=o.points_confidence_percentile)


@dataclass(frozen=True)
class Listened:
    """Whether any subscription (of any camera) reads ``~/depth`` and ``~/points`` now."""

    depth: bool = True
    points: bool = True


def stream_config(p: NodeParams, listened: Listened = Listened()) -> StreamConfig:
    """
    Build the streaming layer's StreamConfig shared by every camera session.

    ``listened``: which of depth and points someone reads; the sessions make only those
    (the others cost the worker host time every frame for nothing).
    """
    s = p.stream
    return StreamConfig(scale_frames=s.scale_frames, sliding_window=s.sliding_window,
                        max_window_frames=s.max_window_frames,
                        keyframe_mode=s.keyframe_mode, keyframe_interval=s.keyframe_interval,
                        flow_threshold_px=s.flow_threshold_px,
                        max_keyframe_gap=s.max_keyframe_gap,
                        camera_iterations=s.camera_iterations, with_depth=p.with_depth,
                        image_size=s.image_size,
                        products=frame_products(p, listened)).validate()


def frame_products(p: NodeParams, listened: Listened = Listened()) -> FrameProducts:
    """
    Say what the sessions make for ``~/depth`` and ``~/points`` from their results.

    The depth on the camera's pixels and the filtered, coloured points in the map frame of
    the configured convention: the output thread then only wraps their bytes.
    """
    o = p.outputs
    points = None
    if o.publish_points and listened.points:
        to_map = map_from_optical(p.inputs.map_convention)
        points = PointsSpec(decimation=o.points_decimation,
                            min_confidence=float(o.points_min_confidence),
                            percentile=float(o.points_confidence_percentile),
                            map_from_session=tuple(float(v) for v in to_map.reshape(-1)))
    return FrameProducts(depth_on_input=o.publish_depth and listened.depth, points=points)
