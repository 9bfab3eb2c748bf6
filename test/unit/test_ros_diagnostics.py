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

"""Diagnostics levels and fields from counters and cache statistics, without DDS."""

from dataclasses import replace

from builtin_interfaces.msg import Time
from lingbot_ros.cache.stats import CacheStats
from lingbot_ros.ros import diagnostics
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.counters import Sent, Stage
from lingbot_ros.ros.probe import status_of
from lingbot_ros.streaming.device_memory import DeviceMemory
from lingbot_ros.streaming.parameters import parse

DIAG = parse({'stall_error_s': 2.0, 'drop_rate_warn': 0.25, 'pool_use_warn': 0.8})
INFO = diagnostics.NodeInfo(hardware_id='cpu', state=diagnostics.NodeState.ACTIVE,
                            model='/w.pt', device='cpu', dtype='float32', backend='sdpa')


def _cam():
    return CameraStream(0, 'front', '/front/image', session=None, window=20)


def _level(cam, now):
    return status_of(diagnostics.build(INFO, [cam], DIAG, Time(), now),
                     diagnostics.camera_status_name(INFO.node, 'front'))


def test_ok_while_frames_flow_and_values_are_numbers():
    cam = _cam()
    for i in range(10):
        cam.counters.on_received(float(i))
        cam.counters.on_stepped(float(i) + 0.1, 20.0 + i)
        cam.counters.on_processed(float(i) + 0.1, 30.0 + i, {Stage.PUBLISH: 1.0 + i})
    level, message, v = _level(cam, 9.5)
    assert level == 0 and 'tracking' in message
    assert float(v['input_rate_hz']) == 1.0 and float(v['processed_rate_hz']) == 1.0
    assert float(v['step_ms_p50']) == 24.5 and 28.5 < float(v['step_ms_p99']) <= 29.0
    assert float(v['publish_ms_p50']) == 5.5 and v['model_ms_p50'] == 'n/a'
    assert v['publish_ms_p50_by_output'] == 'n/a'
    cam.counters.on_output_sent(Sent.POSE, 0.25)
    cam.counters.on_output_sent(Sent.DEPTH, 2.0)
    cam.counters.on_output_sent(Sent.DEPTH, 4.0)
    _, _, v = _level(cam, 9.5)
    assert v['publish_ms_p50_by_output'] == 'pose 0.2, depth 3.0'
    assert v['pool_use'] == 'n/a'  # nothing reserved: not a paged pool


def test_failed_publishes_warn_by_output_name_and_are_counted_each():
    cam = _cam()
    for i in range(4):
        cam.counters.on_received(float(i))
        cam.counters.on_stepped(float(i) + 0.1, 20.0)
        cam.counters.on_processed(float(i) + 0.1, 30.0)
    cam.counters.on_publish_failed(Sent.DEPTH)
    cam.counters.on_publish_failed(Sent.DEPTH)
    cam.counters.on_publish_failed(Sent.MAP_POINTS)
    level, message, v = _level(cam, 3.5)
    assert level == 1 and '3 output(s) failed to publish (depth, map_points)' in message
    assert v['publish_failures'] == '3'
    assert v['publish_failed_depth'] == '2' and v['publish_failed_map_points'] == '1'


def test_warn_on_drops_and_overflows_error_on_stall():
    cam = _cam()
    for i in range(4):
        cam.counters.on_received(float(i))
    cam.counters.on_stepped(0.5, 10.0)
    cam.counters.on_processed(0.5, 1.0)
    cam.counters.on_dropped()
    level, message, _ = _level(cam, 1.0)
    assert level == 1 and 'drop rate 50%' in message
    cam.counters.outcomes.clear()
    cam.cache_stats = CacheStats(scale_pages=2, live_pages=8, free_pages=1, bytes_reserved=1)
    level, message, v = _level(cam, 1.0)
    assert level == 0 and v['pool_use'] == '0.909'  # a full window is the design, not a warning
    cam.cache_stats = CacheStats(scale_pages=2, live_pages=8, free_pages=1, bytes_reserved=1,
                                 overflow_events=2)
    level, message, v = _level(cam, 1.0)
    assert level == 1 and 'overflowed 2 time(s)' in message
    cam.counters.on_received(3.0)
    level, message, _ = _level(cam, 3.1)  # input keeps coming, last step at 0.5 s
    assert level == 2 and 'no frame processed for 2.6 s' in message
    level, _, _ = _level(cam, 10.0)  # input stopped too: quiet, not an error
    assert level != 2


def test_node_status_levels():
    node = diagnostics.node_status(INFO, [])
    assert node.level == diagnostics.OK and node.hardware_id == 'cpu'
    rnd = diagnostics.NodeInfo(hardware_id='cpu', random_weights=True,
                               fallbacks=['attention: FlashInfer not installed'])
    warn = diagnostics.node_status(rnd, [])
    assert warn.level == diagnostics.WARN and 'random weights' in warn.message
    assert 'FlashInfer' in warn.message
    gpu = diagnostics.NodeInfo(hardware_id='cuda:0')
    full = DeviceMemory(allocated=3 * 2**30, reserved=4 * 2**30, used_fraction=0.97,
                        capacity=80 * 2**30)
    status = diagnostics.node_status(gpu, [], DIAG, full)
    assert status.level == diagnostics.WARN and 'GPU memory 97% in use' in status.message
    values = {kv.key: kv.value for kv in status.values}
    assert values['gpu_memory'] == '3072.0 MB allocated, 4096.0 MB reserved'
    assert values['gpu_memory_use'] == '0.970'
    roomy = replace(full, used_fraction=0.5)
    assert diagnostics.node_status(gpu, [], DIAG, roomy).level == diagnostics.OK
    # an estimate above what the model's process may use is a warning
    short = replace(gpu, memory_estimate_bytes=90 * 2**30)
    assert 'exceeds' in diagnostics.node_status(short, [], DIAG, roomy).message
    assert diagnostics.node_status(short, [], DIAG, None).level == diagnostics.OK
    bad = diagnostics.node_status(diagnostics.NodeInfo(hardware_id='none', error='x: y'), [])
    assert bad.level == diagnostics.ERROR and bad.message == 'x: y'


def test_the_messages_follow_the_node_state_and_say_its_text():
    NodeState = diagnostics.NodeState
    building = replace(INFO, state=NodeState.CONFIGURING, activity='building kernels')
    status = diagnostics.node_status(building, [])
    assert status.message == 'configuring: building kernels'
    assert {kv.key: kv.value for kv in status.values}['state'] == 'configuring'
    done = replace(building, state=NodeState.INACTIVE)
    assert diagnostics.node_status(done, []).message == 'inactive, 0 camera(s)'
    for state in NodeState:
        info = replace(INFO, state=state)
        message = diagnostics.camera_status(_cam(), info, DIAG, 1.0).message
        if state is NodeState.ACTIVE:
            assert message == 'waiting for images on /front/image'
        else:
            assert message == f'{state.value}: not subscribed (input /front/image once active)'


def _resumed(distance):
    """Return a resume whose first resumed frame lay ``distance`` model units off the map."""
    import numpy as np
    from lingbot_ros.ros.resume_status import ResumeOutcome, ResumeStatus
    from lingbot_ros.streaming.relocalise import KeyframePositions, ResumeReport
    from lingbot_ros.streaming.result import FrameResult, FrameType
    saved = KeyframePositions(map_epoch=0, index=np.arange(1), stamp_ns=np.arange(1),
                              position=np.zeros((1, 3)))
    report = ResumeReport(saved, frames=10)
    pose, k = np.eye(4), np.eye(3)
    pose[0, 3] = distance
    report.observe(FrameResult(stamp_ns=5, index=5, frame_type=FrameType.KEYFRAME,
                               pose_c2w=pose, pose_enc=np.zeros(9, np.float32), intrinsics=k,
                               intrinsics_model=k, input_hw=(4, 4), model_hw=(4, 4)))
    return ResumeStatus('f', ResumeOutcome.RESUMED, report=report, scale_note='restored: fitted',
                        track_note='3 poses restored')


def test_resume_distances_are_said_in_metres_once_the_camera_is_metric():
    from lingbot_ros.ros.camera_scale import ScaleReport
    cam = _cam()
    cam.resume = _resumed(0.4)
    name = diagnostics.camera_status_name(INFO.node, 'front')
    said = {}
    for units, scale in (('model', None), ('metre', 2.5)):
        report = ScaleReport(source='fixed', state='fitted', units=units, scale=scale)
        _, _, v = status_of(diagnostics.build(INFO, [cam], DIAG, Time(), 1.0,
                                              scales={0: report}), name)
        said[units] = v
    assert said['model']['resume_distance_unit'] == 'model units'
    assert float(said['model']['resume_distance_median']) == 0.4
    assert said['model']['resume_state'] == 'relocalised within 0.4 model units'
    assert said['metre']['resume_distance_unit'] == 'm'
    assert float(said['metre']['resume_distance_median']) == 1.0
    assert said['metre']['resume_state'] == 'relocalised within 1 m'
    assert said['metre']['resume_scale'] == 'restored: fitted'
    assert said['metre']['resume_track'] == '3 poses restored'
