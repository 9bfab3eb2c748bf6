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

"""Parameters: one table, documented in config/lingbot.yaml, validated with reasons."""

from pathlib import Path

from lingbot_ros.ros import params
from lingbot_ros.ros.params import ParamError, parse, SPEC, SPECS, update
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
import pytest
from rcl_interfaces.msg import ParameterType
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / 'config' / 'lingbot.yaml'
REQUIRED = ('checkpoint', 'preset', 'device', 'dtype', 'attention_backend', 'image_size',
            'scale_frames', 'sliding_window', 'keyframe_mode', 'keyframe_interval',
            'flow_threshold_px', 'max_keyframe_gap', 'camera_iterations', 'camera_topics',
            'input_transport', 'qos_reliability', 'qos_depth', 'map_frame', 'camera_frame',
            'publish_tf', 'publish_path', 'publish_depth', 'publish_points',
            'publish_camera_info', 'path_max_length', 'diagnostics_period',
            'points_decimation', 'points_min_confidence')


def test_the_issue_list_is_declared_once_with_descriptions():
    names = [s.name for s in SPECS]
    assert len(names) == len(set(names))
    assert set(REQUIRED) <= set(names)
    for spec in SPECS:
        assert len(spec.description) > 15, spec.name
        d = params.descriptor(spec)
        assert d.type != ParameterType.PARAMETER_NOT_SET and d.description
        if spec.low is not None:
            assert d.integer_range or d.floating_point_range, spec.name
    # what needs a restart is read-only; keyframe policy and output switches are not
    for name in ('checkpoint', 'preset', 'device', 'dtype', 'camera_topics', 'qos_depth',
                 'scale_frames', 'image_size'):
        assert SPEC[name].read_only, name
    for name in ('keyframe_mode', 'keyframe_interval', 'flow_threshold_px', 'publish_points',
                 'points_decimation', 'points_min_confidence', 'publish_path'):
        assert not SPEC[name].read_only, name


def test_config_file_documents_every_parameter_with_its_default():
    text = CONFIG.read_text()
    data = yaml.safe_load(text)['/**']['ros__parameters']
    assert set(data) == {s.name for s in SPECS}
    lines = text.splitlines()
    for spec in SPECS:
        assert data[spec.name] == spec.default, spec.name
        at = next(i for i, line in enumerate(lines) if line.strip().startswith(spec.name + ':'))
        assert lines[at - 1].strip().startswith('#'), f'{spec.name} has no comment'
    parse(data)  # the shipped file is valid


def test_defaults_map_onto_the_streaming_configs():
    p = parse({})
    assert p.resolved_preset == 'tiny' and p.resolved_camera_names == ('camera',)
    eng = params.engine_config(p, cuda_available=False)
    assert isinstance(eng, EngineConfig) and eng.dtype == 'float32' and eng.checkpoint is None
    assert params.engine_config(p, cuda_available=True).dtype == 'bfloat16'
    with_ckpt = parse({'checkpoint': '/x.pt'})
    assert with_ckpt.resolved_preset == 'release'
    stream = params.stream_config(parse({'keyframe_interval': 3, 'publish_points': True}))
    assert isinstance(stream, StreamConfig)
    assert stream.keyframe_interval == 3 and stream.with_depth
    assert not params.stream_config(p).with_depth


@pytest.mark.parametrize('name,value,hint', [
    ('keyframe_mode', 'sometimes', "'interval', 'flow'"),
    ('keyframe_interval', 0, '[1, 1000]'),
    ('flow_threshold_px', -1.0, 'a number in'),
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
])
def test_invalid_values_name_the_parameter_value_and_rule(name, value, hint):
    with pytest.raises(ParamError) as info:
        parse({name: value})
    text = str(info.value)
    assert text.startswith(f'{name}=') and repr(value) in text
    assert hint in text


def test_head_dtype_maps_into_the_engine_config():
    from lingbot_ros.streaming.config import HeadDtype
    assert SPEC['head_dtype'].read_only
    assert set(SPEC['head_dtype'].choices) == {h.value for h in HeadDtype}
    eng = params.engine_config(parse({'head_dtype': 'float32'}), cuda_available=True)
    assert eng.head_dtype is HeadDtype.FLOAT32
    eng = params.engine_config(parse({'head_dtype': 'compute'}), cuda_available=True)
    assert eng.head_dtype is HeadDtype.COMPUTE and eng.dtype == 'bfloat16'
    with pytest.raises(ParamError, match='read-only'):
        update(parse({}), {'head_dtype': 'compute'})


def test_the_defaults_are_the_fast_configuration_on_cuda_and_float32_eager_on_the_cpu():
    from lingbot_ros.streaming.config import HeadDtype
    from lingbot_ros.streaming.engine import Engine
    cuda = params.engine_config(parse({}), cuda_available=True)
    assert cuda.dtype == 'bfloat16' and cuda.torch_compile and cuda.cuda_graphs
    assert cuda.head_dtype is HeadDtype.FLOAT16
    cpu = params.engine_config(parse({'device': 'cpu'}), cuda_available=False)
    assert cpu.dtype == 'float32'
    engine = Engine.load(cpu)  # the tiny structure: what the defaults load without weights
    assert engine.compiled_blocks == 0 and engine.compile_status.startswith('off')
    assert engine.model.head_autocast_dtype is None  # float32 heads: no autocast at all


def test_attention_backend_maps_into_the_engine_config():
    from lingbot_ros.cache.backend_choice import AttentionBackend, USER_BACKENDS
    assert SPEC['attention_backend'].choices == tuple(b.value for b in USER_BACKENDS)
    eng = params.engine_config(parse({'attention_backend': 'sdpa'}), cuda_available=False)
    assert eng.attention_backend is AttentionBackend.SDPA
    assert params.engine_config(parse({}), cuda_available=True).attention_backend \
        is AttentionBackend.AUTO


def test_map_convention_is_a_member_in_the_view_and_its_name_in_the_values():
    from lingbot_ros.ros.conventions import MapConvention
    assert SPEC['map_convention'].choices == tuple(c.value for c in MapConvention)
    assert parse({}).inputs.map_convention is MapConvention.REP103
    p = parse({'map_convention': 'optical'})
    assert p.inputs.map_convention is MapConvention.OPTICAL
    value = params.as_values(p)['map_convention']
    assert value == 'optical' and type(value) is str  # what ROS and the YAML carry
    assert update(p, {'publish_points': True}).inputs.map_convention is MapConvention.OPTICAL


def test_transport_and_reliability_are_members_in_the_view_and_names_in_the_values():
    from lingbot_ros.ros.params import InputTransport, QosReliability
    assert SPEC['input_transport'].choices == tuple(t.value for t in InputTransport)
    assert SPEC['qos_reliability'].choices == tuple(r.value for r in QosReliability)
    p = parse({})
    assert p.inputs.input_transport is InputTransport.RAW
    assert p.inputs.qos_reliability is QosReliability.BEST_EFFORT
    q = parse({'input_transport': 'compressed', 'qos_reliability': 'reliable'})
    assert q.inputs.input_transport is InputTransport.COMPRESSED
    assert q.inputs.qos_reliability is QosReliability.RELIABLE
    values = params.as_values(q)
    assert (values['input_transport'], values['qos_reliability']) == ('compressed', 'reliable')
    assert type(values['input_transport']) is str and type(values['qos_reliability']) is str


def test_choices_of_the_streaming_enums_are_their_values_in_order():
    from lingbot_ros.streaming.config import KeyframeMode, KvCacheDtype, WeightsDtype
    for name, kind in (('keyframe_mode', KeyframeMode), ('weights_dtype', WeightsDtype),
                       ('kv_cache_dtype', KvCacheDtype)):
        assert SPEC[name].choices == tuple(m.value for m in kind), name
        assert all(type(c) is str for c in SPEC[name].choices), name
    assert params.stream_config(parse({'keyframe_mode': 'flow'})).keyframe_mode \
        is KeyframeMode.FLOW


def test_cross_field_and_runtime_rules():
    with pytest.raises(ParamError, match='one name per camera_topics'):
        parse({'camera_topics': ['a/image', 'b/image'], 'camera_names': ['left']})
    two = parse({'camera_topics': ['/left/image_raw', '/right/image_raw']})
    assert two.resolved_camera_names == ('left', 'right')
    p = parse({})
    q = update(p, {'keyframe_interval': 4, 'publish_points': True})
    assert q.stream.keyframe_interval == 4 and q.outputs.publish_points and q.with_depth
    assert p.stream.keyframe_interval == 1  # frozen: the old view is untouched
    with pytest.raises(ParamError, match='read-only'):
        update(p, {'scale_frames': 4})
    with pytest.raises(ParamError, match='keyframe_interval=-2'):
        update(p, {'keyframe_interval': -2})
    with pytest.raises(ParamError, match='not a parameter'):
        update(p, {'no_such_thing': 1})
