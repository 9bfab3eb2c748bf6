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
Start-up and exit of ``lingbot_node``: arguments, rclpy init, the spin loop, ordered exit.

Everything here runs on the main thread: ``main`` spins the executor until a stop is
asked for, then ``_exit`` stops the worker and publishers before the executor, the node
and the context go. ``Phases`` and ``process_age`` time the start-up; configure and
activate (the lifecycle callback group) fill them in.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import sys
import time
from typing import Any, Optional, TYPE_CHECKING

from lingbot_ros.ros.dds import use_large_image_profile
from lingbot_ros.ros.executor import PoolExecutor
from lingbot_ros.ros.params import SPECS
from lingbot_ros.ros.shutdown import StopRequest
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.signals import SignalHandlerOptions

if TYPE_CHECKING:
    from lingbot_ros.ros.node import LingbotNode

PROCESS_T0 = time.monotonic()  # where /proc cannot say when the process started
EXIT_WAIT_S = 5.0          # at exit, less: launch sends SIGTERM 5 s after its SIGINT
SPIN_POLL_S = 0.1          # the spin loop looks this often whether a stop was asked for
# How long a thread that wants the GIL waits for the one holding it (Python's default: 5 ms).
# The worker lets go of the GIL at every copy and synchronisation with the GPU; each time it
# comes back it waited for whichever other thread (the output thread building points, the
# map thread, the image callbacks) held it meanwhile, up to the whole interval. On the H200 a
# wall-clock profile put 2 ms per frame into uploading a 900 KB frame and 0.9 ms into one
# 3x3 rotation to quaternion: waiting, not work. Switching more often costs the CPU-bound
# threads a few microseconds per switch.
GIL_SWITCH_INTERVAL_S = 0.0005


def process_age() -> float:
    """Seconds since this process started (Linux /proc; else since this module loaded)."""
    try:
        fields = Path('/proc/self/stat').read_text().rsplit(')', 1)[1].split()
        started = int(fields[19]) / os.sysconf('SC_CLK_TCK')  # field 22: start, in ticks
        uptime = float(Path('/proc/uptime').read_text().split()[0])
        return max(0.0, uptime - started)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - PROCESS_T0


class Phases:
    """
    Where start-up time goes: named phases of configure / activate, in seconds.

    Only the transitions' own time counts: :meth:`resume` at the start of a transition
    drops the wait before it (a lifecycle manager's, or a person's between ``ros2
    lifecycle set`` calls).
    """

    def __init__(self, before: Optional[float] = None) -> None:
        self._t = time.monotonic()
        self.parts: list = [] if before is None else [('process start to node ready', before, {})]

    def resume(self) -> None:
        """Start timing again: the time since the last phase closed is no start-up time."""
        self._t = time.monotonic()

    def mark(self, name: str, inner: Optional[dict] = None) -> None:
        """Close the phase that just ended; ``inner`` splits it further (seconds by name)."""
        now = time.monotonic()
        self.parts.append((name, now - self._t, dict(inner or {})))
        self._t = now

    def text(self) -> str:
        """
        Say e.g. '9.8 s from process start to active: parameters 0.00 s, model 7.10 s ...'.

        The total is the sum of the phases: from process start on the first configure
        (less any wait in unconfigured, reported as ``waited_unconfigured``), from the
        configure on a later one.
        """
        out = []
        for name, seconds, inner in self.parts:
            detail = ', '.join(f'{k} {v:.2f} s' for k, v in inner.items())
            out.append(f'{name} {seconds:.2f} s' + (f' ({detail})' if detail else ''))
        total = sum(seconds for _, seconds, _ in self.parts)
        since = 'process start' if self.parts and self.parts[0][0].startswith('process') \
            else 'configure'
        return f'{total:.1f} s from {since} to active: ' + '; '.join(out)


def usage() -> argparse.ArgumentParser:
    """Build the ``lingbot_node --help`` text: how to start it and where the parameters are."""
    lines = [f'  {s.name} (default {s.default!r}){" [read-only]" if s.read_only else ""}'
             for s in SPECS]
    return argparse.ArgumentParser(
        prog='lingbot_node', formatter_class=argparse.RawDescriptionHelpFormatter,
        description='LingBot-Map streaming 3D reconstruction as a ROS 2 lifecycle node: '
                    'camera images in; poses, path, depth, points and /diagnostics out.',
        epilog='usage with ROS arguments:\n'
               '  ros2 run lingbot_ros lingbot_node --ros-args --params-file lingbot.yaml '
               '-r image:=/camera/image_raw\n'
               '  ros2 launch lingbot_ros lingbot.launch.py image_topic:=/camera/image_raw\n\n'
               'parameters (config/lingbot.yaml documents each one):\n' + '\n'.join(lines))


def main(args: Optional[list] = None) -> int:
    """Entry point of ``lingbot_node``: spin, auto configure + activate by default."""
    from rclpy.utilities import remove_ros_args
    argv = list(sys.argv if args is None else args)
    try:
        own = remove_ros_args(argv)[1:]
        if own:
            usage().parse_args(own)  # --help prints and exits here; unknown flags too
        dds_note = use_large_image_profile()  # before rclpy creates the DDS participant
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        # no rclpy signal handlers: they shut the context down under the running worker and
        # raise KeyboardInterrupt at a second Ctrl-C (inside the cleanup); see shutdown.py
        rclpy.init(args=argv, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:  # noqa: BLE001 (a broken parameter file, a bad remap rule)
        # rcl appends the C source location of the parser ("at /project/src/..."): drop it
        text = ' '.join(str(exc).split()).split(', at /')[0]
        print(f'lingbot_node: cannot start: {text}', file=sys.stderr)
        return 2
    from lingbot_ros.ros.node import EXECUTOR_THREADS, LingbotNode  # node.py imports this
    node = LingbotNode()
    if dds_note:
        node.get_logger().info(dds_note)
    executor = PoolExecutor(EXECUTOR_THREADS, inline=node.inline_groups)
    executor.add_node(node)
    if node.autostart:  # from inside the executor, so diagnostics flow during configure
        starter = None

        def start_once() -> None:
            starter.cancel()
            node.autostart_once()
        starter = node.create_timer(0.0, start_once)  # the lifecycle services' group
    stop = node.stop
    handled = stop.install()
    try:
        while not stop.requested and rclpy.ok():
            executor.spin_once(timeout_sec=SPIN_POLL_S)
    except (KeyboardInterrupt, ExternalShutdownException):
        stop.request('interrupted')
    finally:
        stop.request('the context was shut down')  # publish failures from here: no error
        _exit(node, executor, stop)
        if handled:  # stopped: a late SIGINT / SIGTERM must not kill the exiting process
            stop.ignore_from_now()
    return node.exit_code


def _exit(node: 'LingbotNode', executor: Any, stop: StopRequest) -> None:
    """Stop in order: worker and publishers first, then the executor, node and context."""
    if stop.reason in ('SIGINT', 'SIGTERM'):
        node.get_logger().info(f'{stop.reason}: stopping (worker, then publishers)')
    try:
        node._release(EXIT_WAIT_S)  # the worker ends while the context is still valid
    except Exception as exc:  # noqa: BLE001 (the process exits either way: say why)
        node.get_logger().warning(f'cleanup at exit: {type(exc).__name__}: {exc}')
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()
