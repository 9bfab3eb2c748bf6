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
``lingbot_node``: camera topics in; poses, trajectory, depth, points, /diagnostics out.

A lifecycle node (REP-2003 style managed node). configure validates the parameters,
loads the model and builds one streaming session per camera; activate subscribes and
publishes; deactivate stops the worker; cleanup frees the model and its memory. With
``autostart`` (the default) it configures and activates itself, so plain ``ros2 run``
and ``ros2 launch`` just work; with ``autostart: false`` a lifecycle manager drives it.
Output topics are ``~/pose`` etc. for one camera and ``~/<camera_name>/pose`` etc. for
several.

Threads: a multi-threaded executor runs image callbacks, the diagnostics timer, the
services and lifecycle transitions in separate callback groups, so a slow transition
(stopping a worker inside a long step) or a pending ``~/reset`` never holds up the
diagnostics or the image callbacks; one worker thread owns the GPU.

This module is the lifecycle and the wiring; the per-frame path is ``intake.py`` (image
callback) -> ``worker.py`` (the model) -> ``outputs.py`` (messages); the services are in
``services.py``, the parameters' declaration and refusals in ``declare.py`` and start-up /
exit in ``cli.py``.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from typing import Any, Optional

from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.model.config import ConfigError
from lingbot_ros.model.hub import Digest
from lingbot_ros.ros import diagnostics
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.convert import ImageConverter
from lingbot_ros.ros.counters import STATS_WINDOW
from lingbot_ros.ros.declare import declare_all, OurParameters, unknown_parameters
from lingbot_ros.ros.diagnostics import NodeState
from lingbot_ros.ros.intake import Intake
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.outputs import camera_frames, CameraPublishers, Outputs, quiet_events
from lingbot_ros.ros.params import camera_names, Listened, map_config, stream_config
from lingbot_ros.ros.resume import apply_resumes, resume_sessions
from lingbot_ros.ros.scale_feed import driving_camera, ScaleFeed
from lingbot_ros.ros.services import Services
from lingbot_ros.ros.shutdown import StopRequest
from lingbot_ros.ros.startup import Phases, process_age, warm_up
from lingbot_ros.ros.worker import FrameQueue, Worker, WorkerBusy
from lingbot_ros.streaming.choices import InputTransport
from lingbot_ros.streaming.config import EngineConfig, NOMINAL_INPUT_HW
from lingbot_ros.streaming.errors import StateError
from lingbot_ros.streaming.parameters import ParamError, Params, parse, SPEC, update
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

NODE_NAME = 'lingbot_node'
STOP_WAIT_S = 30.0         # deactivate waits this long for the worker to leave its step
EXECUTOR_THREADS = 4       # images, diagnostics and map, services, lifecycle / parameters
SHA256_PENDING = 'computing'   # /diagnostics' checkpoint_sha256 while its thread hashes
SUCCESS = TransitionCallbackReturn.SUCCESS
FAILURE = TransitionCallbackReturn.FAILURE


class LingbotNode(OurParameters, LifecycleNode):
    """The LingBot-Map streaming reconstruction node; see the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)  # lifecycle + parameter services: default group
        self._image_group = MutuallyExclusiveCallbackGroup()
        self._diag_group = MutuallyExclusiveCallbackGroup()
        self._service_group = MutuallyExclusiveCallbackGroup()
        self.exit_code = 0
        self.stop = StopRequest()  # set by SIGINT / SIGTERM or the shutdown transition
        self._phases_pending = True  # the first configure also reports the time before it
        self._phases = None
        self._waited = 0.0  # seconds in unconfigured before the first configure
        self._declare_errors = declare_all(self)
        self.unknown_parameters = unknown_parameters(self)
        self.params: Optional[Params] = None
        self._stream_cfg = None
        self.engine = None
        self.cameras: list = []
        self._queue: Optional[FrameQueue] = None
        self._worker: Optional[Worker] = None
        self._maps: Optional[MapThread] = None
        self._converter: Optional[ImageConverter] = None
        self._retired: list = []   # outputs of a worker that was still in a step at deactivate
        self._subs: list = []
        self._lb_services: Optional[Services] = None  # ~/reset, ~/save_*: from configure
        self._cfg_lock = threading.Lock()
        self._listened = Listened(depth=False, points=False)  # read at every diagnostics tick
        self.info = diagnostics.NodeInfo(hardware_id='none',
                                         node=self.get_fully_qualified_name())
        self.info.missing = diagnostics.missing_optional()
        self.info.unknown_parameters = list(self.unknown_parameters)
        self.add_pre_set_parameters_callback(self.widen_numbers)
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10,
                                               event_callbacks=quiet_events())
        period = self.parameter_value('diagnostics_period')
        ok = isinstance(period, float) and SPEC['diagnostics_period'].low <= period <= 60.0
        # steady clocks: with use_sim_time and no /clock (a paused bag) the diagnostics and
        # the map keep their beat; ROS time would stop them
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._diag_timer = self.create_timer(period if ok else 1.0, self._publish_diagnostics,
                                             callback_group=self._diag_group,
                                             clock=self._steady)
        self._map_group = MutuallyExclusiveCallbackGroup()
        # the worker's sink (poses ... points) and the map topic's sender
        self._out = Outputs(self, lambda: self.params, lambda: self.cameras,
                            lambda: self._maps,
                            lambda: self.stop.requested or not self.context.ok())
        # the image callbacks: convert, gate the stamp, enqueue for the worker
        self._intake = Intake(self, lambda: self._converter, lambda: self._queue,
                              lambda: self.params, self._out.report, self._memory_for)
        # every map_period while publish_map is on; cancelled while it is off (a timer that
        # only returns still wakes the executor and costs the GIL)
        map_period = self.parameter_value('map_period')
        ok = isinstance(map_period, float) and SPEC['map_period'].low <= map_period <= 3600.0
        self._map_timer = self.create_timer(map_period if ok else 1.0, self._out.publish_maps,
                                            callback_group=self._map_group, clock=self._steady)
        if not self.parameter_value('publish_map'):
            self._map_timer.cancel()
        self._ready_at = time.monotonic()  # from here a lifecycle manager may keep us waiting

    @property
    def inline_groups(self) -> tuple:
        """Return the callback groups our executor runs in its spinning thread (images)."""
        return (self._image_group,)

    # --- parameters ---------------------------------------------------------------------

    def _on_set_parameters(self, changed: list) -> SetParametersResult:
        changed = [p for p in changed if p.name in SPEC]  # use_sim_time etc. are rclpy's
        if not changed:
            return SetParametersResult(successful=True)
        if self.params is None:  # not configured: configure validates the whole set
            try:
                parse({**self.parameter_values(), **{p.name: p.value for p in changed}})
            except ParamError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            return SetParametersResult(successful=True)
        try:
            update(self.params, {p.name: p.value for p in changed})
        except ParamError as exc:
            self.get_logger().warning(f'parameter change refused: {exc}')
            return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _after_set_parameters(self, changed: list) -> None:
        changed = [p for p in changed if p.name in SPEC]
        if self.params is None or not changed:
            return
        with self._cfg_lock:
            self.params = update(self.params, {p.name: p.value for p in changed})
            self._stream_cfg = stream_config(self.params, self._listened)
            maps = map_config(self.params)
            if self._converter is not None:
                self._converter.max_pixels = self.params.max_input_pixels
        if self._maps is not None:
            self._maps.set_config(maps)
        self._follow_map_switches()
        names = ', '.join(f'{p.name}={p.value!r}' for p in changed)
        self.get_logger().info(f'applied from the next frame: {names}')

    def _follow_map_switches(self) -> None:
        """Run the map timer at map_period while publish_map is on, not at all while off."""
        p = self.params
        period_ns = int(p.map_period * 1e9)
        if self._map_timer.timer_period_ns != period_ns:
            self._map_timer.timer_period_ns = period_ns
        if p.publish_map and self._map_timer.is_canceled():
            self._map_timer.reset()
        elif not p.publish_map and not self._map_timer.is_canceled():
            self._map_timer.cancel()

    def _follow_listeners(self) -> None:
        """Have the sessions make depth and points only while someone reads them (diagnostics)."""
        listened = self._out.listened()
        if listened != self._listened and self.params is not None:
            with self._cfg_lock:
                if self.params is not None:
                    self._listened = listened
                    self._stream_cfg = stream_config(self.params, listened)
        made = self._stream_cfg.products if self._stream_cfg is not None else None
        names = [] if made is None else \
            ['depth'] * made.depth_on_input + ['points'] * (made.points is not None)
        self.info.made_by_session = ', '.join(names) or 'none'

    def current_stream_config(self) -> Any:
        with self._cfg_lock:
            return self._stream_cfg

    # --- lifecycle ----------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        log = self.get_logger()
        self.info.state = NodeState.CONFIGURING
        before = None
        if self._phases_pending:  # the wait for a lifecycle manager is no start-up time
            self._waited = time.monotonic() - self._ready_at
            before = max(0.0, process_age() - self._waited)
            self.info.waited_unconfigured = f'{self._waited:.1f} s'
        phases = Phases(before=before)
        self._phases_pending = False
        if self._declare_errors:
            return self._fail('invalid parameters: ' + '; '.join(self._declare_errors))
        try:
            params = parse(self.parameter_values())
            stream_cfg = stream_config(params)
            driving_camera(params, camera_names(params))  # map_to_odom_camera names a camera
        except (ParamError, ConfigError) as exc:
            return self._fail(f'invalid parameters: {exc}')
        phases.mark('parameters')
        try:
            import torch
            from lingbot_ros.streaming.engine import Engine
            phases.mark('import torch')
            engine_cfg = EngineConfig.from_parameters(params, torch.cuda.is_available())
            phases.mark('device')  # the CUDA driver's start, where there is one
            self._log_memory_need(engine_cfg, stream_cfg, len(params.camera_topics))
            phases.mark('memory estimate')  # with auto attention: FlashInfer's import
            engine = Engine.load(engine_cfg, progress=self._configure_progress)
            self.engine = engine  # released by cleanup, or below if configure fails
            phases.mark('model', getattr(engine, 'load_phases', None))
            names = camera_names(params)
            if engine.device.type == 'cuda':
                parts = warm_up(engine, stream_cfg, len(names), self._configure_progress,
                                self.get_logger().warning)
                phases.mark('warm-up', parts)
            sessions = [engine.new_session(n, stream_cfg) for n in names]
            phases.mark('sessions')
            resumed = resume_sessions(engine, sessions, names, params, log)  # before frame 1
        except Exception as exc:  # noqa: BLE001 (EngineError, ConfigError, StateError ...)
            self.engine = None
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ''
            what = 'cannot resume' if isinstance(exc, StateError) else 'cannot load the model'
            return self._fail(f'{what}: {type(exc).__name__}: {text}'
                              if not _is_ours(exc) else f'{what}: {text}')
        self._listened = Listened(depth=False, points=False)  # no publishers yet
        self.params, self._stream_cfg = params, stream_config(params, self._listened)
        self._follow_map_switches()
        cameras = [CameraStream(i, n, self._input_topic(t, params), s, STATS_WINDOW)
                   for i, (n, t, s) in enumerate(zip(names, params.camera_topics, sessions))]
        for cam in cameras:
            cam.sliding_window = stream_cfg.sliding_window
        self._queue = FrameQueue(len(cameras), params.queue_size)
        self._worker = Worker(cameras, self._queue, self._out, self.current_stream_config)
        self._maps = MapThread(len(cameras), map_config(params),
                               max_keyframe_images=params.colmap_max_keyframes)
        self._out.map_restarts = {}
        self._out.scale = ScaleFeed(params, names, engine.model_config.patch_size, log)
        apply_resumes(resumed, cameras, self._maps, self._out.scale, params, log)
        # the diagnostics timer reads the cameras from here on: each has its scale and resume
        self.cameras = cameras
        self._maps.start()
        self._converter = ImageConverter(params.use_cv_bridge, params.max_input_pixels)
        self._fill_info(engine, engine_cfg)
        self._lb_services = Services(self, self._service_group)
        log.info(f'model: {engine.description} on {engine.device} ({self.info.dtype}, '
                 f'{engine.backend.value} attention); image conversion: '
                 f'{self._converter.backend}')
        for note in self.info.fallbacks:  # also in /diagnostics; here once, where it is read
            log.warning(f'fallback: {note}')
        if engine.checkpoint is not None:
            sha = engine.checkpoint.digest.peek() or 'being computed, logged when known'
            log.info(f'checkpoint: {engine.checkpoint.path} (sha256 {sha})')
        if self.info.random_weights:
            log.warning(f'NO CHECKPOINT: running {engine.description}. Poses and depth are '
                        'meaningless; set the checkpoint parameter to the released '
                        'LingBot-Map weights.')
        if params.device == 'auto' and engine.device.type == 'cpu':
            log.warning(_cpu_fallback_text(torch))
        self._phases = phases
        # The model is hundreds of thousands of objects: a full collection scans them all,
        # in whichever thread allocates at that moment, which is a latency spike mid-frame.
        # Frozen, a full collection sees only what streaming made since. Cleanup unfreezes
        # them before freeing them.
        # No collection here: it would run the finalizers of whatever rclpy objects are
        # garbage by now inside this transition.
        self.info.state = NodeState.INACTIVE
        gc.freeze()
        return SUCCESS

    def _configure_progress(self, text: str) -> None:
        """Say a long configure step (a first kernel build) in the log and /diagnostics."""
        self.get_logger().info(text)
        self.info.activity = text

    def _input_topic(self, topic: str, params: Params) -> str:
        """Return the resolved (namespaced, remapped) name the camera is read from."""
        try:
            name = self.resolve_topic_name(topic)
        except Exception:  # noqa: BLE001 (an invalid name fails again, loudly, on activate)
            return topic
        return name.rstrip('/') + '/compressed' \
            if params.input_transport == InputTransport.COMPRESSED else name

    def _log_memory_need(self, engine_cfg: Any, stream_cfg: Any, cameras: int) -> None:
        """Say what the device will need before anything is allocated (a nominal camera)."""
        from lingbot_ros.streaming.memory import estimate
        try:
            est = estimate(engine_cfg, stream_cfg, NOMINAL_INPUT_HW, cameras)
        except Exception as exc:  # noqa: BLE001 (an estimate must never stop the start)
            self.get_logger().warning(f'no device memory estimate: {exc}')
            return
        self.info.memory_estimate = (f'{est.describe()} (a {NOMINAL_INPUT_HW[1]}x'
                                     f'{NOMINAL_INPUT_HW[0]} camera; updated at the first '
                                     'frame)')
        self.get_logger().info(self.info.memory_estimate)

    def _memory_for(self, cam: CameraStream, hw: tuple) -> None:
        """Re-estimate with a camera's real size at its first frame (image callback)."""
        if self.engine is None or self._stream_cfg is None:
            return
        try:
            est = self.engine.memory_estimate(self._stream_cfg, hw, len(self.cameras))
        except Exception as exc:  # noqa: BLE001 (an estimate must never stop the stream)
            self.get_logger().warning(f'no device memory estimate: {exc}')
            return
        self.info.memory_estimate = est.describe()
        self.info.memory_estimate_bytes = est.total
        self.get_logger().info(f'[{cam.name}] {hw[1]}x{hw[0]} input: {est.describe()}')

    def _fail(self, text: str) -> TransitionCallbackReturn:
        self.get_logger().error(f'configure failed: {text}')
        self.info.error = text
        self.info.state = NodeState.CONFIGURE_FAILED
        return FAILURE

    def _fill_info(self, engine: Any, cfg: Any) -> None:
        info = self.info
        info.error = ''
        info.model = engine.description
        info.random_weights = engine.checkpoint is None
        info.checkpoint_file = str(engine.checkpoint.path) if engine.checkpoint else 'none'
        info.checkpoint_sha256 = 'none' if engine.checkpoint is None else \
            engine.checkpoint.digest.peek() or SHA256_PENDING
        info.device = str(engine.device)
        info.dtype = str(engine.dtype).replace('torch.', '')
        info.backend = engine.backend.value
        info.converter = self._converter.backend
        info.fallbacks = []
        if cfg.attention_backend is AttentionBackend.AUTO and engine.device.type == 'cuda' \
                and engine.backend is not AttentionBackend.FLASHINFER:
            info.fallbacks.append(f'attention: {engine.backend_reason}')
        if self.params.device == 'auto' and engine.device.type == 'cpu':
            info.fallbacks.append('device auto: no CUDA device, running on the CPU')
        if 'tf2_ros' in info.missing and self.params.publish_tf:
            info.fallbacks.append('tf2_ros not installed: TF not published')
        info.fallbacks += self._out.scale.fallbacks
        info.hardware_id = engine.hardware_id

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self._phases is not None:
            self._phases.resume()  # the wait since configure is no start-up time
        p = self.params
        if self._worker.alive and not self._worker.stop(STOP_WAIT_S):
            self.get_logger().error('activate refused: the previous worker thread is still '
                                    f'inside a step after {STOP_WAIT_S:.0f} s; try again')
            return FAILURE
        self._destroy_retired()
        many = len(self.cameras) > 1
        self._out.pubs = [CameraPublishers(self, f'~/{c.name}/' if many else '~/')
                          for c in self.cameras]
        self._out.tf = None
        if 'tf2_ros' not in self.info.missing:
            from tf2_ros import TransformBroadcaster  # noqa: I900 (ROS distro only)
            self._out.tf = TransformBroadcaster(self)
        # the queue before the subscriptions: a frame arriving in between must not go into
        # the previous, closed queue, where nobody would count it
        self._queue = FrameQueue(len(self.cameras), p.queue_size)
        self._out.start()  # the output thread, before the worker hands it anything
        self._intake.subscribe(self.cameras, p, self._image_group, self._subs)
        try:
            self._worker.start(self._queue)
        except WorkerBusy as exc:  # stop() above said it ended; belt and braces
            self._stop_streaming()
            self.get_logger().error(f'activate refused: {exc}')
            return FAILURE
        self.info.state = NodeState.ACTIVE
        self.get_logger().info('active: ' + ', '.join(
            f'{c.name} <- {c.topic}' for c in self.cameras))
        phases = self._phases
        if phases is not None:  # the first activation after a configure: say where time went
            phases.mark('activate')
            self.info.startup = phases.text()
            self.get_logger().info(f'start-up: {self.info.startup}')
            self._phases = None
        return SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.info.state = NodeState.DEACTIVATING
        self._stop_streaming()
        self.info.state = NodeState.INACTIVE
        self.get_logger().info('inactive: unsubscribed, worker stopped; the model stays loaded '
                               '(activate resumes, cleanup frees it)')
        return SUCCESS

    def _stop_streaming(self, wait: Optional[float] = None) -> None:
        """Unsubscribe, stop the worker, then destroy its publishers (never before)."""
        wait = STOP_WAIT_S if wait is None else wait
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        stopped = self._worker is None or self._worker.stop(wait)
        # the output thread sends what the worker handed over, then ends (a worker still in
        # a step sends its last results itself, to no publishers, once it leaves it)
        sent = self._out.stop(wait)
        outputs, self._out.pubs = self._out.pubs, []
        if stopped and sent:
            for out in outputs:
                out.destroy(self)
        else:
            self._retired.extend(outputs)
            busy = 'worker is still inside a step' if not stopped else \
                'output thread is still sending'
            self.get_logger().warning(f'the {busy} after {wait:.0f} s; its publishers go once '
                                      'it has finished')
        self._out.tf = None

    def _destroy_retired(self) -> None:
        if self._retired and (self._worker is None or not self._worker.alive) \
                and not self._out.sending:
            for out in self._retired:
                out.destroy(self)
            self._retired = []

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        self.info.state = NodeState.UNCONFIGURED
        self.get_logger().info('unconfigured: model, sessions and maps freed (configure '
                               'loads them again)')
        return SUCCESS

    def release(self, wait: Optional[float] = None) -> None:
        """
        Free everything configure made; idempotent (cleanup, shutdown, error, exit).

        ``wait``: seconds the worker and output thread get to finish (default STOP_WAIT_S).
        """
        self._stop_streaming(wait)
        if self._lb_services is not None:
            self._lb_services.destroy()
            self._lb_services = None
        if self._maps is not None:
            self._maps.stop()
            self._maps = None
        self._out.scale = None
        if self._worker is None or not self._worker.alive:
            self._destroy_retired()
            self.cameras, self._worker, self._queue = [], None, None
            self.engine = None
        self.params = None
        gc.unfreeze()  # what configure froze can be collected again
        gc.collect()
        torch = sys.modules.get('torch')  # not imported when configure failed early
        try:
            if torch is not None and torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001,S110 (best effort)
            pass
        self.info.unload()

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        self.info.state = NodeState.FINALIZED
        self.get_logger().info('finalized (lifecycle shutdown): the process exits')
        self.stop.request('lifecycle shutdown')  # cli.main ends the spin loop and exits
        return SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.release()
        self.info.state = NodeState.AFTER_ERROR
        return SUCCESS

    def autostart_once(self) -> None:
        """Configure and activate (a one-shot timer runs this once the executor spins)."""
        if self.trigger_configure() != SUCCESS:
            self.get_logger().fatal('configure failed (see above); exiting')
            self.exit_code = 1
        elif self.trigger_activate() != SUCCESS:
            self.get_logger().fatal('activate failed; exiting')
            self.exit_code = 1
        if self.exit_code:
            self.context.try_shutdown()

    def camera_frames(self, cam: CameraStream) -> tuple:
        """Return (map frame, tracked frame, sensor frame) for one camera (services)."""
        return camera_frames(self.params, self.cameras, cam)

    @property
    def worker(self) -> Optional[Worker]:
        """Return the worker thread (None before configure and after cleanup)."""
        return self._worker

    @property
    def maps(self) -> Optional[MapThread]:
        """Return the map thread (None before configure and after cleanup)."""
        return self._maps

    @property
    def outputs(self) -> Outputs:
        """Return the sink that copies scales and tracks for ``~/save_state`` (output thread)."""
        return self._out

    @property
    def steady_clock(self) -> Clock:
        """Return a steady clock, for timers that must run while ROS time stands still."""
        return self._steady

    # --- diagnostics ---------------------------------------------------------------------

    def _follow_digest(self, digest: Digest) -> None:
        """Fill in the checkpoint's sha256 once its thread has it (diagnostics timer)."""
        if self.info.checkpoint_sha256 != SHA256_PENDING:
            return
        value = digest.peek()
        if value is not None:
            self.info.checkpoint_sha256 = value
            self.get_logger().info(f'checkpoint sha256 {value}')
        elif digest.error is not None:
            self.info.checkpoint_sha256 = f'unreadable: {digest.error}'
            self.get_logger().warning(f'checkpoint sha256: {digest.error}')

    def _publish_diagnostics(self) -> None:
        params = self.params
        diag = params if params is not None else parse({})
        worker, engine = self._worker, self.engine
        if worker is not None and self.info.state == NodeState.ACTIVE and not worker.alive:
            self.info.error = 'the worker thread stopped'
        self._destroy_retired()
        self._follow_listeners()
        memory = None
        if engine is not None and engine.checkpoint is not None:
            self._follow_digest(engine.checkpoint.digest)
        if engine is not None:
            self.info.cuda_graphs = engine.graph_status
            self.info.torch_compile = engine.compile_status
            memory = engine.device_memory()
        if self._converter is not None:
            self.info.converter = self._converter.backend
            self.info.converter_notes = self._converter.notes
        maps, cameras = self._maps, list(self.cameras)
        counters = {c.index: maps.counters(c.index) for c in cameras} \
            if maps is not None and params is not None and params.publish_map else {}
        msg = diagnostics.build(self.info, cameras, diag, self.get_clock().now().to_msg(),
                                memory=memory, maps=counters, scales=self._out.scale_reports())
        self._diag_pub.publish(msg)

    @property
    def autostart(self) -> bool:
        return bool(self.parameter_value('autostart'))


def _is_ours(exc: BaseException) -> bool:
    """Errors of our own already say what and where in one line."""
    # not imported here: the engine imports torch, which may be what just failed to import
    engine = sys.modules.get('lingbot_ros.streaming.engine')
    ours = (ConfigError, ParamError, StateError) + ((engine.EngineError,) if engine else ())
    return isinstance(exc, ours)


def _cpu_fallback_text(torch: Any) -> str:
    cuda = getattr(torch.version, 'cuda', None)
    build = f'a CUDA {cuda} build' if cuda else 'a CPU-only build'
    return ('device auto: no CUDA device is visible (torch ' + torch.__version__ + ' is '
            f'{build}); running on the CPU, which takes seconds per frame. Set device: cpu '
            'to silence this, or check the driver and CUDA_VISIBLE_DEVICES.')
