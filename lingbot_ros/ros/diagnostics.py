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
The /diagnostics array: one node status and one status per camera, stable names.

Names follow the diagnostics convention ``<node>: <component>`` with the node's fully
qualified name (``/robot1/lingbot_node: node``, ``/robot1/lingbot_node: camera front``), so
two robots' statuses stay apart in one diagnostic aggregator.

Levels follow what an operator must act on: WARN for random weights, backend
fallbacks, a drop rate or KV pool use above the thresholds, a session reset by the
stream itself, or a resume refused or far from the saved map; ERROR when input
arrives but no frame was processed for ``stall_error_s`` (or the node failed to
configure). Values are strings, as the
message defines them; numbers keep a fixed format so dashboards can parse them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
import importlib.util
import time
from typing import Any, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.counters import Stage
from lingbot_ros.ros.reasons import Rejection
from lingbot_ros.streaming.device_memory import DeviceMemory
from lingbot_ros.streaming.parameters import Params

OK, WARN, ERROR = DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR
NODE_STATUS = '{}: node'
CAMERA_STATUS = '{}: camera {}'
MB = 1024.0 * 1024.0


class NodeState(Enum):
    """What the node status in /diagnostics says the node is doing (its value is the text)."""

    UNCONFIGURED = 'unconfigured'
    CONFIGURING = 'configuring'
    CONFIGURE_FAILED = 'unconfigured (configure failed)'
    INACTIVE = 'inactive'
    ACTIVE = 'active'
    DEACTIVATING = 'deactivating'
    FINALIZED = 'finalized'
    AFTER_ERROR = 'unconfigured (after an error)'


OPTIONAL = ('tf2_ros', 'cv_bridge', 'flashinfer')  # what the node runs without, reported


def missing_optional() -> list:
    """
    Name the optional modules that are not usable here.

    FlashInfer is only looked up, not imported: importing it imports torch (seconds), which
    would hold up the node's start before its parameters are even checked. Whether it
    works is said when the model loads (the attention backend and its reason).
    """
    missing = []
    for module in OPTIONAL:
        try:
            if module == 'flashinfer':
                usable = importlib.util.find_spec(module) is not None
            else:
                __import__(module)
                usable = True
        except Exception:  # noqa: BLE001 (any failure means "not usable here")
            usable = False
        if not usable:
            missing.append(module)
    return missing


@dataclass
class NodeInfo:
    """What the node status reports besides the cameras."""

    hardware_id: str
    node: str = '/lingbot_node'   # the node's fully qualified name: the status names' prefix
    state: NodeState = NodeState.UNCONFIGURED
    model: str = 'not loaded'
    random_weights: bool = False
    device: str = ''
    dtype: str = ''
    backend: str = ''
    cuda_graphs: str = ''
    torch_compile: str = ''
    fallbacks: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    converter: str = ''
    converter_notes: list = field(default_factory=list)
    unknown_parameters: list = field(default_factory=list)
    checkpoint_file: str = 'none'
    startup: str = 'n/a'   # process start to active, by phase (the first activation)
    waited_unconfigured: str = 'n/a'  # time in unconfigured before the first configure
    memory_estimate: str = 'n/a'        # what the device needs, from the parameters
    memory_estimate_bytes: Optional[int] = None
    checkpoint_sha256: str = 'none'
    activity: str = ''   # a long configure step under way or just done (a kernel build)
    made_by_session: str = 'none'     # what the sessions make for the messages: depth, points
    error: str = ''

    @property
    def state_text(self) -> str:
        return self.state.value

    def unload(self) -> None:
        """Forget what described the model and device (after cleanup): its WARNs go too."""
        self.hardware_id, self.model, self.random_weights = 'none', 'not loaded', False
        self.device = self.dtype = self.backend = self.cuda_graphs = self.torch_compile = ''
        self.memory_estimate_bytes = None
        self.memory_estimate = 'n/a'
        self.fallbacks, self.converter_notes = [], []
        self.checkpoint_file = self.checkpoint_sha256 = 'none'


def node_status_name(node: str) -> str:
    """Return the node status's name, e.g. ``/robot1/lingbot_node: node``."""
    return NODE_STATUS.format(node)


def camera_status_name(node: str, camera: str) -> str:
    """Return a camera status's name, e.g. ``/robot1/lingbot_node: camera front``."""
    return CAMERA_STATUS.format(node, camera)


def _ms(value: Optional[float]) -> str:
    return 'n/a' if value is None else f'{value:.1f}'


def _kv(pairs: list) -> list:
    return [KeyValue(key=k, value=str(v)) for k, v in pairs]


def gpu_memory(memory: Optional[DeviceMemory]) -> str:
    """Return allocated / reserved CUDA memory of the model's process in MB, or why none."""
    if memory is None:
        return 'n/a (not running on a CUDA device)'
    return memory.describe()


def node_status(info: NodeInfo, cameras: list, diag: Optional[Params] = None,
                memory: Optional[DeviceMemory] = None) -> DiagnosticStatus:
    """
    Summarise the model, the device and what is missing; level says what to act on.

    ``memory``: the device's memory as read where the model runs (None: no CUDA device).
    """
    level, problems = OK, []
    use = memory.used_fraction if memory is not None else None
    if info.error:
        level, problems = ERROR, [info.error]
    else:
        if info.random_weights:
            level = WARN
            problems.append('random weights: outputs are meaningless (set checkpoint)')
        if diag is not None and use is not None and use > diag.pool_use_warn:
            level = WARN
            problems.append(f'GPU memory {use:.0%} in use, above {diag.pool_use_warn:.0%}')
        if info.fallbacks:
            level = WARN
            problems.extend(info.fallbacks)
        capacity = memory.capacity if memory is not None else None
        need = info.memory_estimate_bytes
        if need is not None and capacity is not None and need > capacity:
            level = WARN
            problems.append(f'estimated device memory need {need / 2**30:.2f} GiB exceeds the '
                            f"device's {capacity / 2**30:.2f} GiB: the KV window will shrink")
        if info.unknown_parameters:
            level = WARN
            problems.append('unknown parameters ignored: ' + ', '.join(info.unknown_parameters))
        if info.converter_notes:
            level = WARN
            problems.extend(info.converter_notes)
    message = '; '.join(problems) if problems else \
        f'{info.state_text}, {len(cameras)} camera(s)'
    if info.activity and info.state is NodeState.CONFIGURING:
        message = f'configuring: {info.activity}'
    values = [('state', info.state_text), ('model', info.model),
              ('random_weights', info.random_weights),
              ('checkpoint_file', info.checkpoint_file),
              ('checkpoint_sha256', info.checkpoint_sha256), ('startup', info.startup),
              ('kernels', info.activity or 'n/a'),
              ('waited_unconfigured', info.waited_unconfigured),
              ('device', info.device),
              ('dtype', info.dtype), ('attention_backend', info.backend),
              ('cuda_graphs', info.cuda_graphs or 'n/a'),
              ('torch_compile', info.torch_compile or 'n/a'),
              ('gpu_memory', gpu_memory(memory)),
              ('gpu_memory_use', 'n/a' if use is None else f'{use:.3f}'),
              ('memory_estimate', info.memory_estimate),
              ('missing_optional', ', '.join(info.missing) or 'none'),
              ('image_conversion', info.converter),
              ('unknown_parameters', ', '.join(info.unknown_parameters) or 'none'),
              ('fallbacks', '; '.join(info.fallbacks) or 'none'),
              ('made_by_session', info.made_by_session),
              ('cameras', ', '.join(c.name for c in cameras))]
    return DiagnosticStatus(level=level, name=node_status_name(info.node), message=message,
                            hardware_id=info.hardware_id, values=_kv(values))


def camera_status(cam: CameraStream, info: NodeInfo, diag: Params,
                  now: float, map_counters: Any = None, scale: Any = None) -> DiagnosticStatus:
    """
    Report one camera's counters, cache statistics, rates and latencies (and its map's).

    ``scale``: the camera's :class:`~lingbot_ros.ros.camera_scale.ScaleReport` (None: no
    scale feed, the keys are left out).
    """
    with cam.counters.lock:  # one consistent picture while the other threads count on
        return _camera_status(cam, info, diag, now, map_counters, scale)


def _scale_problems(scale: Any) -> list:
    """Return what an operator must act on in a camera's scale report (WARN)."""
    problems = []
    if scale.unavailable:
        problems.append(f'scale source {scale.source} unavailable: {scale.note}')
    if scale.base.startswith('unknown'):
        problems.append(f'base transform {scale.base}')
    if scale.map_to_odom.startswith(('unavailable', 'broadcast; also')):
        problems.append(f'map -> odom {scale.map_to_odom}')
    return problems


def _num(value: Optional[float], form: str) -> str:
    return 'n/a' if value is None or value != value else format(value, form)


def scale_values(scale: Any) -> list:
    """Return the scale keys of a camera status (docs/interfaces.md lists them)."""
    return [('scale_source', scale.source), ('scale_state', scale.state),
            ('scale', _num(scale.scale, '.6g')), ('scale_sigma', _num(scale.sigma, '.3g')),
            ('scale_age_s', _num(scale.age_s, '.2f')),
            ('scale_window', scale.window),
            ('scale_fitted_window', 'n/a' if scale.fitted_window is None
             else scale.fitted_window),
            ('scale_samples', scale.samples),
            ('scale_residual_rms_m', _num(scale.residual_rms_m, '.4f')),
            ('scale_note', scale.note or 'none'),
            ('scale_inputs_missing', scale.inputs_missing),
            ('scale_inputs_rejected', scale.inputs_rejected),
            ('units', scale.units), ('output_frame', scale.frame),
            ('base_transform', scale.base), ('map_to_odom', scale.map_to_odom)]


def _camera_status(cam: CameraStream, info: NodeInfo, diag: Params,
                   now: float, map_counters: Any, scale: Any = None) -> DiagnosticStatus:
    c, s = cam.counters, cam.cache_stats
    pool = s.scale_pages + s.live_pages + s.pending_pages
    # a dense (unpaged) cache reserves nothing up front: pool use is not defined there
    pool_total = pool + s.free_pages if s.bytes_reserved > 0 else 0
    pool_use = pool / pool_total if pool_total else 0.0
    drop_rate = c.drop_rate()
    level, problems = OK, []
    stalled = c.stalled_for(now, diag.stall_error_s)
    if stalled is not None:
        level = ERROR
        problems.append(f'input arriving but no frame processed for {stalled:.1f} s')
    if drop_rate > diag.drop_rate_warn:
        level = max(level, WARN)
        problems.append(f'drop rate {drop_rate:.0%} above {diag.drop_rate_warn:.0%}')
    if s.overflow_events:
        level = max(level, WARN)
        problems.append(f'KV pool overflowed {s.overflow_events} time(s): windows opened early')
    configured = cam.sliding_window
    if s.sliding_window and configured and s.sliding_window < configured:
        level = max(level, WARN)
        problems.append(f'KV window shrunk to {s.sliding_window} frames (configured '
                        f'{configured}) after device out-of-memory')
    oom = c.rejected.get(Rejection.OUT_OF_MEMORY, 0)
    if oom:
        level = max(level, WARN)
        problems.append(f'{oom} frame(s) lost to device out-of-memory')
    failed = sum(c.publish_failures.values())
    if failed:
        level = max(level, WARN)
        problems.append(f'{failed} output(s) failed to publish ('
                        + ', '.join(sorted(k.value for k in c.publish_failures)) + ')')
    m = map_counters
    if m is not None and m.skipped_keyframes:
        level = max(level, WARN)
        problems.append(f'{m.skipped_keyframes} keyframe(s) not merged into the map (the map '
                        'thread fell behind)')
    metres = scale.scale if scale is not None and scale.units == 'metre' else None
    resume = cam.resume.view(c.session_resets, diag.resume_far_distance, metres) \
        if cam.resume else None
    if resume is not None and resume.warn:
        level = max(level, WARN)
        problems.append(f'resume: {resume.state}')
    if scale is not None and _scale_problems(scale):
        level = max(level, WARN)
        problems.extend(_scale_problems(scale))
    if problems:  # before any frame only a resume's can be: said at once
        message = '; '.join(problems)
    elif c.received == 0 and info.state is not NodeState.ACTIVE:
        message = f'{info.state_text}: not subscribed (input {cam.topic} once active)'
    elif c.received == 0:
        message = f'waiting for images on {cam.topic}'
    elif c.buffered and not c.processed:
        message = f'buffering scale frames ({c.buffered})'
    else:
        message = f'tracking, {c.processed} frames processed'
        if scale is not None and scale.source != 'none':
            message += f'; scale {scale.state}, {scale.units} units'
    values = [
        ('topic', cam.topic), ('frame_id', cam.frame_id),
        ('frames_received', c.received), ('frames_processed', c.processed),
        ('frames_lost_before_node', c.lost_before_node),
        ('frames_dropped', c.dropped), ('frames_rejected', c.rejected_total),
        ('frames_buffered', c.buffered),
    ]
    values += sorted((f'rejected_{k.value}', v) for k, v in c.rejected.items())
    values += [('publish_failures', failed)]
    values += sorted((f'publish_failed_{k.value}', v) for k, v in c.publish_failures.items())
    values += [
        ('stamp_resets', c.stamp_resets), ('session_resets', c.session_resets),
        ('keyframes', s.keyframes), ('rollbacks', s.rollbacks), ('evictions', s.evictions),
        ('scale_pages', s.scale_pages), ('live_pages', s.live_pages),
        ('free_pages', s.free_pages), ('special_tokens', s.special_tokens),
        ('special_pages', s.special_pages),
        ('kv_used_mb', f'{s.bytes_used / MB:.2f}'),
        ('kv_reserved_mb', f'{s.bytes_reserved / MB:.2f}'),
        ('pool_use', f'{pool_use:.3f}' if pool_total else 'n/a'),
        ('overflow_events', s.overflow_events),
        ('window_index', s.window_index),
        ('sliding_window', s.sliding_window),
        ('input_rate_hz', f'{c.input_rate.rate(now):.2f}'),
        ('processed_rate_hz', f'{c.processed_rate.rate(now):.2f}'),
        ('drop_rate', f'{drop_rate:.3f}'),
        ('step_ms_p50', _ms(c.step_ms.percentile(50))),
        ('step_ms_p99', _ms(c.step_ms.percentile(99))),
        ('latency_ms_p50', _ms(c.latency_ms.percentile(50))),
        ('latency_ms_p99', _ms(c.latency_ms.percentile(99))),
    ]
    for stage in Stage:  # where a frame's latency goes, in the order a frame meets them
        values += [(f'{stage.value}_ms_p50', _ms(c.stage_percentile(stage, 50))),
                   (f'{stage.value}_ms_p99', _ms(c.stage_percentile(stage, 99)))]
    for q in (50, 99):  # each output's build and send (~/map_points: the map timer's)
        values.append((f'publish_ms_p{q}_by_output', ', '.join(
            f'{sent.value} {_ms(w.percentile(q))}' for sent, w in c.output_ms.items()) or 'n/a'))
    values += [
        ('backend', info.backend), ('dtype', info.dtype), ('device', info.device),
    ]
    if m is not None:
        values += [('map_points', m.points), ('map_keyframes', m.keyframes),
                   ('map_dropped_points', m.dropped_points),
                   ('map_skipped_keyframes', m.skipped_keyframes),
                   ('map_restarts', m.restarts)]
    if resume is not None:
        values += resume.values
    if scale is not None:
        values += scale_values(scale)
    return DiagnosticStatus(level=level,
                            name=camera_status_name(info.node, cam.name), message=message,
                            hardware_id=info.hardware_id, values=_kv(values))


def build(info: NodeInfo, cameras: list, diag: Params, stamp,
          now: Optional[float] = None, memory: Optional[DeviceMemory] = None,
          maps: Optional[dict] = None, scales: Optional[dict] = None) -> DiagnosticArray:
    """
    Assemble the array published on /diagnostics.

    ``memory``: the device's memory where the model runs; ``maps``: camera index -> its
    accumulated map's counters (read from the map thread and handed in, not stored on
    the camera); ``scales``: camera index -> its scale report (the same way).
    """
    now = time.monotonic() if now is None else now
    msg = DiagnosticArray()
    msg.header.stamp = stamp
    msg.status = [node_status(info, cameras, diag, memory)]
    maps, scales = maps or {}, scales or {}
    msg.status += [camera_status(c, info, diag, now, maps.get(c.index), scales.get(c.index))
                   for c in cameras]
    return msg
