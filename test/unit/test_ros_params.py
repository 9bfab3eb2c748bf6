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

"""The parameter table: declared once, checked with reasons, mapped onto the configs by target."""

import dataclasses

from hypothesis import given, strategies as st
from lingbot_ros.cache.backend_choice import AttentionBackend, USER_BACKENDS
from lingbot_ros.model.config import ConfigError
from lingbot_ros.ros import params
from lingbot_ros.streaming.choices import (HeadDtype, InputTransport, KeyframeMode, KvCacheDtype,
                                           MapConvention, QosReliability, WeightsDtype)
from lingbot_ros.streaming.config import EngineConfig, RUNTIME_SAFE, StreamConfig
from lingbot_ros.streaming.parameters import (as_values, check_one, Kind, ParamError, parse,
                                              SPEC, SPECS, Target, update)
import pytest
from rcl_interfaces.msg import ParameterType

REQUIRED = ('checkpoint', 'preset', 'device', 'dtype', 'attention_backend', 'image_size',
            'scale_frames', 'sliding_window', 'keyframe_mode', 'keyframe_interval',
            'flow_threshold_px', 'max_keyframe_gap', 'camera_iterations', 'camera_topics',
            'input_transport', 'qos_reliability', 'qos_depth', 'map_frame', 'camera_frame',
            'publish_tf', 'publish_path', 'publish_depth', 'publish_points',
            'publish_camera_info', 'path_max_length', 'diagnostics_period',
            'points_decimation', 'points_min_confidence', 'reorder_window_s')
# choices only a benchmark makes, and a window length: flags of the tools, or constants
GONE = ('seed', 'attention_kv_splits', 'stats_window', 'executor', 'queue_ahead',
        'model_process')


def test_each_parameter_is_declared_once_with_a_description_and_a_descriptor():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert set(REQUIRED) <= set(names) and not set(GONE) & set(names)
    for spec in SPECS:
        assert len(spec.description) > 15 and spec.description.endswith('.'), spec.name
        d = params.descriptor(spec)
        assert d.type == params.ROS_TYPES[spec.kind] and d.description == spec.description
        assert d.type != ParameterType.PARAMETER_NOT_SET and d.read_only == spec.read_only
        if spec.low is not None:
            assert d.integer_range or d.floating_point_range, spec.name
        if spec.choices:
            assert d.additional_constraints == spec.allowed
        check_one(spec.name, spec.default)  # every default passes its own rule
    # what needs a restart is read-only; keyframe policy and output switches are not
    for name in ('checkpoint', 'preset', 'device', 'dtype', 'camera_topics', 'qos_depth',
                 'scale_frames', 'image_size'):
        assert SPEC[name].read_only, name
    for name in ('keyframe_mode', 'keyframe_interval', 'flow_threshold_px', 'publish_points',
                 'points_decimation', 'points_min_confidence', 'publish_path',
                 'reorder_window_s'):
        assert not SPEC[name].read_only, name


def test_targets_are_the_config_fields_of_the_same_name_and_nothing_else():
    for target, kind in ((Target.ENGINE, EngineConfig), (Target.STREAM, StreamConfig)):
        fields = {f.name for f in dataclasses.fields(kind)}
        rows = {s.name for s in SPECS if s.target is target}
        assert rows <= fields, rows - fields
    # the config fields that are no parameter: a tool's flag, or what the node derives
    assert {f.name for f in dataclasses.fields(EngineConfig)} - {
        s.name for s in SPECS if s.target is Target.ENGINE} == {'seed', 'attention_kv_splits'}
    assert {f.name for f in dataclasses.fields(StreamConfig)} - {
        s.name for s in SPECS if s.target is Target.STREAM} == {
            'with_depth', 'trajectory_length', 'products'}
    # a stream field may change at runtime exactly where its parameter may
    for spec in SPECS:
        if spec.target is Target.STREAM:
            assert (spec.name in RUNTIME_SAFE) == (not spec.read_only), spec.name


def test_defaults_map_onto_the_streaming_configs():
    p = parse({})
    assert params.camera_names(p) == ('camera',)
    eng = EngineConfig.from_parameters(p, cuda_available=False)
    assert eng.dtype == 'float32' and eng.checkpoint is None and eng.preset == 'tiny'
    assert eng.model_config is None
    assert EngineConfig.from_parameters(p, cuda_available=True).dtype == 'bfloat16'
    assert EngineConfig.from_parameters(parse({'checkpoint': '/x.pt'}), False).preset == \
        'release'
    stream = params.stream_config(parse({'keyframe_interval': 3, 'publish_points': True}))
    assert isinstance(stream, StreamConfig)
    assert stream.keyframe_interval == 3 and stream.with_depth
    assert not params.stream_config(p).with_depth
    assert stream.keyframe_mode is KeyframeMode.INTERVAL


@pytest.mark.parametrize('name,value,hint', [
    ('keyframe_mode', 'sometimes', "'interval', 'flow'"),
    ('keyframe_interval', 0, '[1, 1000]'),
    ('flow_threshold_px', -1.0, 'a number in'),
    ('flow_threshold_px', float('inf'), 'not finite'),
    ('image_size', 500, 'multiple of 14'),
    ('device', 'gpu', "'cuda:N'"),
    ('dtype', 'int8', "'bfloat16'"),
    ('qos_reliability', 'sometimes', "'best_effort'"),
    ('map_convention', 'enu', "'rep103', 'optical'"),
    ('input_transport', 'theora', "'raw', 'compressed'"),
    ('camera_topics', [], 'non-empty list'),
    ('camera_topics', ['a', 'a'], 'distinct'),
    ('camera_names', ['9lives'], 'starting with a letter'),
    ('publish_tf', 'yes', 'true or false'),
    ('scale_frames', 2.5, 'an integer'),
    ('points_confidence_percentile', 100.0, '[0.0, 99.9]'),
    ('head_dtype', 'bfloat16', "'float32', 'compute'"),
    ('attention_backend', 'paged_sdpa', "'auto', 'sdpa', 'flashinfer'"),
    ('checkpoint', 'hf://owner/repo', 'owner, repository and file are all needed'),
])
def test_invalid_values_name_the_parameter_value_and_rule(name, value, hint):
    with pytest.raises(ParamError) as info:
        parse({name: value})
    text = str(info.value)
    assert text.startswith(f'{name}=') and repr(value) in text
    assert hint in text


def test_the_configs_refuse_through_the_same_rows():
    """One range check: EngineConfig and StreamConfig refuse in the table's words."""
    for kind, name, value in ((StreamConfig, 'sliding_window', 0),
                              (StreamConfig, 'camera_iterations', 9),
                              (EngineConfig, 'depth_chunk_frames', 65),
                              (EngineConfig, 'head_dtype', 'bfloat16')):
        with pytest.raises(ParamError) as node:
            parse({name: value})
        with pytest.raises(ParamError) as config:
            kind(**{name: value}).validate()
        assert str(node.value) == str(config.value)
    with pytest.raises(ParamError, match="checkpoint='' is invalid: expected None or"):
        EngineConfig(checkpoint='').validate()
    with pytest.raises(ConfigError, match="preset='auto'"):  # resolved by from_parameters
        EngineConfig(preset='auto').validate()


def test_engine_config_takes_each_engine_row():
    changed = {'head_dtype': 'compute', 'weights_dtype': 'compute',
               'kv_cache_dtype': 'float8_e4m3', 'depth_chunk_frames': 1,
               'expandable_segments': True, 'attention_backend': 'sdpa', 'cuda_graphs': False,
               'torch_compile': False, 'model_config': '/m.json', 'device': 'cuda:1',
               'dtype': 'float16', 'preset': 'release'}
    eng = EngineConfig.from_parameters(parse(changed), cuda_available=False)
    assert eng.head_dtype is HeadDtype.COMPUTE and eng.weights_dtype is WeightsDtype.COMPUTE
    assert eng.kv_cache_dtype is KvCacheDtype.FLOAT8_E4M3
    assert eng.attention_backend is AttentionBackend.SDPA
    assert (eng.depth_chunk_frames, eng.expandable_segments, eng.cuda_graphs,
            eng.torch_compile, eng.model_config, eng.device, eng.dtype, eng.preset) == (
        1, True, False, False, '/m.json', 'cuda:1', 'float16', 'release')
    with pytest.raises(ParamError, match='read-only'):
        update(parse({}), {'head_dtype': 'compute'})


def test_the_defaults_are_the_fast_configuration_on_cuda_and_float32_eager_on_the_cpu():
    from lingbot_ros.streaming.engine import Engine
    cuda = EngineConfig.from_parameters(parse({}), cuda_available=True)
    assert cuda.dtype == 'bfloat16' and cuda.torch_compile and cuda.cuda_graphs
    assert cuda.head_dtype is HeadDtype.FLOAT16
    assert cuda.attention_backend is AttentionBackend.AUTO
    cpu = EngineConfig.from_parameters(parse({'device': 'cpu'}), cuda_available=False)
    assert cpu.dtype == 'float32'
    engine = Engine.load(cpu)  # the tiny structure: what the defaults load without weights
    assert engine.compiled_blocks == 0 and engine.compile_status.startswith('off')
    assert engine.model.head_autocast_dtype is None  # float32 heads: no autocast at all


@pytest.mark.parametrize('name,kind', [
    ('keyframe_mode', KeyframeMode), ('weights_dtype', WeightsDtype),
    ('kv_cache_dtype', KvCacheDtype), ('head_dtype', HeadDtype),
    ('map_convention', MapConvention), ('input_transport', InputTransport),
    ('qos_reliability', QosReliability)])
def test_choices_are_members_in_the_set_and_names_in_the_values(name, kind):
    assert SPEC[name].names == tuple(m.value for m in kind)
    assert all(type(c) is str for c in SPEC[name].names)
    last = list(kind)[-1]
    p = parse({name: last.value})
    assert getattr(p, name) is last and getattr(parse({}), name) is kind(SPEC[name].default)
    value = as_values(p)[name]
    assert value == last.value and type(value) is str  # what ROS and the YAML carry
    assert getattr(update(p, {'publish_points': True}), name) is last


def test_attention_backend_offers_what_a_user_may_ask_for():
    assert SPEC['attention_backend'].names == tuple(b.value for b in USER_BACKENDS)


def test_cross_field_and_runtime_rules():
    with pytest.raises(ParamError, match='one name per camera_topics'):
        parse({'camera_topics': ['a/image', 'b/image'], 'camera_names': ['left']})
    two = parse({'camera_topics': ['/left/image_raw', '/right/image_raw']})
    assert params.camera_names(two) == ('left', 'right')
    p = parse({})
    q = update(p, {'keyframe_interval': 4, 'publish_points': True})
    assert q.keyframe_interval == 4 and q.publish_points and params.with_depth(q)
    assert p.keyframe_interval == 1  # frozen: the old set is untouched
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.keyframe_interval = 2
    with pytest.raises(ParamError, match='read-only'):
        update(p, {'scale_frames': 4})
    with pytest.raises(ParamError, match='keyframe_interval=-2'):
        update(p, {'keyframe_interval': -2})
    with pytest.raises(ParamError, match='not a parameter'):
        update(p, {'no_such_thing': 1})
    assert parse({'pose_covariance': [1, 2, 3, 4, 5, 6]}).pose_covariance == \
        (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)  # whole numbers widen, lists become tuples


RANGED = [s for s in SPECS if s.low is not None and s.check is None]


@given(st.sampled_from(RANGED), st.floats(-1e10, 1e10, allow_nan=False))
def test_a_ranged_value_passes_exactly_inside_its_range(spec, x):
    value = round(x) if spec.kind is Kind.INTEGER else x
    inside = spec.low <= value <= spec.high
    try:
        got = check_one(spec.name, value)
    except ParamError as exc:
        assert not inside and str(exc).startswith(f'{spec.name}=')
    else:
        assert inside and got == value and type(got) is type(spec.default)
