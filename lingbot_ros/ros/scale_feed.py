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
The node's side of the metric scale: what the sources read, and each camera's placement.

:class:`ScaleFeed` is made by configure (from the read-only parameters and the cameras'
names), subscribes on activate (``/tf_static`` and, where the robot's motion is needed,
``/tf``; the depth topics; the odometry topic) and unsubscribes on deactivate; the
cameras' scales (:class:`~lingbot_ros.ros.camera_scale.CameraScale`) live as long as it.
The output thread calls :meth:`ScaleFeed.place` with every result; it looks up what the
camera's source needs for that frame (the URDF's ``base_frame -> camera``, looked up when
the image's frame_id is first known, again when it changes or after a failure; the
base's odometry at the stamp; the depth image of the stamp) and never waits for TF.
Diagnostics read :meth:`ScaleFeed.reports`. A source that cannot run here (odometry or
``map -> odom`` without tf2_ros) is said once and the camera goes on in model units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.camera_scale import CameraScale, Placed, ScaleReport
from lingbot_ros.ros.frames import tf2_missing, TfFrames
from lingbot_ros.ros.scale_inputs import DepthInbox, OdometryInbox
from lingbot_ros.streaming.choices import QosReliability
from lingbot_ros.streaming.parameters import ParamError, Params
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.scale.estimate import ScaleSource
import numpy as np

LEVER_RETRY_S = 1.0   # a failed base_frame -> camera lookup is tried again after this long
DEPTH_TOPIC = 'depth_registered/image_rect'  # a camera's registered depth, relative name


def driving_camera(params: Params, names: Sequence[str]) -> Optional[int]:
    """Return the index of the camera that drives map -> odom (None: publish_map_to_odom off)."""
    if not params.publish_map_to_odom:
        return None
    name = params.map_to_odom_camera
    if not name:
        return 0
    if name not in names:
        raise ParamError(f'map_to_odom_camera={name!r} is invalid: expected one of the '
                         f'cameras {list(names)}')
    return list(names).index(name)


def depth_topics(params: Params, names: Sequence[str]) -> List[str]:
    """Return each camera's registered depth topic: depth_topics, or the relative default."""
    if params.depth_topics:
        return list(params.depth_topics)
    if len(names) == 1:
        return [DEPTH_TOPIC]
    return [f'{name}/{DEPTH_TOPIC}' for name in names]


@dataclass
class _Lever:
    """One camera's base_frame -> camera lookup (the output thread's)."""

    frame_id: Optional[str] = None
    matrix: Optional[np.ndarray] = None
    reason: str = 'not looked up yet'
    tried_at: float = -float('inf')
    said: bool = False


class _Inputs:
    """One frame's inputs, each looked up once and only when the placement asks."""

    def __init__(self, feed: 'ScaleFeed', cam: CameraStream, stamp_ns: int) -> None:
        self._feed, self._cam, self._stamp = feed, cam, stamp_ns
        self._got: Dict[str, Any] = {}

    def _once(self, key: str, make: Callable[[], Any]) -> Any:
        if key not in self._got:
            self._got[key] = make()
        return self._got[key]

    def lever(self) -> Optional[np.ndarray]:
        return self._once('lever', lambda: self._feed.lever(self._cam))

    def odom_base(self) -> Optional[np.ndarray]:
        return self._once('odom_base', lambda: self._feed.odom_base(self._stamp))

    def odometry(self) -> Optional[np.ndarray]:
        feed = self._feed
        if feed.odometry_inbox is not None:
            return self._once('odometry', lambda: feed.odometry_inbox.at(self._stamp))
        return self.odom_base()

    def depth(self) -> Optional[np.ndarray]:
        return self._once('depth', lambda: self._feed.depth(self._cam, self._stamp))


class ScaleFeed:
    """
    Every camera's scale, and the subscriptions and lookups that feed them.

    ``params``: the configured set (its read-only parameters decide the sources);
    ``names``: the cameras' names; ``patch_size``: the model's; ``log``: the node's logger.
    A ``map_to_odom_camera`` that names no camera is a ParamError (configure fails).
    """

    def __init__(self, params: Params, names: Sequence[str], patch_size: int,
                 log: Any) -> None:
        self._log = log
        self._names = list(names)
        self.source: ScaleSource = params.scale_source
        self.base_frame, self.odom_frame = params.base_frame, params.odom_frame
        self.map_frame = params.map_frame
        self.tf_missing = tf2_missing()
        self.drive = driving_camera(params, names)
        src, missing = self.source, self.tf_missing
        self.unavailable = ''
        if src is ScaleSource.ODOMETRY and missing:
            self.unavailable = (f'{missing}: the odometry scale needs base_frame -> camera '
                                'from TF')
        drives = self.drive is not None and not missing
        self.cameras = [CameraScale(src, params.map_convention, self._sayer(name),
                                    params.fixed_scale, self.unavailable,
                                    drives and i == self.drive, patch_size,
                                    self._map_to_odom_note(i))
                        for i, name in enumerate(self._names)]
        self._levers = [_Lever() for _ in self._names]
        self._depth_topics = depth_topics(params, names) if src is ScaleSource.DEPTH else []
        self._depth = [DepthInbox() for _ in self._depth_topics]
        self.odometry_inbox = OdometryInbox(params.odom_frame, params.base_frame) \
            if src is ScaleSource.ODOMETRY and params.odometry_topic and not missing else None
        self._odometry_topic = params.odometry_topic
        self._depth_tolerance_ns = int(params.depth_time_tolerance_s * 1e9)
        self._tf: Optional[TfFrames] = None
        self._subs: list = []
        self._foreign_said: Optional[str] = None
        if self.unavailable:
            log.warning(f'scale_source odometry is unavailable: {self.unavailable}; the outputs '
                        'stay in model units')
        if self.drive is not None and missing:
            log.warning(f'publish_map_to_odom is unavailable: {missing}; no map -> odom')

    def _map_to_odom_note(self, index: int) -> str:
        """Say what a camera has to do with map -> odom (the driving one's is its own)."""
        if self.drive is None:
            return 'off'
        if self.tf_missing:
            return f'unavailable: {self.tf_missing}'
        return f'driven by camera {self._names[self.drive]}'

    def _sayer(self, name: str) -> Callable[[bool, str], None]:
        def say(warning: bool, text: str) -> None:
            if warning:  # one call site per severity: rclpy refuses to mix them at one
                self._log.warning(f'[{name}] {text}')
            else:
                self._log.info(f'[{name}] {text}')
        return say

    @property
    def fallbacks(self) -> List[str]:
        """Return what runs without what was asked for (the node status's fallbacks)."""
        out = [f'scale_source odometry unavailable: {self.unavailable}'] if self.unavailable \
            else []
        if self.drive is not None and self.tf_missing:
            out.append(f'publish_map_to_odom unavailable: {self.tf_missing}')
        return out

    @property
    def needs_motion(self) -> bool:
        """Whether the robot's motion is read from /tf (odometry via TF, or map -> odom)."""
        via_tf = self.source is ScaleSource.ODOMETRY and not self._odometry_topic \
            and not self.unavailable
        return via_tf or (self.drive is not None and not self.tf_missing)

    # --- subscriptions (the lifecycle thread) ----------------------------------------

    def subscribe(self, node: Any, params: Params) -> None:
        """
        Subscribe to what the sources read (activate): TF, odometry, the depth images.

        In a callback group of their own (so a burst of /tf never holds up the images);
        the depth images with the colour images' QoS.
        """
        from nav_msgs.msg import Odometry
        from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        group = MutuallyExclusiveCallbackGroup()
        qos = QoSProfile(depth=params.qos_depth, history=HistoryPolicy.KEEP_LAST,
                         reliability=ReliabilityPolicy.BEST_EFFORT
                         if params.qos_reliability == QosReliability.BEST_EFFORT
                         else ReliabilityPolicy.RELIABLE)
        if not self.tf_missing and (self.source is not ScaleSource.NONE or self.drive is not None):
            watch = (self.map_frame, self.odom_frame) if self.drive is not None else None
            self._tf = TfFrames(node, self.needs_motion, group, watch)
        for topic, inbox in zip(self._depth_topics, self._depth):
            self._subs.append(node.create_subscription(Image, topic, inbox.put, qos,
                                                       callback_group=group))
        if self.odometry_inbox is not None:
            self._subs.append(node.create_subscription(
                Odometry, self._odometry_topic, self.odometry_inbox.put, 50,
                callback_group=group))

    def unsubscribe(self, node: Any) -> None:
        """Take the subscriptions down (deactivate); the scales stay."""
        for sub in self._subs:
            node.destroy_subscription(sub)
        self._subs = []
        if self._tf is not None:
            self._tf.destroy()
            self._tf = None

    # --- lookups (the output thread) -------------------------------------------------

    def lever(self, cam: CameraStream) -> Optional[np.ndarray]:
        """Return the camera's pose in base_frame (the URDF's), or None; said once."""
        entry = self._levers[cam.index]
        frame_id = cam.frame_id
        if entry.frame_id == frame_id and entry.matrix is not None:
            return entry.matrix
        if entry.frame_id != frame_id:
            entry.frame_id, entry.matrix, entry.said = frame_id, None, False
            entry.tried_at = -float('inf')
        now = time.monotonic()
        if now - entry.tried_at < LEVER_RETRY_S:
            return None
        entry.tried_at = now
        tf = self._tf  # unsubscribe may clear it meanwhile
        if self.tf_missing:
            entry.reason = self.tf_missing
        elif not frame_id:
            entry.reason = 'the images carry no frame_id'
        elif tf is None:
            entry.reason = 'not subscribed to TF'
        else:
            entry.matrix, entry.reason = tf.lookup(self.base_frame, frame_id)
        name = self._names[cam.index]
        if entry.matrix is not None:
            t = entry.matrix[:3, 3]
            self._log.info(f'[{name}] {self.base_frame} -> {frame_id}: camera at '
                           f'({t[0]:.3f}, {t[1]:.3f}, {t[2]:.3f}) m')
        elif not entry.said:
            entry.said = True
            self._log.warning(f'[{name}] {self.base_frame} -> {frame_id or "?"} unknown '
                              f'({entry.reason}): ~/base_odom, the odometry scale and '
                              'map -> odom wait for it; tried again every '
                              f'{LEVER_RETRY_S:.0f} s')
        return entry.matrix

    def base_status(self, cam: CameraStream) -> str:
        """Return 'known' or 'unknown: why' for the camera's base_frame -> camera."""
        entry = self._levers[cam.index]
        return 'known' if entry.matrix is not None else f'unknown: {entry.reason}'

    def odom_base(self, stamp_ns: int) -> Optional[np.ndarray]:
        """Return TF's base_frame pose in odom_frame at ``stamp_ns`` (None: not there)."""
        tf = self._tf
        if tf is None:
            return None
        matrix, _ = tf.lookup(self.odom_frame, self.base_frame, stamp_ns)
        return matrix

    def depth(self, cam: CameraStream, stamp_ns: int) -> Optional[np.ndarray]:
        """Return the camera's registered sensor image (metres) nearest ``stamp_ns``, or None."""
        if cam.index >= len(self._depth):
            return None
        return self._depth[cam.index].take(stamp_ns, self._depth_tolerance_ns)

    # --- per frame (the output thread) -----------------------------------------------

    def place(self, cam: CameraStream, result: FrameResult, params: Params) -> Placed:
        """Feed one result of ``cam`` (stream order) and say where its outputs land."""
        scale = self.cameras[cam.index]
        # ~/base_odom needs the lever arm, and a scale: none without a source
        wanted = bool(params.publish_base_pose) and self.source is not ScaleSource.NONE
        placed = scale.place(result, _Inputs(self, cam, result.stamp_ns), needs_lever=wanted,
                             base_status_of=lambda: self.base_status(cam))
        self._follow_authority()
        return placed

    def restart(self, index: int) -> None:
        """Forget camera ``index``'s scale and frame (its session started a new map)."""
        self.cameras[index].restart()

    def _follow_authority(self) -> None:
        tf = self._tf
        other = tf.foreign if tf is not None else None
        if other is not None and other != self._foreign_said:
            self._foreign_said = other
            self._log.warning(f'{other} also broadcasts {self.map_frame} -> {self.odom_frame}: '
                              'two authorities for one edge make TF jump between them; '
                              "turn one off (publish_map_to_odom here, or the other node's)")

    @property
    def foreign(self) -> Optional[str]:
        """Return another node that broadcasts the map -> odom edge this node broadcasts."""
        return self._foreign_said

    def reports(self) -> Dict[int, ScaleReport]:
        """Return each camera's latest scale report, by camera index (diagnostics)."""
        reports = {i: c.report for i, c in enumerate(self.cameras)}
        if self._foreign_said is not None and self.drive is not None:
            r = reports[self.drive]
            reports[self.drive] = replace(r, map_to_odom=f'{r.map_to_odom}; also broadcast by '
                                          f'{self._foreign_said} (two authorities)')
        extra = self._input_problems()
        return {i: (r if not extra.get(i) else _with_note(r, extra[i]))
                for i, r in reports.items()}

    def _input_problems(self) -> Dict[int, str]:
        """Return per camera the last refusal of its depth or odometry input, if any."""
        out = {}
        for i, inbox in enumerate(self._depth):
            if inbox.last_error:
                out[i] = f'depth refused ({inbox.rejected}): {inbox.last_error}'
        if self.odometry_inbox is not None and self.odometry_inbox.last_error:
            for i in range(len(self.cameras)):
                out[i] = (f'odometry refused ({self.odometry_inbox.rejected}): '
                          f'{self.odometry_inbox.last_error}')
        return out


def _with_note(report: ScaleReport, text: str) -> ScaleReport:
    return replace(report, note='; '.join(t for t in (report.note, text) if t))
