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
``lingbot-ros-play``: images, a video, a ROS 2 bag or the built-in scene as a topic.

Frames go out as sensor_msgs/Image (or CompressedImage) at a given rate.

Bags are read with ``rosbags`` (no ROS installation needed); their Image or
CompressedImage messages are decoded with the node's own converter and republished.
Stamps are the wall clock at publish time unless ``--source-stamps`` keeps the bag's.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import sys
import time
from typing import Iterator, Optional

import cv2
import numpy as np

IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.ppm', '.pgm', '.tif', '.tiff')
VIDEO_EXTENSIONS = ('.mp4', '.avi', '.mkv', '.mov', '.webm', '.mjpeg')


def folder_frames(folder: Path) -> Iterator[tuple]:
    """Yield (rgb, stamp_ns or None) for the images of a folder in name order."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise SystemExit(f'{folder}: no images ({", ".join(IMAGE_EXTENSIONS)})')
    for path in files:
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            print(f'skipping {path}: not readable as an image', file=sys.stderr)
            continue
        yield bgr[..., ::-1], None


def video_frames(path: Path) -> Iterator[tuple]:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SystemExit(f'{path}: cannot open as a video')
    try:
        while True:
            ok, bgr = cap.read()
            if not ok:
                return
            yield bgr[..., ::-1], None
    finally:
        cap.release()


def bag_frames(path: Path, topic: Optional[str]) -> Iterator[tuple]:
    """Yield (rgb, stamp_ns) from Image / CompressedImage messages of a ROS 2 bag."""
    from lingbot_ros.ros.convert import compressed_to_rgb, image_to_rgb, ImageRejected
    from rosbags.highlevel import AnyReader
    kinds = ('sensor_msgs/msg/Image', 'sensor_msgs/msg/CompressedImage')
    with AnyReader([path]) as reader:
        conns = [c for c in reader.connections if c.msgtype in kinds
                 and (topic is None or c.topic == topic)]
        if not conns:
            found = sorted({f'{c.topic} ({c.msgtype})' for c in reader.connections})
            raise SystemExit(f'{path}: no image topic{" " + topic if topic else ""}; '
                             f'topics: {", ".join(found) or "none"}')
        if topic is None and len({c.topic for c in conns}) > 1:
            raise SystemExit(f'{path}: several image topics, pick one with --bag-topic: '
                             + ', '.join(sorted({c.topic for c in conns})))
        for conn, _, raw in reader.messages(connections=conns):
            msg = reader.deserialize(raw, conn.msgtype)
            try:
                rgb = (compressed_to_rgb(msg) if conn.msgtype.endswith('CompressedImage')
                       else image_to_rgb(msg))
            except ImageRejected as exc:
                print(f'skipping a message: {exc}', file=sys.stderr)
                continue
            yield rgb, int(msg.header.stamp.sec) * 10**9 + int(msg.header.stamp.nanosec)


def scene_frames(count: int, width: int, height: int) -> Iterator[tuple]:
    from lingbot_ros.tools import scene
    for frame in scene.frames(count, width, height):
        yield frame.image, None


def _source(args: argparse.Namespace, count: int) -> Iterator[tuple]:
    if args.source == 'scene':
        return scene_frames(count, args.width, args.height)
    path = Path(args.source)
    if path.is_dir() and ((path / 'metadata.yaml').exists()
                          or any(path.glob('*.db3')) or any(path.glob('*.mcap'))):
        return bag_frames(path, args.bag_topic)
    if path.is_dir():
        return folder_frames(path)
    if path.suffix in ('.db3', '.mcap'):
        return bag_frames(path.parent, args.bag_topic)
    if path.suffix.lower() in VIDEO_EXTENSIONS or path.is_file():
        return video_frames(path)
    raise SystemExit(f'{path}: not a folder, video or bag')


def _to_msg(rgb: np.ndarray, stamp_ns: int, frame_id: str, encoding: str) -> object:
    from sensor_msgs.msg import CompressedImage, Image
    from lingbot_ros.ros.messages import stamp_msg
    if encoding in ('jpeg', 'png'):
        ok, data = cv2.imencode('.jpg' if encoding == 'jpeg' else '.png',
                                np.ascontiguousarray(rgb[..., ::-1]))
        msg = CompressedImage(format=encoding, data=data.tobytes())
    else:
        pix = np.ascontiguousarray(rgb if encoding == 'rgb8' else rgb[..., ::-1])
        h, w = pix.shape[:2]
        msg = Image(height=h, width=w, encoding=encoding, step=w * 3, data=pix.tobytes())
    msg.header.stamp = stamp_msg(stamp_ns)
    msg.header.frame_id = frame_id
    return msg


def parse_args(argv: Optional[list] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog='lingbot-ros-play', description='Publish images as a sensor_msgs topic.')
    p.add_argument('source', help='a folder of images, a video file, a ROS 2 bag folder, or '
                   '"scene" (the built-in procedurally rendered room)')
    p.add_argument('--topic', default='/image', help='output topic (default /image)')
    p.add_argument('--rate', type=float, default=10.0, help='frames per second (default 10)')
    p.add_argument('--count', type=int, default=0,
                   help='stop after this many frames (0: all; with --loop: forever)')
    p.add_argument('--loop', action='store_true', help='start again at the end of the source')
    p.add_argument('--encoding', default='rgb8', choices=('rgb8', 'bgr8', 'jpeg', 'png'),
                   help='raw encoding, or jpeg/png to publish CompressedImage on '
                        '<topic>/compressed')
    p.add_argument('--frame-id', default='camera_optical_frame', help='header.frame_id')
    p.add_argument('--bag-topic', default=None, help='image topic inside the bag')
    p.add_argument('--source-stamps', action='store_true',
                   help="keep the bag's stamps (a loop then jumps back, as a looped bag does)")
    p.add_argument('--width', type=int, default=320, help='scene width (scene only)')
    p.add_argument('--height', type=int, default=240, help='scene height (scene only)')
    p.add_argument('--wait', type=float, default=10.0,
                   help='seconds to wait for a subscriber before publishing (default 10)')
    p.add_argument('--quiet', action='store_true', help='no per-frame output')
    args = p.parse_args(argv)
    if args.rate <= 0:
        p.error(f'--rate={args.rate} is invalid: expected > 0')
    if args.count < 0:
        p.error(f'--count={args.count} is invalid: expected >= 0')
    return args


def main(argv: Optional[list] = None) -> int:
    """Publish frames until the source (or --count) ends."""
    args = parse_args(argv)
    from lingbot_ros.ros.probe import Probe
    from sensor_msgs.msg import CompressedImage, Image
    compressed = args.encoding in ('jpeg', 'png')
    topic = args.topic.rstrip('/') + '/compressed' if compressed else args.topic
    probe = Probe('lingbot_ros_play')
    try:
        pub = probe.publisher(CompressedImage if compressed else Image, topic)
        if args.wait > 0 and not probe.wait_for_subscribers(pub, 1, args.wait):
            print(f'no subscriber on {topic} after {args.wait:.0f} s; publishing anyway',
                  file=sys.stderr)
        sent, period = 0, 1.0 / args.rate
        scene_count = args.count or 120
        next_time = time.monotonic()
        while True:
            produced = 0
            for rgb, stamp in _source(args, scene_count):
                produced += 1
                now_ns = time.time_ns()
                stamp = stamp if (args.source_stamps and stamp is not None) else now_ns
                pub.publish(_to_msg(rgb, stamp, args.frame_id, args.encoding))
                sent += 1
                if not args.quiet:
                    print(f'published {sent} {rgb.shape[1]}x{rgb.shape[0]} '
                          f'stamp {stamp / 1e9:.3f} on {topic}', flush=True)
                if args.count and sent >= args.count:
                    probe.spin_for(0.5)  # let reliable deliveries finish
                    return 0
                next_time += period
                probe.spin_for(max(0.0, next_time - time.monotonic()))
            if not args.loop or produced == 0:
                probe.spin_for(0.5)
                return 0
    except KeyboardInterrupt:
        return 0
    finally:
        probe.close()


if __name__ == '__main__':
    sys.exit(main())
