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
``lingbot_node``: arguments, rclpy init, the spin loop, ordered exit.

The entry point of the ``lingbot_node`` console script (``python -m lingbot_ros.ros.cli``
runs the same). Everything here runs on the main thread: ``main`` spins the executor until
a stop is asked for, then ``_exit`` stops the worker and publishers before the executor,
the node and the context go. The node knows nothing of this module.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from typing import Optional

from lingbot_ros.ros.dds import use_large_image_profile
from lingbot_ros.ros.executor import PoolExecutor
from lingbot_ros.ros.node import EXECUTOR_THREADS, LingbotNode
from lingbot_ros.ros.params_files import yaml_value
from lingbot_ros.ros.shutdown import StopRequest
from lingbot_ros.streaming.parameters import Group, SPECS, Tier
import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.signals import SignalHandlerOptions

EXIT_WAIT_S = 5.0          # at exit, less: launch sends SIGTERM 5 s after its SIGINT
SPIN_POLL_S = 0.1          # the spin loop looks this often whether a stop was asked for
# How long a thread that wants the GIL waits for the one holding it (Python's default: 5 ms).
# The worker lets go of the GIL at every copy and synchronisation with the GPU; each time it
# comes back it waits for whichever other thread (the output thread building points, the
# map thread, the image callbacks) held it meanwhile, up to the whole interval, which then
# adds to the frame's latency. Switching more often costs the CPU-bound threads a few
# microseconds per switch.
GIL_SWITCH_INTERVAL_S = 0.0005


def usage() -> argparse.ArgumentParser:
    """Build the ``lingbot_node --help`` text: how to start it and its parameters, by group."""
    lines = []
    for group in Group:
        specs = [s for s in SPECS if s.group is group]
        lines.append(f'  {group.value}:')
        lines += [f'    {s.name}: {yaml_value(s.default)}'
                  f'{" [restart]" if s.read_only else ""}'
                  for s in specs if s.tier is Tier.MAIN]
        advanced = ', '.join(s.name for s in specs if s.tier is Tier.ADVANCED)
        if advanced:
            lines += textwrap.wrap(f'advanced: {advanced}', 88, initial_indent='    ',
                                   subsequent_indent='      ')
    return argparse.ArgumentParser(
        prog='lingbot_node', formatter_class=argparse.RawDescriptionHelpFormatter,
        description='LingBot-Map streaming 3D reconstruction as a ROS 2 lifecycle node: '
                    'camera images in; poses, path, depth, points and /diagnostics out.',
        epilog='usage with ROS arguments:\n'
               '  ros2 run lingbot_ros lingbot_node --ros-args --params-file lingbot.yaml '
               '-r image:=/camera/image_raw\n'
               '  ros2 launch lingbot_ros lingbot.launch.py image_topic:=/camera/image_raw\n\n'
               'parameters ([restart]: fixed when the node starts; the others apply from the '
               'next frame).\nconfig/lingbot.yaml lists the main ones, config/advanced.yaml '
               'the advanced ones,\nwith their defaults; docs/parameters.md describes each '
               'one.\n' + '\n'.join(lines))


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


def _exit(node: LingbotNode, executor: PoolExecutor, stop: StopRequest) -> None:
    """Stop in order: worker and publishers first, then the executor, node and context."""
    if stop.reason in ('SIGINT', 'SIGTERM'):
        node.get_logger().info(f'{stop.reason}: stopping (worker, then publishers)')
    try:
        node.release(EXIT_WAIT_S)  # the worker ends while the context is still valid
    except Exception as exc:  # noqa: BLE001 (the process exits either way: say why)
        node.get_logger().warning(f'cleanup at exit: {type(exc).__name__}: {exc}')
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == '__main__':
    sys.exit(main())
