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
The node's executor: waits while its thread pool is busy, runs coroutines, raises errors.

rclpy's MultiThreadedExecutor (ros2/rclpy#1452, up to the Kilted release) re-yields a task
that waits in its pool's queue without sleeping; with the GPU worker holding the GIL the node
then loses a third of a 15 Hz camera's frames before it takes them. This CPU test does not
reproduce that busy loop
(it needs the GIL held by another thread while the wait set keeps turning ready); it checks
what ours promises: every pool thread held inside a callback while a timer keeps firing, the
spinning thread sleeps instead of looping, and the waiting task runs once a thread is free.
"""

import threading
import time

from conftest import dds_domain
from lingbot_ros.ros.executor import PoolExecutor, QUEUED_WAIT_S
from lingbot_ros.streaming.parameters import SPEC
import pytest
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.context import Context
from rclpy.task import Future

DOMAIN = dds_domain(59)
THREADS = 2


@pytest.fixture()
def ctx():
    context = Context()
    rclpy.init(context=context, domain_id=DOMAIN)
    yield context
    context.try_shutdown()


class Counting(PoolExecutor):
    """The node's executor, counting how often the spinning thread asks for work."""

    turns = 0

    def wait_for_ready_callbacks(self, *args, **kwargs):
        self.turns += 1
        return super().wait_for_ready_callbacks(*args, **kwargs)


def test_the_executor_is_no_parameter():
    assert 'executor' not in SPEC  # one way of running the node: this executor


def test_a_full_pool_makes_the_spinning_thread_wait(ctx):
    node = rclpy.create_node('executor_full_pool', context=ctx)
    release, started = threading.Event(), threading.Semaphore(0)
    holders = ReentrantCallbackGroup()

    def hold():
        started.release()
        release.wait(10)
    # one one-shot timer per pool thread, each held inside its callback
    shots = []
    for _ in range(THREADS):
        shots.append(node.create_timer(0.01, lambda: (shots[0].cancel(), hold()),
                                       callback_group=holders))
    ticks = []
    node.create_timer(0.005, lambda: ticks.append(1),
                      callback_group=MutuallyExclusiveCallbackGroup())
    executor = Counting(THREADS, context=ctx)
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        for _ in range(THREADS):
            assert started.acquire(timeout=10)
        for shot in shots:
            shot.cancel()
        time.sleep(0.05)
        ticks.clear()  # ticks that ran before the pool was full
        turns0, t0 = executor.turns, time.monotonic()
        time.sleep(1.0)
        rate = (executor.turns - turns0) / (time.monotonic() - t0)
        # one turn per QUEUED_WAIT_S at most while the ticking task waits for a thread
        assert rate < 2.5 / QUEUED_WAIT_S, rate
        assert not ticks  # no thread was free to run it
        release.set()
        deadline = time.monotonic() + 5
        while not ticks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ticks  # once a thread is free, the waiting task runs
    finally:
        release.set()
        executor.shutdown()
        node.destroy_node()


def test_a_coroutine_waiting_on_a_future_is_not_polled_hot(ctx):
    node = rclpy.create_node('executor_coroutine', context=ctx)
    executor = Counting(THREADS, context=ctx)
    executor.add_node(node)
    future = Future(executor=executor)
    future.add_done_callback(lambda _: None)  # as ~/reset does: completion wakes the executor
    done = []

    async def waiter():
        done.append(await future)
    executor.create_task(waiter)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    try:
        time.sleep(0.2)
        turns0, t0 = executor.turns, time.monotonic()
        time.sleep(1.0)
        rate = (executor.turns - turns0) / (time.monotonic() - t0)
        assert rate < 1000, rate  # a hot loop turns tens of thousands of times a second
        future.set_result(7)
        deadline = time.monotonic() + 5
        while not done and time.monotonic() < deadline:
            time.sleep(0.01)
        assert done == [7]
    finally:
        executor.shutdown()
        node.destroy_node()


def test_an_exception_in_a_callback_reaches_the_spinning_thread(ctx):
    node = rclpy.create_node('executor_raises', context=ctx)
    timer = None

    def boom():
        timer.cancel()
        raise ValueError('from a callback')
    timer = node.create_timer(0.01, boom)
    executor = PoolExecutor(THREADS, context=ctx)
    executor.add_node(node)
    try:
        with pytest.raises(ValueError, match='from a callback'):
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
    finally:
        executor.shutdown()
        node.destroy_node()


def test_an_inline_group_runs_in_the_spinning_thread(ctx):
    """The image callbacks run where the executor spins; the rest go to the pool."""
    node = rclpy.create_node('executor_inline', context=ctx)
    images, others = MutuallyExclusiveCallbackGroup(), MutuallyExclusiveCallbackGroup()
    seen = {'inline': set(), 'pool': set()}
    node.create_timer(0.005, lambda: seen['inline'].add(threading.get_ident()),
                      callback_group=images)
    node.create_timer(0.005, lambda: seen['pool'].add(threading.get_ident()),
                      callback_group=others)
    executor = PoolExecutor(THREADS, context=ctx, inline=[images])
    executor.add_node(node)
    try:
        deadline = time.monotonic() + 5
        while (not seen['inline'] or not seen['pool']) and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.05)
        assert seen['inline'] == {threading.get_ident()}
        assert seen['pool'] and threading.get_ident() not in seen['pool']
    finally:
        executor.shutdown()
        node.destroy_node()
