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
The camera side of the node: subscriptions, conversion, the stamp gate, lost-frame counts.

``Intake`` runs in the image callback group (one callback at a time, never the worker):
each image is counted, converted, its stamp admitted or refused, and the frame handed to
the worker's queue; it never waits on the GPU. ``subscribe`` runs on activate (the
lifecycle thread).

Frames a camera sent that the node never took are counted from the publishers' numbering
(``counters.SequenceGaps``, fed the ``MessageInfo`` of every sample).

Raw images are subscribed serialized and read in place (:mod:`~lingbot_ros.ros.image_cdr`):
rclpy's conversion to a Python message copied the pixels on the executor's thread before
the callback began. Compressed images stay messages (decoding them dominates).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from lingbot_ros.ros import messages
from lingbot_ros.ros.camera import CameraStream, StampVerdict
from lingbot_ros.ros.convert import ImageRejected, TruncatedData
from lingbot_ros.ros.counters import MAX_WRITERS, SequenceGaps  # noqa: F401 (re-exported)
from lingbot_ros.ros.image_cdr import NotPlainCdr, parse_image
from lingbot_ros.ros.reasons import Level, Rejection
from lingbot_ros.ros.worker import Frame
from lingbot_ros.streaming.choices import InputTransport, QosReliability
from lingbot_ros.streaming.parameters import Params, SPEC
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from rclpy.subscription import Subscription
from sensor_msgs.msg import CompressedImage, Image


class Intake:
    """The image callbacks of the node's cameras, and the subscriptions that call them."""

    def __init__(self, node: Node, converter: Callable[[], Any], queue: Callable[[], Any],
                 params: Callable[[], Optional[Params]], report: Callable[..., None],
                 memory_for: Callable[[CameraStream, tuple], None]) -> None:
        """Read the node's current converter, frame queue and parameters through callables."""
        self._node = node  # its logger, and the factory of the subscriptions
        self._converter, self._queue, self._params = converter, queue, params
        self._report = report          # the worker sink's throttled per-camera log
        self._memory_for = memory_for  # re-estimates device memory at a camera's first frame

    def subscribe(self, cameras: list, inputs: Params, group: CallbackGroup, into: list) -> None:
        """Subscribe each camera's topic (appended to ``into`` one by one, as made)."""
        qos = QoSProfile(depth=inputs.qos_depth, history=HistoryPolicy.KEEP_LAST,
                         reliability=(ReliabilityPolicy.BEST_EFFORT
                                      if inputs.qos_reliability == QosReliability.BEST_EFFORT
                                      else ReliabilityPolicy.RELIABLE))
        compressed = inputs.input_transport == InputTransport.COMPRESSED
        for cam, topic in zip(cameras, inputs.camera_topics):
            if compressed:  # image_transport's naming: the resolved base topic + /compressed
                name = self._node.resolve_topic_name(topic).rstrip('/') + '/compressed'
                kind = CompressedImage
            else:
                name, kind = topic, Image
            # a new subscription numbers its samples anew; the stamp gate and the size stay
            cam.intake.gaps = SequenceGaps()
            sub = self._node.create_subscription(
                kind, name, image_callback(self.on_image, cam, compressed), qos,
                callback_group=group, raw=not compressed)
            cam.topic = sub.topic_name
            into.append(sub)

    def on_image(self, cam: CameraStream, msg: Any, compressed: bool,
                 info: Optional[dict] = None) -> None:
        """Take one image: count, convert, admit its stamp, hand it to the worker's queue."""
        now, clock_ns = time.monotonic(), self._node.get_clock().now().nanoseconds
        queue = self._queue()  # the activation's queue, for this whole frame
        gate = cam.intake
        cam.counters.on_lost(gate.gaps.observe(info))
        cam.counters.on_received(now)
        try:
            if not compressed:
                msg = read_image(msg)
            stamp = messages.stamp_ns(msg.header.stamp)
            converter = self._converter()
            rgb = converter.compressed(msg) if compressed else converter.image(msg)
        except ImageRejected as exc:
            cam.counters.on_rejected(exc.reason)
            self._report(cam, exc.reason, f'image rejected: {exc}', Level.WARN)
            return
        cam.counters.on_converted((clock_ns - stamp) / 1e6 if stamp else None,
                                  (time.monotonic() - now) * 1e3)
        last = gate.last_stamp
        params = self._params()
        window_s = params.reorder_window_s if params is not None else \
            SPEC['reorder_window_s'].default
        verdict = gate.admit(stamp, int(round(window_s * 1e9)))
        if verdict == StampVerdict.OUT_OF_ORDER:
            cam.counters.on_rejected(Rejection.OUT_OF_ORDER)
            self._report(cam, Rejection.OUT_OF_ORDER,
                         f'stamp {stamp} is {(last - stamp) / 1e6:.1f} ms older than the '
                         f'newest frame: dropped as out of order (a jump back of more than '
                         f'reorder_window_s = {window_s:g} s starts a new session)', Level.WARN)
            return
        if verdict == StampVerdict.DUPLICATE:
            cam.counters.on_rejected(Rejection.DUPLICATE_STAMP)
            self._report(cam, Rejection.DUPLICATE_STAMP, f'duplicate stamp {stamp} rejected',
                         Level.WARN)
            return
        if verdict == StampVerdict.BACKWARD:
            cam.counters.on_stamp_reset()
            cleared = queue.clear(cam.index)
            if cleared:
                cam.counters.on_dropped(cleared)
            cam.pending_reset.set()
            self._node.get_logger().warning(
                f'[{cam.name}] stamp jumped backwards by {(last - stamp) / 1e9:.3f} s, more '
                f'than reorder_window_s = {window_s:g} s (looped bag or restarted source): '
                "resetting this camera's session; the next frames start a new map")
        if gate.input_hw is None:  # the first frame of this camera: now its size is known
            gate.input_hw = tuple(rgb.shape[:2])
            self._memory_for(cam, gate.input_hw)
        dropped = queue.put(Frame(cam.index, rgb, stamp, now, msg.header.frame_id))
        if dropped is not None:
            cam.counters.on_dropped()
        queue.hand_over()


def read_image(sample: Any) -> Any:
    """
    Return a raw subscription's sample as an Image (a view of its bytes where it can be).

    Bytes in an encapsulation :func:`parse_image` does not read become a message the usual
    way; bytes that are not an Image at all are rejected as truncated.
    """
    if not isinstance(sample, (bytes, bytearray, memoryview)):
        return sample  # already a message (a caller that did not subscribe raw)
    try:
        return parse_image(sample)
    except NotPlainCdr:
        pass
    try:
        return deserialize_message(bytes(sample), Image)
    except Exception as exc:  # noqa: BLE001 (rclpy raises plain exceptions here)
        raise TruncatedData(f'a sample of {len(sample)} bytes is no sensor_msgs/Image: '
                            f'{exc}') from None


def image_callback(on_image: Callable, cam: CameraStream, compressed: bool) -> Callable:
    """
    Bind a camera to the image callback; with the sample's MessageInfo where rclpy has it.

    rclpy hands ``MessageInfo`` (publisher GID and sequence number, which count the frames
    lost before the node) to callbacks that take two arguments; older releases do not.
    """
    if hasattr(Subscription, 'CallbackType'):
        return lambda msg, info: on_image(cam, msg, compressed, info)
    return lambda msg: on_image(cam, msg, compressed)
