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
The executor is never blocked: ~/reset, deactivate and activate while the worker is stuck.

The node runs in this process on the multi-threaded executor ``main`` uses; a probe in
its own context drives it over DDS (loopback, a domain of its own) the way a lifecycle
manager and a user would. The worker's step is held on an event, standing in for a long
first step (graph capture, kernel build): meanwhile diagnostics must keep arriving, the
reset must answer only once it ran, and a deactivate -> activate must never give the
session a second worker thread.
"""

import os
import threading
import uuid

from conftest import dds_domain
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from lingbot_ros.ros import node as node_module
from lingbot_ros.ros.executor import PoolExecutor
from lingbot_ros.ros.node import EXECUTOR_THREADS, LingbotNode
from lingbot_ros.ros.params import camera_names_from_topics
from lingbot_ros.ros.probe import Probe, status_of
import numpy as np
import pytest
import rclpy
from rclpy.context import Context
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image
from std_srvs.srv import Trigger

DOMAIN = dds_domain(56)
# Unique per run: in a shared ROS_DOMAIN_ID other nodes may publish on /diagnostics too,
# and the counts below must be this node's messages only.
RUN = uuid.uuid4().hex[:8]
# Each test's node has its own name and topic: a probe that found an earlier test's
# (destroyed) node still in the DDS discovery cache sent its change_state there and waited
# for an answer that never came.
RUNS = iter(range(1000))


class Gate:
    """Hold the worker inside ``session.submit`` until released."""

    def __init__(self, session):
        self.entered, self.release = threading.Event(), threading.Event()
        real = session.submit

        def submit(image, stamp):
            self.entered.set()
            self.release.wait(60)
            return real(image, stamp)
        session.submit = submit


@pytest.fixture()
def rig(monkeypatch):
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    monkeypatch.setattr(node_module, 'STOP_WAIT_S', 0.5)
    run = next(RUNS)
    name, topic = f'lingbot_threads_{RUN}_{run}', f'/threads_{RUN}_{run}/image'
    ctx = Context()
    rclpy.init(context=ctx, domain_id=DOMAIN)
    overrides = [Parameter('image_size', value=56), Parameter('scale_frames', value=1),
                 Parameter('diagnostics_period', value=0.1),
                 Parameter('qos_reliability', value='reliable'),
                 Parameter('queue_size', value=4),
                 Parameter('camera_topics', value=[topic]),
                 Parameter('autostart', value=False)]
    node = LingbotNode(context=ctx, parameter_overrides=overrides,
                       cli_args=['--ros-args', '-r', f'__node:={name}'])
    executor = PoolExecutor(EXECUTOR_THREADS, context=ctx,
                            inline=node.inline_groups)  # as lingbot_node does
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    probe = Probe('threads_probe', domain_id=DOMAIN)
    box = {'node': node, 'probe': probe, 'diags': probe.collect(DiagnosticArray, '/diagnostics'),
           'image': probe.publisher(Image, topic), 'name': name,
           'camera_status': f'/{name}: camera {camera_names_from_topics([topic])[0]}'}
    try:
        yield box
    finally:
        for gate in box.get('gates', []):
            gate.release.set()
        node.release()
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        probe.close()


def _at(rig, leaf):
    """Return the name of one of this run's node's services or topics."""
    return f"/{rig['name']}/{leaf}"


def _ours(rig):
    """Return the diagnostics arrays this node published (they carry its camera)."""
    return [d for d in rig['diags'] if status_of(d, rig['camera_status']) is not None]


def _transition(rig, transition, timeout=60):
    req = ChangeState.Request(transition=Transition(id=transition))
    res = rig['probe'].call(ChangeState, _at(rig, 'change_state'), req, timeout)
    assert res is not None, 'no answer from change_state'
    return res.success


def _state(rig):
    res = rig['probe'].call(GetState, _at(rig, 'get_state'), GetState.Request(), 30)
    return res.current_state.id


def _frame(stamp_ns):
    msg = Image(height=48, width=64, encoding='rgb8', step=192)
    msg.data = np.random.default_rng(stamp_ns).integers(0, 256, 48 * 64 * 3,
                                                        dtype=np.uint8).tobytes()
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 10 ** 9)
    return msg


def _hold(rig, stamp_ns):
    """Send one frame and hold the worker inside its step."""
    gate = Gate(rig['node'].cameras[0].session)
    rig.setdefault('gates', []).append(gate)
    assert rig['probe'].wait_for_subscribers(rig['image'], 1, 30)
    rig['image'].publish(_frame(stamp_ns))
    assert rig['probe'].spin_until(gate.entered.is_set, 30)
    return gate


def _workers():
    return [t for t in threading.enumerate() if t.name == 'lingbot-worker' and t.is_alive()]


def _call_async(probe, srv, name, request):
    client = probe.node.create_client(srv, name)
    assert probe.spin_until(client.service_is_ready, 30)
    return client.call_async(request)


def test_reset_and_lifecycle_while_the_worker_is_inside_a_long_step(rig):
    probe = rig['probe']
    assert _transition(rig, Transition.TRANSITION_CONFIGURE)
    assert _transition(rig, Transition.TRANSITION_ACTIVATE)

    # ~/reset while the step is held: answered only after the step, diagnostics flow on
    gate = _hold(rig, 1_000_000_000)
    future = _call_async(probe, Trigger, _at(rig, 'reset'), Trigger.Request())
    seen = len(_ours(rig))
    probe.spin_for(1.5)
    assert not future.done()
    assert len(_ours(rig)) - seen >= 5  # every 0.1 s, while the reset waits
    gate.release.set()
    assert probe.spin_until(future.done, 30)
    assert future.result().success and 'reset 1 session' in future.result().message
    assert rig['node'].cameras[0].counters.session_resets == 1

    # deactivate while the step is held: it returns, diagnostics flow, publishers stay
    gate = _hold(rig, 2_000_000_000)
    future = _call_async(probe, ChangeState, _at(rig, 'change_state'), ChangeState.Request(
        transition=Transition(id=Transition.TRANSITION_DEACTIVATE)))
    seen = len(_ours(rig))
    assert probe.spin_until(future.done, 30) and future.result().success
    assert len(_ours(rig)) > seen
    assert _state(rig) == State.PRIMARY_STATE_INACTIVE
    assert len(_workers()) == 1 and rig['node']._retired  # still inside its step
    topics = dict(probe.node.get_topic_names_and_types())
    assert _at(rig, 'pose') in topics  # not destroyed under a running worker

    # activate while the old worker is still inside its step: refused, never a second one
    assert not _transition(rig, Transition.TRANSITION_ACTIVATE)
    assert _state(rig) == State.PRIMARY_STATE_INACTIVE and len(_workers()) == 1

    # once the step ends the worker leaves; its publishers go; activate works again
    gate.release.set()
    assert probe.spin_until(lambda: not _workers(), 30)
    assert probe.spin_until(lambda: not rig['node']._retired, 10)
    assert _transition(rig, Transition.TRANSITION_ACTIVATE)
    assert _state(rig) == State.PRIMARY_STATE_ACTIVE and len(_workers()) == 1
