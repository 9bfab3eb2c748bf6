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
and ``ros2 launch`` just work. Output topics are ``~/pose`` etc. for one camera and
``~/<camera_name>/pose`` etc. for several.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime
import gc
from pathlib import Path
import sys
import threading
import time
from typing import Any, Optional

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from lingbot_ros.model.config import ConfigError
from lingbot_ros.ros import diagnostics, messages
from lingbot_ros.ros.convert import ImageConverter, ImageRejected
from lingbot_ros.ros.params import (descriptor, engine_config, NodeParams, ParamError, parse,
                                    SPEC, SPECS, stream_config, update)
from lingbot_ros.ros.worker import CameraStream, Frame, FrameQueue, Worker
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.trajectory import write_npz, write_tum
from nav_msgs.msg import Odometry, Path as PathMsg
import numpy as np
from rcl_interfaces.msg import SetParametersResult
import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, CompressedImage, Image, PointCloud2
from std_msgs.msg import Header
from std_srvs.srv import Trigger

NODE_NAME = 'lingbot_node'
LOG_EVERY_S = 5.0  # throttle for per-camera problem lines
SUCCESS = TransitionCallbackReturn.SUCCESS
FAILURE = TransitionCallbackReturn.FAILURE


def _optional(module: str) -> bool:
    try:
        __import__(module)
    except Exception:  # noqa: BLE001 (any failure means "not usable here")
        return False
    return True


class _Outputs:
    """One camera's publishers (created on activate, destroyed on deactivate)."""

    def __init__(self, node: 'LingbotNode', prefix: str) -> None:
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                              history=HistoryPolicy.KEEP_LAST)
        latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                            history=HistoryPolicy.KEEP_LAST)
        self.pose = node.create_publisher(PoseStamped, prefix + 'pose', reliable)
        self.odom = node.create_publisher(Odometry, prefix + 'odom', reliable)
        self.path = node.create_publisher(PathMsg, prefix + 'path', latest)
        self.path_sent = -float('inf')  # monotonic time of the last ~/path message
        self.depth = node.create_publisher(Image, prefix + 'depth', latest)
        self.points = node.create_publisher(PointCloud2, prefix + 'points', latest)
        self.camera_info = node.create_publisher(CameraInfo, prefix + 'camera_info', reliable)

    def destroy(self, node: 'LingbotNode') -> None:
        for pub in (self.pose, self.odom, self.path, self.depth, self.points,
                    self.camera_info):
            node.destroy_publisher(pub)


class LingbotNode(LifecycleNode):
    """The LingBot-Map streaming reconstruction node; see the module docstring."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._declare_errors = self._declare_all()
        self.params: Optional[NodeParams] = None
        self._stream_cfg = None
        self.engine = None
        self.cameras: list = []
        self._queue: Optional[FrameQueue] = None
        self._worker: Optional[Worker] = None
        self._outputs: list = []
        self._subs: list = []
        self._lb_services: list = []
        self._tf = None
        self._last_log: dict = {}
        self._cfg_lock = threading.Lock()
        self.info = diagnostics.NodeInfo(hardware_id='none')
        self.info.missing = [m for m in ('tf2_ros', 'cv_bridge', 'flashinfer')
                             if not _optional(m)]
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.add_post_set_parameters_callback(self._after_set_parameters)
        self._diag_pub = self.create_publisher(DiagnosticArray, '/diagnostics', 10)
        period = self._raw('diagnostics_period')
        ok = isinstance(period, float) and SPEC['diagnostics_period'].low <= period <= 60.0
        self._diag_timer = self.create_timer(period if ok else 1.0, self._publish_diagnostics)

    # --- parameters ---------------------------------------------------------------------

    def _declare_all(self) -> list:
        errors = []
        for spec in SPECS:
            value = spec.default
            if isinstance(value, list) and not value:
                value = Parameter.Type.STRING_ARRAY  # typed, no default: read as []
            try:
                self.declare_parameter(spec.name, value, descriptor(spec))
            except Exception as exc:  # noqa: BLE001 (wrong type or range from the YAML)
                errors.append(f'{spec.name}: {exc}')
        return errors

    def _raw(self, name: str) -> Any:
        try:
            value = self.get_parameter(name).value
        except Exception:  # noqa: BLE001 (undeclared after a type error, or uninitialised)
            return SPEC[name].default
        return SPEC[name].default if value is None else value

    def _values(self) -> dict:
        return {spec.name: self._raw(spec.name) for spec in SPECS}

    def _on_set_parameters(self, changed: list) -> SetParametersResult:
        changed = [p for p in changed if p.name in SPEC]  # use_sim_time etc. are rclpy's
        if not changed:
            return SetParametersResult(successful=True)
        if self.params is None:  # not configured: configure validates the whole set
            try:
                parse({**self._values(), **{p.name: p.value for p in changed}})
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
            self._stream_cfg = stream_config(self.params)
            for cam in self.cameras:
                cam.counters.resize(self.params.diag.stats_window)
        names = ', '.join(f'{p.name}={p.value!r}' for p in changed)
        self.get_logger().info(f'applied from the next frame: {names}')

    def current_stream_config(self) -> Any:
        with self._cfg_lock:
            return self._stream_cfg

    # --- lifecycle ----------------------------------------------------------------------

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        log = self.get_logger()
        if self._declare_errors:
            return self._fail('invalid parameters: ' + '; '.join(self._declare_errors))
        try:
            params = parse(self._values())
            stream_cfg = stream_config(params)
        except (ParamError, ConfigError) as exc:
            return self._fail(f'invalid parameters: {exc}')
        import torch
        from lingbot_ros.streaming.engine import Engine
        try:
            engine_cfg = engine_config(params, torch.cuda.is_available())
            engine = Engine.load(engine_cfg)
            names = params.resolved_camera_names
            sessions = [engine.new_session(n, stream_cfg) for n in names]
        except Exception as exc:  # noqa: BLE001 (EngineError, ConfigError, OSError ...)
            return self._fail(f'cannot load the model: {exc}')
        self.engine, self.params, self._stream_cfg = engine, params, stream_cfg
        self.cameras = [CameraStream(i, n, t, s, params.diag.stats_window)
                        for i, (n, t, s) in enumerate(zip(names, params.inputs.camera_topics,
                                                          sessions))]
        for cam in self.cameras:
            cam.sliding_window = stream_cfg.sliding_window
        self._queue = FrameQueue(len(self.cameras), params.inputs.queue_size)
        self._worker = Worker(self.cameras, self._queue, self, self.current_stream_config)
        self._converter = ImageConverter(params.inputs.use_cv_bridge)
        self._fill_info(engine, engine_cfg)
        self._lb_services = [
            self.create_service(Trigger, '~/reset', self._on_reset),
            self.create_service(Trigger, '~/save_trajectory', self._on_save)]
        random = 'random weights' in engine.description
        line = (f'model: {engine.description} on {engine.device} ({self.info.dtype}, '
                f'{engine.backend} attention); cameras: '
                + ', '.join(f'{c.name} <- {c.topic}' for c in self.cameras))
        log.info(line)
        if random:
            log.warning('NO CHECKPOINT: running the tiny random-weight model. Poses and depth '
                        'are meaningless; set the checkpoint parameter to the released '
                        'LingBot-Map weights.')
        self.info.state = 'inactive'
        return SUCCESS

    def _fail(self, text: str) -> TransitionCallbackReturn:
        self.get_logger().error(f'configure failed: {text}')
        self.info.error = text
        self.info.state = 'unconfigured (configure failed)'
        return FAILURE

    def _fill_info(self, engine: Any, cfg: Any) -> None:
        info = self.info
        info.error = ''
        info.model = engine.description
        info.random_weights = 'random weights' in engine.description
        info.device = str(engine.device)
        info.dtype = str(engine.dtype).replace('torch.', '')
        info.backend = engine.backend
        info.converter = self._converter.backend
        info.fallbacks = []
        if cfg.attention_backend == 'auto' and engine.device.type == 'cuda' \
                and engine.backend != 'flashinfer':
            info.fallbacks.append(f'attention: {engine.backend_reason}')
        if 'tf2_ros' in info.missing and self.params.outputs.publish_tf:
            info.fallbacks.append('tf2_ros not installed: TF not published')
        info.hardware_id = _hardware_id(engine.device)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        p = self.params
        inputs = p.inputs
        many = len(self.cameras) > 1
        self._outputs = [_Outputs(self, f'~/{c.name}/' if many else '~/') for c in self.cameras]
        self._tf = None
        if 'tf2_ros' not in self.info.missing:
            from tf2_ros import TransformBroadcaster  # noqa: I900 (ROS distro only)
            self._tf = TransformBroadcaster(self)
        qos = QoSProfile(depth=inputs.qos_depth, history=HistoryPolicy.KEEP_LAST,
                         reliability=(ReliabilityPolicy.BEST_EFFORT
                                      if inputs.qos_reliability == 'best_effort'
                                      else ReliabilityPolicy.RELIABLE))
        compressed = inputs.input_transport == 'compressed'
        for cam in self.cameras:
            topic = cam.topic.rstrip('/') + '/compressed' if compressed else cam.topic
            kind = CompressedImage if compressed else Image
            self._subs.append(self.create_subscription(
                kind, topic, lambda msg, c=cam: self._on_image(c, msg, compressed), qos))
        self._queue = FrameQueue(len(self.cameras), inputs.queue_size)
        self._worker.queue = self._queue
        self._worker.start()
        self.info.state = 'active'
        self.get_logger().info('active: ' + ', '.join(
            f'{s.topic_name}' for s in self._subs))
        return SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_streaming()
        self.info.state = 'inactive'
        return SUCCESS

    def _stop_streaming(self) -> None:
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        if self._worker is not None:
            self._worker.stop()
        for out in self._outputs:
            out.destroy(self)
        self._outputs = []
        self._tf = None

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.info.state = 'unconfigured'
        return SUCCESS

    def _release(self) -> None:
        self._stop_streaming()
        for srv in self._lb_services:
            self.destroy_service(srv)
        self._lb_services = []
        self.cameras, self._worker, self._queue, self.engine = [], None, None, None
        self.params = None
        gc.collect()
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001,S110 (best effort)
            pass
        self.info.model, self.info.hardware_id = 'not loaded', 'none'

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.info.state = 'finalized'
        return SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release()
        self.info.state = 'unconfigured (after an error)'
        return SUCCESS

    # --- input (executor thread: convert and enqueue only) -------------------------------

    def _on_image(self, cam: CameraStream, msg: Any, compressed: bool) -> None:
        now = time.monotonic()
        cam.counters.on_received(now)
        try:
            rgb = self._converter.compressed(msg) if compressed else self._converter.image(msg)
        except ImageRejected as exc:
            cam.counters.on_rejected(exc.reason)
            self.report(cam, exc.reason, f'image rejected: {exc}', 'warn')
            return
        stamp = messages.stamp_ns(msg.header.stamp)
        verdict = cam.admit(stamp)
        if verdict == 'duplicate':
            cam.counters.on_rejected('duplicate_stamp')
            self.report(cam, 'duplicate_stamp', f'duplicate stamp {stamp} rejected', 'warn')
            return
        if verdict == 'backward':
            cam.counters.stamp_resets += 1
            for _ in range(self._queue.clear(cam.index)):
                cam.counters.on_dropped()
            cam.pending_reset.set()
            self.get_logger().warning(
                f'[{cam.name}] stamp jumped backwards (looped bag or restarted source): '
                "resetting this camera's session; the next frames start a new map")
        dropped = self._queue.put(Frame(cam.index, rgb, stamp, now, msg.header.frame_id))
        if dropped is not None:
            cam.counters.on_dropped()

    # --- output (worker thread) ----------------------------------------------------------

    def report(self, cam: Optional[CameraStream], reason: str, text: str, level: str) -> None:
        """Log a per-camera problem at most every LOG_EVERY_S per reason (counted always)."""
        name = cam.name if cam is not None else 'worker'
        key = (name, reason)
        now = time.monotonic()
        if now - self._last_log.get(key, -1e9) < LOG_EVERY_S:
            return
        self._last_log[key] = now
        count = cam.counters.rejected.get(reason, 0) if cam is not None else 0
        line = f'[{name}] {text}' + (f' ({count} so far)' if count else '')
        log = self.get_logger()
        (log.error if level == 'error' else log.warning)(line)

    def _frames(self, cam: CameraStream) -> tuple:
        """
        Return (map frame, tracked frame, sensor frame) for one camera.

        The tracked frame is the child of odom and TF. By default it is a frame of our
        own (``<image frame_id>_lingbot``): broadcasting map -> the image's frame itself
        would give a frame the robot's URDF already parents a second parent. Set
        ``camera_frame`` to choose it. ``camera_info`` and depth keep the image's frame.
        """
        inputs = self.params.inputs
        many = len(self.cameras) > 1
        map_frame = f'{inputs.map_frame}_{cam.name}' if many else inputs.map_frame
        sensor = cam.frame_id or f'{cam.name}_optical_frame'
        if inputs.camera_frame:
            child = f'{inputs.camera_frame}_{cam.name}' if many else inputs.camera_frame
        else:
            child = f'{sensor}_lingbot'
        return map_frame, child, sensor

    def publish(self, cam: CameraStream, result: FrameResult) -> None:
        """Publish everything enabled for one result, stamped with the input's stamp."""
        params = self.params
        if params is None or cam.index >= len(self._outputs):
            return
        out, pubs = params.outputs, self._outputs[cam.index]
        map_frame, child, sensor = self._frames(cam)
        pose = messages.map_pose(result, params.inputs.map_convention)
        stamp = result.stamp_ns
        pose_msg = messages.pose_stamped(pose, stamp, map_frame)
        pubs.pose.publish(pose_msg)
        if out.publish_odom:
            pubs.odom.publish(messages.odometry(pose, stamp, map_frame, child, cam.previous))
        if out.publish_path:
            if cam.path.maxlen != out.path_max_length:
                cam.path = deque(cam.path, maxlen=out.path_max_length)
            cam.path.append(pose_msg)
            now = time.monotonic()
            if now - pubs.path_sent >= out.path_period:  # the full path is costly to send
                pubs.path_sent = now
                pubs.path.publish(PathMsg(header=Header(stamp=pose_msg.header.stamp,
                                                        frame_id=map_frame),
                                          poses=list(cam.path)))
        if out.publish_tf and self._tf is not None:
            self._tf.sendTransform(messages.transform(pose, stamp, map_frame, child))
        if out.publish_camera_info:
            pubs.camera_info.publish(messages.camera_info(result, sensor))
        if out.publish_depth:
            depth = messages.depth_image(result, sensor)
            if depth is not None:
                pubs.depth.publish(depth)
        if out.publish_points:
            cloud = messages.point_cloud(result, pose, map_frame, out.points_decimation,
                                         out.points_min_confidence,
                                         out.points_confidence_percentile)
            if cloud is not None:
                pubs.points.publish(cloud)
        cam.previous = (stamp, pose)
        with cam.lock:
            cam.trajectory.append((stamp, pose))

    # --- services --------------------------------------------------------------------------

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        done = self._worker.request_reset()
        response.success = done.wait(60.0)
        response.message = (f'reset {len(self.cameras)} session(s): the next frames start a '
                            'new map' if response.success else 'reset timed out (worker busy)')
        self.get_logger().info(response.message)
        return response

    def _on_save(self, request: Trigger.Request, response: Trigger.Response) -> Any:
        folder = Path(self.params.trajectory_dir)
        written, empty = [], []
        try:
            folder.mkdir(parents=True, exist_ok=True)
            when = datetime.now().strftime('%Y%m%d-%H%M%S')
            for cam in self.cameras:
                with cam.lock:
                    records = list(cam.trajectory)
                if not records:
                    empty.append(cam.name)
                    continue
                stamps = np.array([s for s, _ in records], dtype=np.int64)
                poses = np.stack([p for _, p in records])
                base = folder / f'{cam.name}_{when}'
                write_tum(base.with_suffix('.tum'), stamps * 1e-9, poses)
                map_frame, child, _ = self._frames(cam)
                write_npz(base.with_suffix('.npz'), {
                    'stamps_ns': stamps, 'poses': poses,
                    'map_frame': np.array(map_frame), 'camera_frame': np.array(child),
                    'map_convention': np.array(self.params.inputs.map_convention)})
                written += [str(base.with_suffix('.tum')), str(base.with_suffix('.npz'))]
        except OSError as exc:
            response.success, response.message = False, f'cannot write to {folder}: {exc}'
            return response
        response.success = bool(written)
        response.message = ('wrote ' + ', '.join(written)) if written else \
            'no poses yet for ' + ', '.join(empty)
        if written and empty:
            response.message += '; no poses yet for ' + ', '.join(empty)
        return response

    # --- diagnostics ---------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        diag = self.params.diag if self.params is not None else parse({}).diag
        if self._worker is not None and self.info.state == 'active' \
                and not self._worker.alive:
            self.info.error = 'the worker thread stopped'
        if self.engine is not None:
            self.info.cuda_graphs = self.engine.graph_status
            if self.engine.device.type == 'cuda':
                self.info.device_memory_use = diagnostics.device_memory_use()
        msg = diagnostics.build(self.info, list(self.cameras), diag,
                                self.get_clock().now().to_msg())
        self._diag_pub.publish(msg)

    @property
    def autostart(self) -> bool:
        return bool(self._raw('autostart'))


def _hardware_id(device: Any) -> str:
    if getattr(device, 'type', '') == 'cuda':
        try:
            import torch
            return f'{device} {torch.cuda.get_device_name(device)}'
        except Exception:  # noqa: BLE001
            return str(device)
    return str(device)


def main(args: Optional[list] = None) -> int:
    """Entry point of ``lingbot_node``: spin, auto configure + activate by default."""
    rclpy.init(args=args)
    node = LingbotNode()
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    rc = 0
    try:
        if node.autostart:
            if node.trigger_configure() != SUCCESS:
                node.get_logger().fatal('configure failed (see above); exiting')
                rc = 1
            elif node.trigger_activate() != SUCCESS:
                node.get_logger().fatal('activate failed; exiting')
                rc = 1
        if rc == 0:
            executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        node._release()
        executor.remove_node(node)
        node.destroy_node()
        rclpy.try_shutdown()
    return rc


if __name__ == '__main__':
    sys.exit(main())
