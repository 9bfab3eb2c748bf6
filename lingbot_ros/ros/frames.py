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
The robot's TF tree as the node reads it: base_frame -> camera, odom -> base, map -> odom.

tf2_ros is optional (a ROS distro has it, the PyPI environment does not): without it
:func:`tf2_missing` says so and the node goes on without the robot's tree. With it, a tf2
Buffer is fed by the node's own subscriptions: ``/tf_static`` always (latched: the URDF's
``base_frame -> camera``), ``/tf`` only where the node needs the robot's motion (the
odometry scale from TF, or map -> odom). Its own subscriptions rather than tf2_ros's
TransformListener, because they see who published each transform: another node that
broadcasts the watched ``map -> odom`` edge (a SLAM node, AMCL, robot_localization) is
named, so the node can warn that two authorities fight over it. Lookups never wait: a
transform not there (yet) is None with the reason, and the caller counts it.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from lingbot_ros.streaming.robot_frame import rigid
from lingbot_ros.streaming.trajectory import quat_to_matrix
import numpy as np
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile

CACHE_S = 30.0   # seconds of transforms the buffer keeps (the node's latency is far less)
TF_QOS = QoSProfile(depth=100, durability=DurabilityPolicy.VOLATILE,
                    history=HistoryPolicy.KEEP_LAST)
STATIC_QOS = QoSProfile(depth=100, durability=DurabilityPolicy.TRANSIENT_LOCAL,
                        history=HistoryPolicy.KEEP_LAST)


def tf2_missing() -> Optional[str]:
    """Return why TF cannot be read or written here (None: tf2_ros imports)."""
    try:
        import tf2_ros  # noqa: F401, I900 (ROS distro only)
        from tf2_msgs.msg import TFMessage  # noqa: F401, I900
    except Exception as exc:  # noqa: BLE001 (any failure means "not usable here")
        return f'tf2_ros is not installed ({type(exc).__name__})'
    return None


def transform_matrix(transform: Any) -> np.ndarray:
    """Return a geometry_msgs/Transform as the ``[4, 4]`` pose of the child in the parent."""
    t, q = transform.translation, transform.rotation
    return rigid(quat_to_matrix(np.array([q.x, q.y, q.z, q.w], dtype=np.float64)),
                 np.array([t.x, t.y, t.z], dtype=np.float64))


def _frame(name: str) -> str:
    return name[1:] if name.startswith('/') else name  # tf2 ignores a leading slash


def same_gid(a: bytes, b: bytes) -> bool:
    """Whether two publisher gids are one (rmws pad them to different lengths)."""
    n = min(len(a), len(b))
    return n > 0 and a[:n] == b[:n]


class TfFrames:
    """
    A tf2 Buffer fed by ``/tf_static`` (and ``/tf`` when ``dynamic``); lookups without waiting.

    ``watch``: ``(parent, child)`` of an edge this node broadcasts (map -> odom); a
    ``/tf`` message carrying it from another node sets :attr:`foreign` to that node's
    name. Create only where :func:`tf2_missing` is None.
    """

    def __init__(self, node: Node, dynamic: bool, group: Any,
                 watch: Optional[Tuple[str, str]] = None) -> None:
        from rclpy.duration import Duration
        from tf2_msgs.msg import TFMessage  # noqa: I900 (ROS distro only)
        from tf2_ros import Buffer  # noqa: I900
        self._node = node
        self.buffer = Buffer(cache_time=Duration(seconds=CACHE_S))
        self._authority = node.get_fully_qualified_name()
        self._watch = None if watch is None else (_frame(watch[0]), _frame(watch[1]))
        self._gids: dict = {}   # publisher gid -> node name ('' for this node)
        self.foreign: Optional[str] = None  # another node that broadcasts the watched edge
        self._subs = [node.create_subscription(TFMessage, '/tf_static', self._on_static,
                                               STATIC_QOS, callback_group=group)]
        if dynamic:
            self._subs.append(node.create_subscription(TFMessage, '/tf', self._on_tf, TF_QOS,
                                                       callback_group=group))

    def destroy(self) -> None:
        """Take the subscriptions down (the buffer stays readable)."""
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._subs = []

    def _on_static(self, msg: Any) -> None:
        for t in msg.transforms:
            try:
                self.buffer.set_transform_static(t, self._authority)
            except Exception:  # noqa: BLE001,S112 (tf2 refuses a malformed transform; skip it)
                continue

    def _on_tf(self, msg: Any, info: Any) -> None:
        for t in msg.transforms:
            if self._watch is not None and \
                    (_frame(t.header.frame_id), _frame(t.child_frame_id)) == self._watch:
                self._check_authority(info)
            try:
                self.buffer.set_transform(t, self._authority)
            except Exception:  # noqa: BLE001,S112 (tf2 refuses a malformed transform; skip it)
                continue

    def _check_authority(self, info: Any) -> None:
        """Name the publisher of a watched transform when it is not this node."""
        gid = (info or {}).get('publisher_gid') or {}
        data = bytes(gid.get('data', b''))
        if not data:
            return
        known = next((name for g, name in self._gids.items() if same_gid(g, data)), None)
        if known is None:
            known = self._publisher_name(data)
            if known is None:
                return  # not in the graph yet: the next message asks again
            self._gids[data] = known
        if known:
            self.foreign = known

    def _publisher_name(self, gid: bytes) -> Optional[str]:
        """Return '' for this node's publisher, another node's name, or None if unknown."""
        me = (self._node.get_name(), self._node.get_namespace())
        for endpoint in self._node.get_publishers_info_by_topic('/tf'):
            if same_gid(bytes(endpoint.endpoint_gid), gid):
                name = (endpoint.node_name, endpoint.node_namespace)
                if name == me:
                    return ''
                return endpoint.node_namespace.rstrip('/') + '/' + endpoint.node_name
        return None

    def lookup(self, parent: str, child: str,
               stamp_ns: Optional[int] = None) -> Tuple[Optional[np.ndarray], str]:
        """
        Return the pose ``[4, 4]`` of ``child`` in ``parent`` at ``stamp_ns`` (None: latest).

        ``(None, reason)`` when TF cannot give it now (not published, not yet at that
        stamp, or too old for the buffer).
        """
        from rclpy.time import Time
        when = Time() if stamp_ns is None else Time(nanoseconds=int(stamp_ns))
        try:
            t = self.buffer.lookup_transform(_frame(parent), _frame(child), when)
        except Exception as exc:  # noqa: BLE001 (tf2's Lookup / Extrapolation / Connectivity)
            text = ' '.join(str(exc).split()) or type(exc).__name__
            return None, f'{parent} -> {child}: {text}'
        return transform_matrix(t.transform), ''
