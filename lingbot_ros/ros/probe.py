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
A small rclpy client of a running node: publish, collect, call services, read diagnostics.

The demo uses it to print what the node publishes; the DDS tests use it to drive the
node from another process. It owns its own rclpy context, so several can live in one
process with different domains.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from diagnostic_msgs.msg import DiagnosticArray
import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy

RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE,
                      history=HistoryPolicy.KEEP_LAST)


class Probe:
    """Owns a context, one node and an executor; every wait spins that executor."""

    def __init__(self, name: str = 'lingbot_probe', domain_id: Optional[int] = None) -> None:
        self.context = Context()
        kwargs = {} if domain_id is None else {'domain_id': domain_id}
        rclpy.init(context=self.context, **kwargs)
        self.node = rclpy.create_node(name, context=self.context)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)

    def collect(self, msg_type: Any, topic: str, qos: QoSProfile = RELIABLE) -> list:
        """Subscribe and return the list the messages are appended to."""
        box: list = []
        self.node.create_subscription(msg_type, topic, box.append, qos)
        return box

    def wait_for_publishers(self, topic: str, count: int = 1, timeout: float = 30.0) -> bool:
        """Spin until this probe's subscription(s) on ``topic`` matched ``count`` publishers."""
        subs = [s for s in self.node.subscriptions if s.topic_name == topic]
        return bool(subs) and self.spin_until(
            lambda: all(s.get_publisher_count() >= count for s in subs), timeout)

    def publisher(self, msg_type: Any, topic: str, qos: QoSProfile = RELIABLE) -> Any:
        return self.node.create_publisher(msg_type, topic, qos)

    def spin_for(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=min(0.05, max(0.0, end - time.monotonic())))

    def spin_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Spin until ``predicate()`` holds; return whether it did before ``timeout``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            self.executor.spin_once(timeout_sec=0.05)
        return bool(predicate())

    def wait_for_subscribers(self, publisher: Any, count: int = 1, timeout: float = 30.0) -> bool:
        return self.spin_until(lambda: publisher.get_subscription_count() >= count, timeout)

    def call(self, srv_type: Any, name: str, request: Any, timeout: float = 30.0) -> Any:
        """Call a service; return the response, or None when it did not answer in time."""
        client = self.node.create_client(srv_type, name)
        future = None
        try:
            if not self.spin_until(client.service_is_ready, timeout):
                return None
            future = client.call_async(request)
            self.spin_until(future.done, timeout)
            return future.result() if future.done() else None
        finally:
            if future is not None and not future.done():
                future.cancel()  # no answer will be read: nothing left to report at exit
            self.node.destroy_client(client)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


def status_of(array: DiagnosticArray, name: str) -> Optional[tuple]:
    """Return ``(level, message, {key: value})`` of the named status, or None."""
    for status in array.status:
        if status.name == name:
            level = status.level[0] if isinstance(status.level, bytes) else int(status.level)
            return level, status.message, {kv.key: kv.value for kv in status.values}
    return None
