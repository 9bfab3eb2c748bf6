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
Soak run through the node's own path, without DDS: messages in, messages out, for hours.

Each frame is a real ``sensor_msgs/Image`` (640x480 by default, rgb8 or yuyv), converted
by the node's ``ImageConverter``, queued and stepped by the node's ``Worker``, and turned
into every message the node publishes with depth and points on (pose, odometry, path
every 0.5 s, TF, camera_info, depth, points) plus the accumulated map in its own thread,
exactly as ``LingbotNode.publish`` builds them; only the DDS write is left out. Every
``--every`` frames it prints the block's step and end-to-end latency p50 / p99 (stamp of
the input to the last message built), model time, device memory and process RSS. Numbers
only; it asserts nothing.
"""

import argparse
import json
import os
import time

from lingbot_ros.ros import messages
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.conventions import MapConvention
from lingbot_ros.ros.convert import ImageConverter
from lingbot_ros.ros.map_thread import MapThread
from lingbot_ros.ros.worker import Frame, FrameQueue, Worker
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.map_cloud import MapCloudConfig
import numpy as np
from sensor_msgs.msg import Image
import torch


def rss_mb() -> float:
    """Resident set size of this process in MB (Linux)."""
    with open('/proc/self/statm') as fh:
        return int(fh.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20


def image_messages(height: int, width: int, encoding: str):
    """Yield an endless pan over a random texture as Image messages."""
    rng = np.random.default_rng(0)
    tex = rng.integers(0, 256, (height + 64, 4 * width, 3), dtype=np.uint8)
    i = 0
    while True:
        x, y = (7 * i) % (3 * width), (3 * i) % 64
        rgb = np.ascontiguousarray(tex[y:y + height, x:x + width])
        if encoding == 'yuyv':
            yuv = np.zeros((height, width, 2), np.uint8)
            yuv[..., 0] = rgb[..., 1]
            yuv[:, 0::2, 1], yuv[:, 1::2, 1] = rgb[:, 0::2, 2], rgb[:, 1::2, 0]
            data, step = yuv.tobytes(), width * 2
        else:
            data, step = rgb.tobytes(), width * 3
        msg = Image(height=height, width=width, encoding=encoding, step=step, data=data)
        msg.header.frame_id = 'soak_camera'
        yield msg
        i += 1


class BuildingSink:
    """The node's publish step without the DDS write: every message is built."""

    def __init__(self, maps: MapThread, path_period: float = 0.5) -> None:
        self.maps = maps
        self.path_period = path_period
        self.path_sent = -1e9
        self.latency_ms: list = []
        self.model_ms: list = []
        self.done_at: dict = {}

    def publish(self, output) -> None:
        cam, result = output.camera, output.result
        pose = messages.map_pose(result, MapConvention.REP103)
        stamp = result.stamp_ns
        pose_msg = messages.pose_stamped(pose, stamp, 'map')
        messages.odometry(pose, stamp, 'map', 'soak_lingbot', cam.track.previous)
        cam.track.add(stamp, pose, pose_msg, 2000)
        now = time.monotonic()
        if now - self.path_sent >= self.path_period:
            self.path_sent = now
            cam.track.path()
        messages.transform(pose, stamp, 'map', 'soak_lingbot')
        messages.camera_info(result, 'soak_camera')
        if result.depth is not None:
            messages.depth_image(result, 'soak_camera')
            messages.point_cloud(result, pose, 'map', 4, 0.0, 50.0)
            if result.is_keyframe:
                self.maps.submit(cam.index, result, pose)
        self.model_ms.append(result.timings.model)
        output.delivered()

    def report(self, cam, topic, text, level) -> None:
        print(f'[{level.value}] {topic.value}: {text}', flush=True)

    def map_restarted(self, cam) -> None:
        cam.track.clear()
        self.maps.clear(cam.index)

    def flush(self, timeout: float) -> bool:
        return True  # sends inline


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[1])
    p.add_argument('--preset', default='tiny')  # the model flags: when --params is not given
    p.add_argument('--device', default='auto')
    p.add_argument('--dtype', default='float32')
    p.add_argument('--frames', type=int, default=10000)
    p.add_argument('--every', type=int, default=1000)
    p.add_argument('--height', type=int, default=480)
    p.add_argument('--width', type=int, default=640)
    p.add_argument('--encoding', default='rgb8', choices=('rgb8', 'yuyv'))
    p.add_argument('--image-size', type=int, default=518)
    p.add_argument('--scale-frames', type=int, default=8)
    p.add_argument('--sliding-window', type=int, default=64)
    p.add_argument('--keyframe-interval', type=int, default=1)
    p.add_argument('--params', default=None,
                   help='a node parameter file (e.g. config/lingbot_8gb.yaml): model and '
                        'stream settings from it instead of the flags above')
    p.add_argument('--cap-gib', type=float, default=0.0,
                   help='cap this process at this much device memory (0: no cap)')
    p.add_argument('--out', default=None)
    args = p.parse_args()
    if args.cap_gib:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.cap_gib * 2**30 / total))
    if args.params:
        import yaml
        from lingbot_ros.ros.params import stream_config
        from lingbot_ros.streaming.parameters import parse
        with open(args.params) as fh:
            params = parse(yaml.safe_load(fh)['/**']['ros__parameters'])
        engine_cfg = EngineConfig.from_parameters(params, torch.cuda.is_available())
        stream_cfg = stream_config(params).replace(with_depth=True)
    else:
        engine_cfg = EngineConfig(preset=args.preset, device=args.device, dtype=args.dtype)
        stream_cfg = StreamConfig(scale_frames=args.scale_frames,
                                  sliding_window=args.sliding_window,
                                  keyframe_interval=args.keyframe_interval,
                                  image_size=args.image_size, with_depth=True)
    engine = Engine.load(engine_cfg)
    session = engine.new_session('soak', stream_cfg)
    estimate = engine.memory_estimate(stream_cfg, (args.height, args.width))
    print(estimate.describe(), flush=True)
    cam = CameraStream(0, 'soak', '/soak/image', session, window=args.every)
    maps = MapThread(1, MapCloudConfig())
    maps.start()
    sink = BuildingSink(maps)
    queue = FrameQueue(1, 1)
    worker = Worker([cam], queue, sink, lambda: session.config)
    converter = ImageConverter(use_cv_bridge=True)
    cuda = engine.device.type == 'cuda'
    print(f'{engine.description} on {engine.device} ({engine.dtype}, {engine.backend.value}); '
          f'{args.width}x{args.height} {args.encoding}; converter: {converter.backend}')
    print(' frames window   step_p50 step_p99  e2e_p50  e2e_p99 model_p50 over_p50  '
          'alloc_MB reserved_MB  peak_MB  rss_MB map_pts kv_window')
    rows, steps, e2e, overhead = [], [], [], []
    for i, msg in enumerate(image_messages(args.height, args.width, args.encoding)):
        if i == args.frames:
            break
        stamp = (i + 1) * 66_666_667
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 10**9)
        received = time.monotonic()
        rgb = converter.image(msg)
        before = len(sink.model_ms)
        worker.process(Frame(0, rgb, stamp, received, msg.header.frame_id))
        done = time.monotonic()
        if cuda:
            torch.cuda.synchronize()
        steps.append((done - received) * 1e3)
        if len(sink.model_ms) == before + 1:  # one result: conversion to last message
            e2e.append((done - received) * 1e3)
            overhead.append(e2e[-1] - sink.model_ms[-1])
        if (i + 1) % args.every == 0:
            stats = session.stats()
            model = sink.model_ms[-args.every:]
            row = {'frames': i + 1, 'window': stats.window_index,
                   'step_p50': float(np.percentile(steps, 50)),
                   'step_p99': float(np.percentile(steps, 99)),
                   'e2e_p50': float(np.percentile(e2e, 50)) if e2e else float('nan'),
                   'e2e_p99': float(np.percentile(e2e, 99)) if e2e else float('nan'),
                   'model_p50': float(np.nanpercentile(model, 50)) if model else float('nan'),
                   'overhead_p50': float(np.percentile(overhead, 50)) if overhead
                   else float('nan'),
                   'alloc_mb': torch.cuda.memory_allocated() / 2**20 if cuda else 0.0,
                   'reserved_mb': torch.cuda.memory_reserved() / 2**20 if cuda else 0.0,
                   'peak_mb': torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
                   'sliding_window': stats.sliding_window,
                   'rss_mb': rss_mb(), 'map_points': maps.counters(0).points}
            row['p99_over_p50'] = row['step_p99'] / row['step_p50']
            rows.append(row)
            print(f"{row['frames']:7d} {row['window']:6d} {row['step_p50']:9.1f} "
                  f"{row['step_p99']:8.1f} {row['e2e_p50']:8.1f} {row['e2e_p99']:8.1f} "
                  f"{row['model_p50']:9.1f} {row['overhead_p50']:8.1f} "
                  f"{row['alloc_mb']:9.1f} {row['reserved_mb']:11.1f} {row['peak_mb']:8.1f} "
                  f"{row['rss_mb']:7.1f} {row['map_points']:7d} {row['sliding_window']:9d}",
                  flush=True)
            steps, e2e, overhead = [], [], []
    maps.stop()
    if args.out:
        with open(args.out, 'w') as fh:
            json.dump({'args': vars(args), 'graphs': engine.graph_status,
                       'converter': converter.backend, 'estimate': estimate.as_dict(),
                       'rows': rows}, fh, indent=1)
    print(f'graphs: {engine.graph_status}; peak allocated '
          f"{max((r['peak_mb'] for r in rows), default=0) / 1024:.2f} GiB vs estimate "
          f'{estimate.peak_allocated / 2**30:.2f} GiB', flush=True)


if __name__ == '__main__':
    main()
