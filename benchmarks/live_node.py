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

r"""
The live path as a robot gets it: the node in its own process, cameras over DDS, counted beside.

Starts ``lingbot_node`` (a parameter file plus ``--set name:=value`` overrides), waits until
it is active, then starts one ``lingbot-ros-play`` per camera at ``--rate`` on its own topic.
This process subscribes like any other node: best effort, depth 5, to every camera topic
(the independent count of what was on the wire), reliably to each camera's ``pose`` (one
per processed frame) and to its last message of a frame (``points`` when published, else
``camera_info``) and to ``/diagnostics``. Per block of ``--block`` frames of each camera (by
stamp, after ``--warmup``) it reports the frames the counter saw, those processed, the
end-to-end latency from the image stamp to the pose and to the frame's last message
(p50 / p99), the node's step p50 / p99 and device memory from ``/diagnostics``, and the
image stamp to this process's own callback (what DDS and rclpy cost any subscriber in the same
run: the floor of the node's ``arrival`` stage); at the end
the node's own received / lost / dropped totals against the counter's. Writes
``PREFIX.json`` and ``PREFIX.txt``; asserts nothing. A second process subscribes like an
RViz beside the robot to depth, camera_info, path and the map (the node builds those only
while someone listens; ``--no-viewer`` leaves them unread). With ``--record NAME --config
CONFIG`` the run's figures also go into ``results/live.json`` under NAME
(``results_file.py``). Example::

    python benchmarks/live_node.py --set preset:=release --set dtype:=bfloat16 \\
        --set publish_depth:=true --set publish_points:=true --set publish_map:=true \\
        --rate 15 --frames 450 --size 640x480 --out /tmp/live_15hz \\
        --record 15hz --config shipped
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional

from lingbot_ros.ros.counters import Stage
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file  # noqa: E402,I100 (the results file of the live runs)

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / 'shared' / 'data' / 'courthouse'
NODE = 'lingbot_node'


@dataclass
class CameraRecord:
    """What this process saw of one camera (written by its own executor thread only)."""

    name: str
    topic: str
    stamps: list = field(default_factory=list)        # input stamps seen by the counter
    image_at: dict = field(default_factory=dict)      # stamp -> receive time of the image here
    pose_at: dict = field(default_factory=dict)       # stamp -> receive time of the pose
    last_at: dict = field(default_factory=dict)       # stamp -> receive time of the last msg
    diag: list = field(default_factory=list)          # (time, {key: value}) snapshots


def _scripts_dir() -> Path:
    return Path(sys.executable).parent


def _node_cmd(args: argparse.Namespace, topics: list, names: list) -> list:
    exe = _scripts_dir() / NODE
    cmd = [str(exe) if exe.exists() else sys.executable, '--ros-args']
    if not exe.exists():
        cmd[1:1] = ['-m', 'lingbot_ros.ros.cli']
    if args.params:
        cmd += ['--params-file', str(args.params)]
    cmd += ['-p', 'camera_topics:=[' + ','.join(topics) + ']']
    if len(names) > 1:
        cmd += ['-p', 'camera_names:=[' + ','.join(names) + ']']
    for item in args.set:
        cmd += ['-p', item]
    return cmd


def _player_cmd(args: argparse.Namespace, topic: str) -> list:
    exe = _scripts_dir() / 'lingbot-ros-play'
    cmd = [str(exe)] if exe.exists() else [sys.executable, '-m', 'lingbot_ros.tools.play']
    cmd += [str(args.source), '--topic', topic, '--rate', str(args.rate), '--loop',
            '--count', str(args.frames), '--quiet', '--wait', '30',
            '--subscribers', '2']  # the counter and the node: nothing sent before both read
    if args.size:
        cmd += ['--size', args.size]
    return cmd


def _pct(values: list, q: float) -> Optional[float]:
    return float(np.percentile(values, q)) if values else None


def _num(text: Any) -> Optional[float]:
    try:
        return float(str(text).split()[0])
    except (ValueError, IndexError):
        return None


def _fmt(value: Optional[float], digits: int = 1) -> str:
    return 'n/a' if value is None else f'{value:.{digits}f}'


def _diag_near(snapshots: list, when: float) -> dict:
    """Return the diagnostics snapshot received first after ``when`` (else the last)."""
    for t, values in snapshots:
        if t >= when:
            return values
    return snapshots[-1][1] if snapshots else {}


def stamp_blocks(stamps: list, warmup: int, block: int) -> list:
    """Return (first frame, stamps) per block after the warm-up; a short last one is left out."""
    kept = sorted(stamps)[warmup:]
    parts = [(warmup + i, kept[i:i + block]) for i in range(0, len(kept), block)]
    return [(first, part) for first, part in parts if len(part) >= max(2, block // 2)]


def block_rows(record: CameraRecord, warmup: int, block: int, node_diag: list) -> list:
    """Per block of the counter's stamps after the warm-up: processed and latencies."""
    rows = []
    for first, part in stamp_blocks(record.stamps, warmup, block):
        pose_ms = [(record.pose_at[s] - s) / 1e6 for s in part if s in record.pose_at]
        last_ms = [(record.last_at[s] - s) / 1e6 for s in part if s in record.last_at]
        # the same image's stamp to this process's own (bare rclpy) callback: what DDS and
        # rclpy cost any subscriber in this run, the floor of the node's arrival stage
        here_ms = [(record.image_at[s] - s) / 1e6 for s in part if s in record.image_at]
        end = max(record.pose_at.get(s, 0) for s in part) or part[-1]
        d = _diag_near(record.diag, end / 1e9)
        n = _diag_near(node_diag, end / 1e9)
        rows.append({
            'first_frame': first, 'frames': len(part), 'processed': len(pose_ms),
            'pose_ms_p50': _pct(pose_ms, 50), 'pose_ms_p99': _pct(pose_ms, 99),
            'last_msg_ms_p50': _pct(last_ms, 50), 'last_msg_ms_p99': _pct(last_ms, 99),
            'counter_arrival_ms_p50': _pct(here_ms, 50),
            'counter_arrival_ms_p99': _pct(here_ms, 99),
            'step_ms_p50': _num(d.get('step_ms_p50')), 'step_ms_p99': _num(d.get('step_ms_p99')),
            'model_ms_p50': _num(d.get('model_ms_p50')),
            'queue_wait_ms_p50': _num(d.get('queue_wait_ms_p50')),
            'publish_ms_p50': _num(d.get('publish_ms_p50')),
            'publish_ms_p99': _num(d.get('publish_ms_p99')),
            'node_latency_ms_p50': _num(d.get('latency_ms_p50')),
            'node_latency_ms_p99': _num(d.get('latency_ms_p99')),
            'stage_ms_p50': {st.value: _num(d.get(f'{st.value}_ms_p50')) for st in Stage},
            'stage_ms_p99': {st.value: _num(d.get(f'{st.value}_ms_p99')) for st in Stage},
            'publish_ms_p50_by_output': d.get('publish_ms_p50_by_output', ''),
            'publish_ms_p99_by_output': d.get('publish_ms_p99_by_output', ''),
            'kv_used_mb': _num(d.get('kv_used_mb')),
            'gpu_memory': n.get('gpu_memory', ''),
        })
        row = rows[-1]  # the ROS overhead: image stamp to the last message, less the model
        row['overhead_ms_p50'] = None if row['last_msg_ms_p50'] is None \
            or row['model_ms_p50'] is None else row['last_msg_ms_p50'] - row['model_ms_p50']
    return rows


class Counter:
    """This process's own node: the independent count, the outputs, the diagnostics."""

    def __init__(self, records: list, many: bool, last_output: str) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import CameraInfo, Image, PointCloud2
        self._rclpy = rclpy
        rclpy.init(args=['live_counter'])  # not sys.argv: its NAME:=VALUE are the node's
        self.node = rclpy.create_node('live_counter')
        self.records = records
        self.node_status: dict = {}
        self.node_diag: list = []  # (time, values) of the node status
        sensor = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT,
                            history=HistoryPolicy.KEEP_LAST)
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE,
                              history=HistoryPolicy.KEEP_LAST)
        last_type = PointCloud2 if last_output == 'points' else CameraInfo
        for rec in records:
            prefix = f'/{NODE}/{rec.name}/' if many else f'/{NODE}/'
            self.node.create_subscription(Image, rec.topic, self._on_image(rec), sensor)
            self.node.create_subscription(PoseStamped, prefix + 'pose',
                                          self._on_output(rec.pose_at), reliable)
            # the node publishes points and depth with depth 1, reliable
            self.node.create_subscription(last_type, prefix + last_output,
                                          self._on_output(rec.last_at),
                                          QoSProfile(depth=1,
                                                     reliability=ReliabilityPolicy.RELIABLE))
        self.node.create_subscription(DiagnosticArray, '/diagnostics', self._on_diag, reliable)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception:  # noqa: BLE001,S110 (shutdown)
            pass

    @staticmethod
    def _stamp(msg: Any) -> int:
        return int(msg.header.stamp.sec) * 10**9 + int(msg.header.stamp.nanosec)

    def _on_image(self, rec: CameraRecord):
        def cb(msg: Any) -> None:
            now = time.time_ns()
            stamp = self._stamp(msg)
            rec.stamps.append(stamp)
            rec.image_at.setdefault(stamp, now)
        return cb

    def _on_output(self, into: dict):
        def cb(msg: Any) -> None:
            into.setdefault(self._stamp(msg), time.time_ns())
        return cb

    def _on_diag(self, msg: Any) -> None:
        now = time.time()
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            values['_level'] = int.from_bytes(status.level, 'little') \
                if isinstance(status.level, bytes) else int(status.level)
            values['_message'] = status.message
            if status.name.endswith(': node') or status.name.endswith(' node'):
                self.node_status = values
                self.node_diag.append((now, values))
                continue
            for rec in self.records:
                if re.search(rf'camera {re.escape(rec.name)}$', status.name):
                    rec.diag.append((now, values))

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        self._rclpy.try_shutdown()


def _wait_active(counter: Counter, node: subprocess.Popen, timeout: float) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if node.poll() is not None:
            raise SystemExit(f'the node exited with {node.returncode} before it was active')
        if counter.node_status.get('state') == 'active' or \
                str(counter.node_status.get('_message', '')).startswith('active'):
            return time.monotonic() - t0
        time.sleep(0.2)
    raise SystemExit(f'the node was not active after {timeout:.0f} s')


def _profile(args: argparse.Namespace, pid: int, rec: CameraRecord) -> None:
    """
    After the warm-up, sample the node with py-spy by thread.

    ``gil``: the GIL holders (PREFIX_gil.txt); ``wall``: every thread at every sample,
    waiting or not (PREFIX_wall.txt).
    """
    while len(rec.stamps) < args.warmup:
        time.sleep(0.2)
    mode = ['--gil'] if args.profile_mode == 'gil' else ['--idle']
    subprocess.run([args.py_spy, 'record', '--pid', str(pid), '--duration',
                    str(args.profile_seconds), '--threads', *mode, '--format', 'raw', '-o',
                    f'{args.out}_{args.profile_mode}.txt'],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(args.out + '_dump.txt', 'w') as fh:
        subprocess.run([args.py_spy, 'dump', '--pid', str(pid)], stdout=fh,
                       stderr=subprocess.STDOUT)


def processed_hz(record: CameraRecord, warmup: int) -> Optional[float]:
    """
    Poses a second over the frames after the warm-up, as this process saw them arrive.

    The node's own ``processed_rate_hz`` is read from its last ``/diagnostics``, sent after
    the players stopped, when its meter has begun to decay towards 0 (a 30 Hz run that
    processed 20.5 frames a second in every block read 14.7 there).
    """
    times = sorted(record.pose_at[s] for s in sorted(record.stamps)[warmup:]
                   if s in record.pose_at)
    if len(times) < 2 or times[-1] <= times[0]:
        return None
    return (len(times) - 1) / ((times[-1] - times[0]) / 1e9)


def _totals(rec: CameraRecord, warmup: int) -> dict:
    d = rec.diag[-1][1] if rec.diag else {}
    received = _num(d.get('frames_received'))
    counted = len(rec.stamps)
    return {
        'counter_received': counted,
        'node_received': received,
        'node_received_share': (received / counted) if received is not None and counted else None,
        'node_lost_before_node': _num(d.get('frames_lost_before_node')),
        'node_dropped': _num(d.get('frames_dropped')),
        'node_rejected': _num(d.get('frames_rejected')),
        'node_processed': _num(d.get('frames_processed')),
        'poses_received': len(rec.pose_at),
        'processed_hz_after_warmup': processed_hz(rec, warmup),
        'node_processed_rate_hz_at_end': _num(d.get('processed_rate_hz')),
        'input_rate_hz': _num(d.get('input_rate_hz')),
        'level': d.get('_level'), 'message': d.get('_message'),
    }


VIEWED = ('depth', 'camera_info', 'path', 'map_points')  # what an RViz beside the robot reads


def viewer(prefixes: list) -> int:
    """
    Subscribe like an RViz beside the robot to depth, camera_info, path and the map; count.

    Runs in a process of its own (``--viewer PREFIX...``), so that receiving a 10 MB map
    every second does not delay the counter's timing of poses. The node builds those
    outputs only while someone subscribes; without this, a benchmark would measure a node
    that skips them. Prints the counts as JSON at SIGINT.
    """
    import rclpy
    from nav_msgs.msg import Path as PathMsg
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import CameraInfo, Image, PointCloud2
    rclpy.init(args=['live_viewer'])
    node = rclpy.create_node('live_viewer')
    kinds = {'depth': Image, 'camera_info': CameraInfo, 'path': PathMsg,
             'map_points': PointCloud2}
    counts = {f'{prefix}{name}': 0 for prefix in prefixes for name in VIEWED}
    for topic in counts:
        durable = topic.endswith('map_points')
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                         durability=DurabilityPolicy.TRANSIENT_LOCAL if durable
                         else DurabilityPolicy.VOLATILE)

        def count(msg: Any, topic: str = topic) -> None:
            counts[topic] += 1
        node.create_subscription(kinds[topic.rsplit('/', 1)[1]], topic, count, qos)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.is_set():
        rclpy.spin_once(node, timeout_sec=0.1)
    print(json.dumps(counts), flush=True)
    node.destroy_node()
    rclpy.shutdown()
    return 0


def _stop_viewer(proc: Optional[subprocess.Popen]) -> dict:
    if proc is None:
        return {}
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=10)
        return json.loads(out.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        proc.kill()
        return {}


def run(args: argparse.Namespace) -> dict:
    """Start node, counter and players; collect; stop everything; return the report."""
    names = [f'cam{i}' for i in range(args.cameras)] if args.cameras > 1 else ['camera']
    topics = [f'/live/{n}/image_raw' for n in names]
    records = [CameraRecord(n, t) for n, t in zip(names, topics)]
    points = [s.split(':=', 1)[1] for s in args.set if s.startswith('publish_points:=')]
    last_output = 'points' if points and points[-1] == 'true' else 'camera_info'  # last wins
    counter = Counter(records, args.cameras > 1, last_output)
    log = open(args.node_log, 'w') if args.node_log else subprocess.DEVNULL
    started = time.monotonic()
    node = subprocess.Popen(_node_cmd(args, topics, names), stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    players: list = []
    viewing = None
    prefixes = [f'/{NODE}/{n}/' for n in names] if args.cameras > 1 else [f'/{NODE}/']
    try:
        active_s = _wait_active(counter, node, args.start_timeout)
        if args.viewer:
            viewing = subprocess.Popen([sys.executable, __file__, '--viewer', *prefixes],
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                       text=True)
        if not Path(args.source).exists():
            raise SystemExit(f'{args.source}: no such source to play')
        player_log = open(args.node_log + '.players', 'w') if args.node_log else None
        players = [subprocess.Popen(_player_cmd(args, t), stdout=player_log or subprocess.DEVNULL,
                                    stderr=subprocess.STDOUT) for t in topics]
        if args.profile_seconds > 0:
            threading.Thread(target=_profile, args=(args, node.pid, records[0]),
                             daemon=True).start()
        deadline = time.monotonic() + args.frames / args.rate + 60.0
        while any(p.poll() is None for p in players) and time.monotonic() < deadline:
            time.sleep(0.5)
            failed = [p.returncode for p in players if p.poll() not in (None, 0)]
            if failed:
                raise SystemExit(f'a player exited with {failed[0]} (see {args.node_log}.players)')
            if node.poll() is not None:
                raise SystemExit(f'the node exited with {node.returncode} during the run')
        time.sleep(3.0)  # the last frames' outputs and one more /diagnostics
        node_status = dict(counter.node_status)
    finally:
        for p in players:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGINT)
            try:
                node.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
        counter.close()
        viewed = _stop_viewer(viewing)
    return {
        'command': ' '.join(sys.argv), 'date': time.strftime('%Y-%m-%d %H:%M:%S %Z'),
        'rate_hz': args.rate, 'cameras': args.cameras, 'frames_per_camera': args.frames,
        'size': args.size, 'warmup': args.warmup, 'block': args.block,
        'seconds_to_active': active_s, 'run_seconds': time.monotonic() - started,
        'node': {k: v for k, v in node_status.items() if not k.startswith('_')},
        'viewer': viewed,  # messages of the large outputs a second subscriber received
        'cameras_report': {rec.name: {'totals': _totals(rec, args.warmup),
                                      'blocks': block_rows(rec, args.warmup, args.block,
                                                           counter.node_diag)}
                           for rec in records},
    }


def text_report(report: dict) -> str:
    """Write the table a person reads: totals per camera, then one line per block."""
    out = [f"{report['date']}  {report['cameras']} camera(s) at {report['rate_hz']:g} Hz, "
           f"{report['frames_per_camera']} frames each, {report['size'] or 'source size'}; "
           f"active after {report['seconds_to_active']:.1f} s",
           f"node: {report['node'].get('startup', '')}"]
    if report.get('viewer'):
        out.append('viewer beside (an RViz): ' + ', '.join(
            f'{topic} {n}' for topic, n in report['viewer'].items()))
    for name, cam in report['cameras_report'].items():
        t = cam['totals']
        share = t['node_received_share']
        out.append(
            f"[{name}] counter saw {t['counter_received']}, node received "
            f"{_fmt(t['node_received'], 0)} ({_fmt(None if share is None else 100 * share)} %), "
            f"lost before node {_fmt(t['node_lost_before_node'], 0)}, dropped in queue "
            f"{_fmt(t['node_dropped'], 0)}, rejected {_fmt(t['node_rejected'], 0)}, processed "
            f"{_fmt(t['node_processed'], 0)} (poses seen {t['poses_received']}), processed "
            f"{_fmt(t['processed_hz_after_warmup'], 2)} Hz after the warm-up")
        out.append('  frames      n  proc  pose p50/p99 ms  last p50/p99 ms  step p50/p99 ms  '
                   'model  wait  publish p50/p99  last-model  device memory')
        for b in cam['blocks']:
            out.append(f"  {b['first_frame']:>6} {b['frames']:>6} {b['processed']:>5}  "
                       f"{_fmt(b['pose_ms_p50']):>6}/{_fmt(b['pose_ms_p99']):<7}  "
                       f"{_fmt(b['last_msg_ms_p50']):>6}/{_fmt(b['last_msg_ms_p99']):<7}  "
                       f"{_fmt(b['step_ms_p50']):>6}/{_fmt(b['step_ms_p99']):<7}  "
                       f"{_fmt(b.get('model_ms_p50')):>5} {_fmt(b.get('queue_wait_ms_p50')):>5}  "
                       f"{_fmt(b.get('publish_ms_p50')):>6}/{_fmt(b.get('publish_ms_p99')):<7}  "
                       f"{_fmt(b.get('overhead_ms_p50')):>9}  {b['gpu_memory']}")
            stages = b.get('stage_ms_p50') or {}
            if any(v is not None for v in stages.values()):
                out.append('         stages p50 ms: ' + ', '.join(
                    f'{k} {_fmt(v)}' for k, v in stages.items()) +
                    f"; the counter's own arrival {_fmt(b.get('counter_arrival_ms_p50'))}")
            tails = b.get('stage_ms_p99') or {}
            if any(v is not None for v in tails.values()):  # which stage makes the tail
                out.append('         stages p99 ms: ' + ', '.join(
                    f'{k} {_fmt(v)}' for k, v in tails.items()) +
                    f"; the counter's own arrival {_fmt(b.get('counter_arrival_ms_p99'))}")
            if b.get('publish_ms_p50_by_output'):
                out.append(f"         publish p50 ms: {b['publish_ms_p50_by_output']}; "
                           f"p99: {b['publish_ms_p99_by_output']}")
    return '\n'.join(out)


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    p.add_argument('--params', type=Path, default=None, help='node parameter file')
    p.add_argument('--no-viewer', dest='viewer', action='store_false',
                   help='no second subscriber to depth, camera_info, path and the map (the '
                        'node then skips building them)')
    p.add_argument('--set', action='append', default=[], metavar='NAME:=VALUE',
                   help='node parameter override (repeatable)')
    p.add_argument('--source', default=str(DEFAULT_SOURCE), help='what lingbot-ros-play plays')
    p.add_argument('--size', default='640x480', help="frame size WIDTHxHEIGHT ('' keeps it)")
    p.add_argument('--rate', type=float, default=15.0, help='frames per second per camera')
    p.add_argument('--cameras', type=int, default=1)
    p.add_argument('--frames', type=int, default=900, help='frames per camera')
    p.add_argument('--warmup', type=int, default=150, help='frames left out of the blocks')
    p.add_argument('--block', type=int, default=250, help='frames per block')
    p.add_argument('--start-timeout', type=float, default=300.0)
    p.add_argument('--node-log', default='', help="file for the node's output")
    p.add_argument('--out', required=True, help='PREFIX: writes PREFIX.json and PREFIX.txt')
    p.add_argument('--profile-seconds', type=int, default=0,
                   help='after the warm-up, py-spy the node this long (see --profile-mode)')
    p.add_argument('--py-spy', default='py-spy', help='the py-spy executable')
    p.add_argument('--profile-mode', choices=('gil', 'wall'), default='gil',
                   help='py-spy: only the GIL holder, or every thread (waiting too)')
    p.add_argument('--record', metavar='NAME', default=None,
                   help='also put the run in the live results file under NAME (e.g. 15hz, '
                        '30hz, 2cam_15hz), in place of an entry of that name')
    p.add_argument('--config', default=None,
                   help=f"with --record: '{results_file.SHIPPED}' when the node ran its own "
                        'parameter file alone, else a name for what --params / --set changed')
    p.add_argument('--results', type=Path, default=results_file.LIVE_FILE,
                   help='the live results file (default: %(default)s)')
    p.add_argument('--commit', default=None, help="with --record: our commit (default: git's "
                   'HEAD here; pass it where the copy of .git may be stale)')
    p.add_argument('--gpu', default=None, help="with --record: the GPU (default: nvidia-smi's "
                   'name)')
    args = p.parse_args(argv)
    if args.record and not args.config:
        p.error('--record needs --config')
    return args


def record(args: argparse.Namespace, report: dict) -> int:
    """Put the run's figures into the live results file; 1 (and why) if they do not fit."""
    commit = args.commit or results_file.head_commit(ROOT)
    try:
        if commit is None:
            raise results_file.SchemaError('no git commit here: pass --commit')
        run = results_file.live_run(report, args.record, args.config,
                                    args.gpu or results_file.gpu_name(), commit)
        results_file.record(args.results, run)
    except results_file.SchemaError as exc:
        print(f'live_node: not recorded in {args.results}: {exc}', file=sys.stderr)
        return 1
    print(f'live_node: recorded {args.record} ({args.config}) in {args.results}')
    return 0


def main(argv: Optional[list] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ['--viewer']:
        return viewer(argv[1:])
    args = parse_args(argv)
    os.environ.setdefault('ROS_AUTOMATIC_DISCOVERY_RANGE', 'LOCALHOST')
    report = run(args)
    write_report(args.out, report, text_report)
    return record(args, report) if args.record else 0


def write_report(prefix: str, report: dict, to_text: Callable[[dict], str]) -> None:
    """Write ``PREFIX.json`` (the report) and ``PREFIX.txt`` (its text), and print the text."""
    text = to_text(report)
    Path(prefix + '.json').write_text(json.dumps(report, indent=1))
    Path(prefix + '.txt').write_text(text + '\n')
    print(text)


if __name__ == '__main__':
    sys.exit(main())
