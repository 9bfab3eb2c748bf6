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
The node's outputs: each camera's publishers and the worker's sink that fills them.

``Outputs`` is the worker's :class:`~lingbot_ros.ros.worker.Sink`. The worker calls
``publish`` and ``map_restarted``, which hand the work to the output thread
(:mod:`~lingbot_ros.ros.output_thread`): the one thread that builds and publishes poses,
path, TF, depth and points, and writes each camera's track, in the order handed over.
``publish_maps`` runs on the map timer's callback group and is the only sender of
``~/map_points``. The lifecycle thread sets ``pubs`` and ``tf`` and starts the output
thread on activate, and stops it and clears them once the worker stopped; configure sets
``scale`` (:class:`~lingbot_ros.ros.scale_feed.ScaleFeed`: where each frame's outputs land,
in metres once a camera has a scale). No one else writes them. ``export`` (``~/save_state``)
copies a camera's scale and track on the output thread, in order with the frames.
"""

from __future__ import annotations

from concurrent.futures import Future as ThreadFuture
from dataclasses import dataclass
import threading
import time
from typing import Any, Callable, Optional

from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros import messages, path_cdr
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.camera_scale import Placed
from lingbot_ros.ros.counters import Sent
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.output_thread import OutputThread
from lingbot_ros.ros.params import Listened
from lingbot_ros.ros.reasons import Event, Level, Rejection, Topic
from lingbot_ros.ros.scale_feed import driving_camera, ScaleFeed
from lingbot_ros.ros.worker import Output
from lingbot_ros.streaming.parameters import Params
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.trajectory import PublishedTrack
from nav_msgs.msg import Odometry, Path as PathMsg
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

LOG_EVERY_S = 5.0          # throttle for per-camera problem lines


def quiet_events() -> Any:
    """
    Return publisher event callbacks that put no waitable in the wait set (None: rclpy's).

    By default rclpy gives every publisher two QoS event handlers (incompatible QoS,
    incompatible type), each a waitable the executor walks in Python on every turn of its
    wait set: the node's nine publishers made 18 of its 20 waitables, and a turn takes
    about 40 % longer with them. A subscriber with incompatible
    QoS still says so in its own log; the node's subscriptions keep their handlers.
    """
    try:
        from rclpy.event_handler import PublisherEventCallbacks
    except ImportError:  # pragma: no cover (Humble: the older module name)
        try:
            from rclpy.qos_event import PublisherEventCallbacks
        except ImportError:
            return None
    try:
        return PublisherEventCallbacks(use_default_callbacks=False)
    except TypeError:  # pragma: no cover (a release without the switch)
        return None


_EVENTS = quiet_events()


class CameraPublishers:
    """One camera's publishers (created on activate, destroyed once the worker stopped)."""

    def __init__(self, node: Node, prefix: str) -> None:
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                              history=HistoryPolicy.KEEP_LAST)
        latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                            history=HistoryPolicy.KEEP_LAST)

        def publisher(kind: Any, name: str, qos: QoSProfile) -> Any:
            return node.create_publisher(kind, prefix + name, qos, event_callbacks=_EVENTS)

        self.pose = publisher(PoseStamped, 'pose', reliable)
        self.odom = publisher(Odometry, 'odom', reliable)
        self.path = publisher(PathMsg, 'path', latest)
        self.path_sent = -float('inf')  # monotonic time of the last ~/path message
        self.depth = publisher(Image, 'depth', latest)
        self.points = publisher(PointCloud2, 'points', latest)
        self.camera_info = publisher(CameraInfo, 'camera_info', reliable)
        # the map: the newest one stays for late joiners (RViz started after the node)
        kept = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                          history=HistoryPolicy.KEEP_LAST,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.map_points = publisher(PointCloud2, 'map_points', kept)
        self.map_sent = (-float('inf'), -1)  # (monotonic time, map version) last sent
        self.base_odom = publisher(Odometry, 'base_odom', reliable)

    def destroy(self, node: Node) -> None:
        for pub in (self.pose, self.odom, self.path, self.depth, self.points,
                    self.camera_info, self.map_points, self.base_odom):
            node.destroy_publisher(pub)


@dataclass(frozen=True)
class SavedOutputs:
    """What a camera has published, as ``~/save_state`` writes it: scale and track."""

    scale: Optional[SavedScale]   # None: no scale source, or no frame of this map placed
    track: PublishedTrack


class Outputs:
    """The worker's sink: build and publish each result's messages, log problems."""

    def __init__(self, node: Node, params: Callable[[], Optional[Params]],
                 cameras: Callable[[], list], maps: Callable[[], Optional[MapThread]],
                 stopping: Callable[[], bool]) -> None:
        """Read the node's current params, cameras and map thread through the callables."""
        self._node = node  # its logger, and the factory of the publishers
        self._params, self._cameras, self._maps = params, cameras, maps
        self._stopping = stopping  # True once the process stops: publish failures are no error
        self.pubs: list = []   # CameraPublishers by camera index, while active
        self.tf: Any = None    # the TransformBroadcaster, while active (None without tf2_ros)
        self.scale: Optional[ScaleFeed] = None  # each camera's scale and frame, from configure
        self.map_restarts: dict = {}  # camera index -> restarts already logged
        self._last_log: dict = {}
        self._log_lock = threading.Lock()
        self._thread = OutputThread(self._job_failed)

    # --- the output thread (lifecycle thread starts and stops it) ------------------------

    def start(self) -> None:
        """Start sending on the output thread (activate, after the publishers exist)."""
        scale, params = self.scale, self._params()
        if scale is not None and params is not None:
            scale.subscribe(self._node, params)  # TF, depth and odometry: the scale's inputs
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Send what was handed over, then end the thread; False if it did not end in time."""
        sent = self._thread.stop(timeout)
        scale = self.scale
        if scale is not None:  # after the last frames were placed with what they read
            scale.unsubscribe(self._node)
        return sent

    def scale_reports(self) -> Optional[dict]:
        """Return each camera's scale report by index (None before configure)."""
        scale = self.scale
        return None if scale is None else scale.reports()

    def flush(self, timeout: float) -> bool:
        """Wait until everything handed over so far is sent (the worker, after a reset)."""
        return self._thread.flush(timeout)

    @property
    def sending(self) -> bool:
        return self._thread.alive

    def listened(self) -> Listened:
        """Whether any camera's ``~/depth`` and ``~/points`` have a subscription now."""
        pubs = list(self.pubs)
        return Listened(depth=any(_listened(p.depth) for p in pubs),
                        points=any(_listened(p.points) for p in pubs))

    def _job_failed(self, exc: BaseException) -> None:
        self.report(None, Event.PUBLISH_FAILED,
                    f'output: {type(exc).__name__}: {exc}', Level.ERROR)

    def _frames(self, cam: CameraStream) -> tuple:
        return camera_frames(self._params(), self._cameras(), cam)

    def report(self, cam: Optional[CameraStream], topic: Topic, text: str,
               level: Level) -> None:
        """Log a per-camera problem at most every LOG_EVERY_S per topic (counted always)."""
        name = cam.name if cam is not None else 'worker'
        key = (name, topic)
        now = time.monotonic()
        with self._log_lock:
            if now - self._last_log.get(key, -1e9) < LOG_EVERY_S:
                return
            self._last_log[key] = now
        count = cam.counters.rejected_count(topic) \
            if cam is not None and isinstance(topic, Rejection) else 0
        line = f'[{name}] {text}' + (f' ({count} so far)' if count else '')
        log = self._node.get_logger()
        if level == Level.ERROR:  # one call site per severity: rclpy refuses to mix them
            log.error(line)
        else:
            log.warning(line)

    def _send(self, cam: CameraStream, output: Sent, action: Callable[[], Optional[bool]]) -> None:
        """
        Publish one output (timed, unless ``action`` says False: nothing was due).

        A failure loses only this output, counted and reported.
        """
        t0 = time.monotonic()
        try:
            if action() is not False:
                cam.counters.on_output_sent(output, (time.monotonic() - t0) * 1e3)
        except Exception as exc:  # noqa: BLE001 (a bad message must not cost the others)
            if self._stopping():
                return  # the process is stopping: a publisher may already be gone, no error
            cam.counters.on_publish_failed(output)
            self.report(cam, Event.PUBLISH_FAILED,
                        f'{output.value} not published: {type(exc).__name__}: {exc}', Level.ERROR)

    # --- the worker's sink ---------------------------------------------------------------

    def publish(self, output: Output) -> None:
        """Hand one result to the output thread (it is counted as processed once sent)."""
        self._thread.submit(lambda: self._send_frame(output))

    def map_restarted(self, cam: CameraStream) -> None:
        """Start the camera's track and map over, after the old map's results are sent."""
        self._thread.submit(lambda: self._restart(cam))

    def export(self, cam: CameraStream) -> ThreadFuture:
        """
        Copy the camera's scale and published track once what was handed over is sent.

        Run on the output thread (the only writer of both), after the results handed over
        before this call and before any handed over after it; the future gets a
        :class:`SavedOutputs`, or what the copy raised.
        """
        future: ThreadFuture = ThreadFuture()

        def copy() -> None:
            try:
                params, scale = self._params(), self.scale
                frame = params.map_convention.value if params is not None else ''
                future.set_result(SavedOutputs(
                    scale=None if scale is None else scale.cameras[cam.index].export(),
                    track=PublishedTrack.of(cam.track.records(), frame)))
            except Exception as exc:  # noqa: BLE001 (the save says it; the thread goes on)
                future.set_exception(exc)
        self._thread.submit(copy)
        return future

    # --- on the output thread ------------------------------------------------------------

    def _restart(self, cam: CameraStream) -> None:
        if self.scale is not None:
            self.scale.restart(cam.index)  # the old scale belongs to the old map
        self._start_over(cam)

    def _start_over(self, cam: CameraStream) -> None:
        """Clear the camera's track and map: what follows is in another map or frame."""
        cam.track.clear()  # the old poses live in the old map
        maps = self._maps()
        if maps is not None:
            maps.clear(cam.index)  # in order with the keyframes queued before

    def _send_frame(self, output: Output) -> None:
        began = time.monotonic()
        try:
            self._send_result(output.camera, output.result)
        finally:
            output.delivered(began)

    def _send_result(self, cam: CameraStream, result: FrameResult) -> None:
        """Publish everything enabled for one result, stamped with the input's stamp."""
        params = self._params()
        outputs = self.pubs
        if params is None or cam.index >= len(outputs):
            return
        out, pubs = params, outputs[cam.index]
        map_frame, child, sensor = self._frames(cam)
        scale = self.scale
        placed = None if scale is None else scale.place(cam, result, params)
        if placed is not None:
            if placed.restarted:
                self._start_over(cam)
            result = placed.result  # depth and points in the published units
            if placed.withheld:  # nothing in the map frame before map -> odom is set
                if out.publish_camera_info and _listened(pubs.camera_info):
                    self._send(cam, Sent.CAMERA_INFO, lambda: pubs.camera_info.publish(
                        messages.camera_info(result, sensor)))
                return
            pose = placed.pose
        else:
            pose = messages.map_pose(result, params.map_convention)
        stamp = result.stamp_ns
        pose_msg = messages.pose_stamped(pose, stamp, map_frame)
        self._send(cam, Sent.POSE, lambda: pubs.pose.publish(pose_msg))
        pose_cov, twist_cov = out.pose_covariance, out.twist_covariance
        if placed is not None:
            twist_cov = placed.twist_diagonal(twist_cov)
            if placed.covariance is not None:
                pose_cov = placed.covariance
        if out.publish_odom:
            self._send(cam, Sent.ODOM, lambda: pubs.odom.publish(
                messages.odometry(pose, stamp, map_frame, child, cam.track.previous,
                                  pose_cov, twist_cov, pose=pose_msg.pose)))
        if placed is not None:
            self._send_robot(cam, pubs, scale, placed, map_frame, twist_cov)
        cam.track.add(stamp, pose, path_cdr.pose_cdr(pose_msg) if out.publish_path else None,
                      out.path_max_length)
        # the large outputs are built only while someone listens (RViz, a recorder, a
        # driver of depth_image_proc): unread, a frame's depth and points and the whole
        # path cost the output thread (and through the GIL, the worker) for nothing
        if out.publish_path and _listened(pubs.path):
            self._send(cam, Sent.PATH, lambda: self._publish_path(cam, pubs, pose_msg, map_frame))
        if out.publish_tf and self.tf is not None and \
                not (placed is not None and placed.drives_map_to_odom):
            self._send(cam, Sent.TF, lambda: self.tf.sendTransform(
                messages.transform(pose, stamp, map_frame, child, pose=pose_msg.pose)))
        if out.publish_camera_info and _listened(pubs.camera_info):
            self._send(cam, Sent.CAMERA_INFO, lambda: pubs.camera_info.publish(
                messages.camera_info(result, sensor)))
        if out.publish_depth and result.depth is not None and _listened(pubs.depth):
            self._send(cam, Sent.DEPTH, lambda: pubs.depth.publish(
                messages.depth_image(result, sensor)))
        if out.publish_points and result.depth is not None and _listened(pubs.points):
            self._send(cam, Sent.POINTS, lambda: pubs.points.publish(messages.point_cloud(
                result, pose, map_frame, out.points_decimation, out.points_min_confidence,
                out.points_confidence_percentile)))
        maps = self._maps()
        if out.publish_map and result.is_keyframe and result.depth is not None \
                and maps is not None:
            maps.submit(cam.index, result, pose)  # merged by the map thread

    def _send_robot(self, cam: CameraStream, pubs: CameraPublishers, scale: ScaleFeed,
                    placed: Placed, map_frame: str, twist_cov: tuple) -> None:
        """Send the robot's own: ~/base_odom, and map -> odom where this camera drives it."""
        params, stamp = self._params(), placed.result.stamp_ns
        if placed.odom_in_map is not None and self.tf is not None:
            when = stamp + int(round(params.map_to_odom_future_s * 1e9))
            self._send(cam, Sent.MAP_TO_ODOM, lambda: self.tf.sendTransform(messages.transform(
                placed.odom_in_map, when, map_frame, scale.odom_frame)))
        base = placed.base_pose
        if base is None or not params.publish_base_pose or not _listened(pubs.base_odom):
            return
        state = scale.cameras[cam.index]
        previous, state.base_previous = state.base_previous, (stamp, base)
        cov = params.pose_covariance if placed.base_covariance is None \
            else placed.base_covariance
        self._send(cam, Sent.BASE_ODOM, lambda: pubs.base_odom.publish(messages.odometry(
            base, stamp, map_frame, scale.base_frame, previous, cov, twist_cov)))

    def _publish_path(self, cam: CameraStream, pubs: CameraPublishers, pose_msg: PoseStamped,
                      map_frame: str) -> bool:
        """Send the whole path once path_period has passed; False when it was not due."""
        now = time.monotonic()
        if now - pubs.path_sent < self._params().path_period:
            return False
        pubs.path_sent = now
        header = Header(stamp=pose_msg.header.stamp, frame_id=map_frame)
        poses = cam.track.path()  # serialized poses (path_cdr), each serialized once
        if path_cdr.assembly_holds(map_frame):
            pubs.path.publish(path_cdr.path_cdr(header, poses))
        else:  # another rmw's encoding: a message, converted pose by pose as it goes out
            pubs.path.publish(PathMsg(header=header, poses=[
                deserialize_message(p, PoseStamped) for p in poses]))
        return True

    def publish_maps(self) -> None:
        """Send each camera's map every map_period, when it changed since the last one."""
        maps, params, outputs = self._maps(), self._params(), self.pubs
        if maps is None or params is None or not params.publish_map:
            return
        now = time.monotonic()
        for cam in list(self._cameras()):
            if cam.index >= len(outputs):
                continue
            pubs = outputs[cam.index]
            counters = maps.counters(cam.index)
            if counters.restarts > self.map_restarts.get(cam.index, 0):
                self.map_restarts[cam.index] = counters.restarts
                self._node.get_logger().info(
                    f'[{cam.name}] the map started over (a new map of the session): '
                    '~/map_points restarts from its keyframes')
            sent_at, version = pubs.map_sent
            # the timer runs every map_period; a little early is still this period's turn
            if counters.version == version or now - sent_at < 0.5 * params.map_period:
                continue
            if not _listened(pubs.map_points):
                continue  # built once someone subscribes (within map_period)
            rows, counters = maps.rows(cam.index)
            map_frame, _, _ = self._frames(cam)
            pubs.map_sent = (now, counters.version)
            self._send(cam, Sent.MAP_POINTS, lambda: pubs.map_points.publish(messages.map_cloud(
                rows, counters.stamp_ns, map_frame)))


def _listened(publisher: Any) -> bool:
    """Whether a subscription (of any process) is matched to ``publisher`` now."""
    try:
        return publisher.get_subscription_count() > 0
    except Exception:  # noqa: BLE001 (a publisher being destroyed: nothing to send to)
        return False


def camera_frames(params: Params, cameras: list, cam: CameraStream) -> tuple:
    """
    Return (map frame, tracked frame, sensor frame) for one camera.

    The tracked frame is the child of odom and TF. By default it is a frame of our
    own (``<image frame_id>_lingbot``): broadcasting map -> the image's frame itself
    would give a frame the robot's URDF already parents a second parent. Set
    ``camera_frame`` to choose it. ``camera_info`` and depth keep the image's frame.
    With several cameras each has a map frame of its own, but the one driving
    ``publish_map_to_odom`` publishes in ``map_frame`` itself.
    """
    many = len(cameras) > 1
    drives = many and params.publish_map_to_odom and \
        driving_camera(params, [c.name for c in cameras]) == cam.index
    map_frame = f'{params.map_frame}_{cam.name}' if many and not drives else params.map_frame
    sensor = cam.frame_id or f'{cam.name}_optical_frame'
    if params.camera_frame:
        child = f'{params.camera_frame}_{cam.name}' if many else params.camera_frame
    else:
        child = f'{sensor}_lingbot'
    return map_frame, child, sensor
