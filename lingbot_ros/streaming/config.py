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
Configuration of an engine (what is loaded) and of a stream (how frames flow).

Both are frozen dataclasses validated once by ``validate()``; an invalid value raises
:class:`~lingbot_ros.model.config.ConfigError` naming the parameter, the value and
what is allowed, so the ROS node can refuse a parameter change with that reason.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import math
from typing import Any, Mapping, Optional

from lingbot_ros.cache.backend_choice import AttentionBackend, USER_BACKENDS
from lingbot_ros.cache.limits import MAX_KV_SPLITS
from lingbot_ros.model.config import ConfigError, PRESETS
from lingbot_ros.streaming.choices import (  # noqa: F401 (the configs' choices, named here too)
    DTYPES, HeadDtype, KeyframeMode, KvCacheDtype, WeightsDtype)
from lingbot_ros.streaming.parameters import (check_fields, config_fields, Params,
                                              resolved_dtype, resolved_preset, Target,
                                              targeted)

BACKENDS = tuple(b.value for b in USER_BACKENDS)  # attention_backend's names, for parsers
# The camera size assumed before a real camera is seen: the start-up memory estimate, the
# compile warm-up (a camera of another size gets its own at its first frames).
NOMINAL_INPUT_HW = (480, 640)


# Fields that may change while a stream runs; they take effect from the next frame: the
# runtime parameters among the fields, and what the node derives from its outputs.
RUNTIME_SAFE = frozenset({s.name for s in targeted(Target.STREAM) if not s.read_only}
                         | {'with_depth', 'trajectory_length', 'products'})
IDENTITY_4X4 = tuple(float(i == j) for i in range(4) for j in range(4))


def _require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f'{name}={value!r} is invalid: expected {allowed}')


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class PointsSpec:
    """
    Which of a frame's depth pixels become its points, and the frame they are given in.

    Every ``decimation``-th pixel of the model grid with finite positive depth and a
    confidence at least ``min_confidence`` and at least the frame's ``percentile`` of its
    valid pixels; ``map_from_session`` (row-major 4x4) maps the session's map frame onto
    the frame the points are published in.
    """

    decimation: int = 1
    min_confidence: float = 0.0
    percentile: float = 0.0
    map_from_session: tuple = IDENTITY_4X4

    def validate(self) -> 'PointsSpec':
        """Check every field; return self so it chains."""
        _require(_is_int(self.decimation) and self.decimation >= 1, 'points.decimation',
                 self.decimation, 'an integer >= 1')
        mc = self.min_confidence
        _require(_is_number(mc) and math.isfinite(mc), 'points.min_confidence', mc,
                 'a finite number')
        pct = self.percentile
        _require(_is_number(pct) and 0 <= pct < 100, 'points.percentile', pct,
                 'a number in [0, 100)')
        m = self.map_from_session
        _require(isinstance(m, tuple) and len(m) == 16
                 and all(_is_number(v) and math.isfinite(v) for v in m),
                 'points.map_from_session', m, '16 finite numbers (a row-major 4x4)')
        return self


@dataclass(frozen=True)
class FrameProducts:
    """
    What a session makes from each frame's results for its messages (nothing here).

    ``depth_on_input``: the depth resampled onto the input's pixels; ``points``: the
    frame's filtered, coloured points (:mod:`~lingbot_ros.streaming.products`). Both need
    the stream's depth (``with_depth``).
    """

    depth_on_input: bool = False
    points: Optional[PointsSpec] = None

    def validate(self) -> 'FrameProducts':
        """Check every field; return self so it chains."""
        _require(isinstance(self.depth_on_input, bool), 'products.depth_on_input',
                 self.depth_on_input, 'a bool')
        _require(self.points is None or isinstance(self.points, PointsSpec),
                 'products.points', self.points, 'a PointsSpec or None')
        if self.points is not None:
            self.points.validate()
        return self

    @property
    def wanted(self) -> bool:
        return self.depth_on_input or self.points is not None


@dataclass(frozen=True)
class StreamConfig:
    """
    How one camera stream is run; defaults are the reference demo's.

    ``max_window_frames`` bounds the frames committed to one window (0: the model's
    ``max_frame_num``); it is also the special-token capacity a cache is sized for.
    ``trajectory_length`` bounds the in-memory trajectory ring kept for saving.
    """

    scale_frames: int = 8
    sliding_window: int = 64
    keyframe_mode: KeyframeMode = KeyframeMode.INTERVAL
    keyframe_interval: int = 1
    flow_threshold_px: float = 3.0
    max_keyframe_gap: int = 30
    camera_iterations: int = 0      # 0: the model's configured number of refinements
    with_depth: bool = True
    image_size: int = 518           # width of the model grid for live frames (crop mode)
    max_window_frames: int = 0
    trajectory_length: int = 100_000
    products: FrameProducts = FrameProducts()

    def __post_init__(self) -> None:
        """Take ``keyframe_mode`` by its name too (parameters, files); validate() judges it."""
        if not isinstance(self.keyframe_mode, KeyframeMode):
            try:
                object.__setattr__(self, 'keyframe_mode', KeyframeMode(self.keyframe_mode))
            except ValueError:
                pass

    def validate(self) -> 'StreamConfig':
        """Check every field once (parameters by their rows in the table); return self."""
        check_fields(self, Target.STREAM)
        _require(_is_int(self.trajectory_length) and self.trajectory_length >= 1,
                 'trajectory_length', self.trajectory_length, 'an integer >= 1')
        _require(isinstance(self.with_depth, bool), 'with_depth', self.with_depth, 'a bool')
        mwf = self.max_window_frames
        _require(mwf == 0 or mwf > self.scale_frames, 'max_window_frames',
                 mwf, f'0 (model limit) or an integer > scale_frames ({self.scale_frames})')
        _require(isinstance(self.products, FrameProducts), 'products', self.products,
                 'a FrameProducts')
        self.products.validate()
        return self

    @classmethod
    def from_parameters(cls, params: Params, with_depth: bool,
                        products: FrameProducts = FrameProducts()) -> 'StreamConfig':
        """Build from a checked parameter set: every row that targets a StreamConfig field."""
        return cls(**config_fields(params, Target.STREAM), with_depth=with_depth,
                   products=products).validate()

    def replace(self, **changes: Any) -> 'StreamConfig':
        """Return a validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes).validate()

    def restart_fields(self, other: 'StreamConfig') -> list[str]:
        """Names of fields that differ from ``other`` and need a session reset."""
        return [f.name for f in dataclasses.fields(self)
                if f.name not in RUNTIME_SAFE and getattr(self, f.name) != getattr(other, f.name)]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'StreamConfig':
        """Build from a mapping; unknown keys are errors."""
        return _from_dict(cls, data)


@dataclass(frozen=True)
class EngineConfig:
    """
    What to load and where to run it.

    ``model_config`` (a JSON file: our own form or a parity fixture's ``config.json``)
    wins over ``preset``. Without ``checkpoint`` the weights are random, drawn from
    ``seed``; ``checkpoint`` is a file path or ``hf://<owner>/<repo>[@<revision>]/<file>``
    (fetched into the Hugging Face cache on first use, see :mod:`lingbot_ros.model.hub`).
    ``device='auto'`` picks CUDA when available.

    Memory options (all off by default, see :mod:`lingbot_ros.streaming.memory`):
    ``weights_dtype='compute'`` keeps the heads' weights in ``dtype`` too (they still
    compute in float32: only the weights are rounded); ``kv_cache_dtype='float8_e4m3'``
    stores the aggregator's keys and values in float8; ``depth_chunk_frames`` decodes
    that many frames of a call at a time in the depth head (0: the model's own number);
    ``expandable_segments`` makes PyTorch's CUDA allocator map memory in growable
    segments, so memory freed by one phase (the scale call) is there for the next (a
    CUDA-graph capture) instead of staying stranded in half-used blocks.

    ``head_dtype='compute'`` runs the camera head and the depth head under autocast in
    ``dtype`` too, ``'float16'`` under autocast in float16 (off by default: float32 heads,
    as the reference). The depth head's convolutions then run channels-last; what turns a
    head's sums into outputs stays float32 (the last pose layer and the ``T, q, fov`` it
    accumulates, the last depth convolution and its ``exp`` / ``1 + exp``, every
    LayerNorm's statistics), and the camera head's KV cache is kept in the heads' dtype.
    Their linear and convolution weights are then stored in that dtype, their other
    parameters in float32, so ``weights_dtype`` no longer matters for the heads. Nothing
    changes on a float32 engine.

    ``torch_compile`` (CUDA only, off by default) fuses what each transformer block
    computes around attention, and the depth decoder, with ``torch.compile`` (see
    :mod:`lingbot_ros.model.compiled`):
    faster frames, but the first call of each shape compiles for tens of seconds.

    ``attention_kv_splits`` (FlashInfer): into how many parts each call's cached keys are
    cut so that one frame's queries fill the GPU (0: chosen from the call and the
    device; see :func:`lingbot_ros.cache.backends.auto_kv_splits`).
    """

    checkpoint: Optional[str] = None
    preset: str = 'tiny'
    model_config: Optional[str] = None
    device: str = 'auto'
    dtype: str = 'float32'
    attention_backend: AttentionBackend = AttentionBackend.AUTO
    seed: int = 0
    cuda_graphs: bool = True  # replay streaming frames as CUDA graphs (CUDA only)
    weights_dtype: WeightsDtype = WeightsDtype.AUTO
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.AUTO
    head_dtype: HeadDtype = HeadDtype.FLOAT32
    depth_chunk_frames: int = 0
    expandable_segments: bool = False
    torch_compile: bool = False
    attention_kv_splits: int = 0

    def __post_init__(self) -> None:
        # Parameters arrive as strings (YAML, ROS): take the enum member that has the value.
        for name, kind in (('attention_backend', AttentionBackend),
                           ('weights_dtype', WeightsDtype), ('kv_cache_dtype', KvCacheDtype),
                           ('head_dtype', HeadDtype)):
            value = getattr(self, name)
            if isinstance(value, str) and not isinstance(value, kind) and \
                    value in {m.value for m in kind}:
                object.__setattr__(self, name, kind(value))

    def validate(self) -> 'EngineConfig':
        """Check every field once (parameters by their rows in the table); return self."""
        check_fields(self, Target.ENGINE)
        # what the node's 'auto' stands for is resolved by from_parameters, before here
        _require(self.preset in PRESETS, 'preset', self.preset, f'one of {sorted(PRESETS)}')
        _require(self.dtype in DTYPES, 'dtype', self.dtype, f'one of {list(DTYPES)}')
        _require(_is_int(self.seed) and self.seed >= 0, 'seed', self.seed, 'an integer >= 0')
        _require(_is_int(self.attention_kv_splits)
                 and 0 <= self.attention_kv_splits <= MAX_KV_SPLITS, 'attention_kv_splits',
                 self.attention_kv_splits, f'an integer 0 (auto) .. {MAX_KV_SPLITS}')
        return self

    @classmethod
    def from_parameters(cls, params: Params, cuda_available: bool) -> 'EngineConfig':
        """
        Build from a checked parameter set: every row that targets an EngineConfig field.

        'auto' becomes what it means here: the release structure with a checkpoint (tiny
        without), bfloat16 on CUDA (float32 on the CPU).
        """
        fields = config_fields(params, Target.ENGINE)
        fields['preset'] = resolved_preset(fields['preset'], fields['checkpoint'])
        fields['dtype'] = resolved_dtype(fields['dtype'], fields['device'], cuda_available)
        return cls(**fields).validate()

    def replace(self, **changes: Any) -> 'EngineConfig':
        """Return a validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes).validate()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> 'EngineConfig':
        """Build from a mapping; unknown keys are errors."""
        return _from_dict(cls, data)


def _from_dict(kind, data: Mapping[str, Any]):
    names = {f.name for f in dataclasses.fields(kind)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(f'{kind.__name__}: unknown keys {unknown}; allowed {sorted(names)}')
    return kind(**dict(data)).validate()
