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

Bags (:mod:`~lingbot_ros.tools.bag`: rosbag2 folders, sqlite3 or mcap) are read with
``rosbags`` (no ROS installation needed); their Image or CompressedImage messages are
decoded with the node's own converter and republished with their own ``frame_id`` and
header stamps (``--restamp``: the clock at publish time; ``--frame-id`` overrides). Other
sources are stamped with the clock at publish time.

The rate holds from the first message: the schedule starts when it goes out, each frame
is decoded before its slot, and a source that falls behind moves the schedule instead of
sending the backlog in a burst (a depth-1 best-effort subscriber would drop it).
Truncated or unreadable image files in a folder are skipped and named on stderr.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path
import sys
import time
from typing import Any, Callable, Iterable, Iterator, Optional

import cv2
import numpy as np

DEFAULT_FRAME_ID = 'camera_optical_frame'  # of sources without one (folders, videos, scene)
IMAGE_EXTENSIONS = ('.png', '.jpg', '.jpeg', '.bmp', '.ppm', '.pgm', '.tif', '.tiff')
VIDEO_EXTENSIONS = ('.mp4', '.avi', '.mkv', '.mov', '.webm', '.mjpeg')


class UnreadableImage(ValueError):
    """An image file that must not be published: empty, cut short, or not decodable."""


def _pil_check(data: bytes, what: str) -> None:
    """Decode fully with Pillow, which refuses data that ends early (OpenCV may not)."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except UnidentifiedImageError:
        return  # a format Pillow does not know: OpenCV alone decides
    except (OSError, ValueError, SyntaxError, EOFError) as exc:
        raise UnreadableImage(f'truncated or corrupt {what} ({len(data)} bytes: {exc})') \
            from exc


def read_image(path: Path) -> np.ndarray:
    """Return an image file as RGB; raise :class:`UnreadableImage` saying why it cannot be."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnreadableImage(f'cannot be read ({exc.strerror or exc})') from exc
    if not data:
        raise UnreadableImage('empty file')
    # A JPEG or PNG cut short can still decode to an image with grey or missing rows. An
    # end marker in place is proof enough; without one (cut short, or data appended after
    # the image, as motion photos do) the full decode decides.
    if data.startswith(b'\xff\xd8'):
        if not data.endswith(b'\xff\xd9'):
            _pil_check(data, 'JPEG, no end-of-image marker')
    elif data.startswith(b'\x89PNG\r\n\x1a\n'):
        if data[-8:-4] != b'IEND':
            _pil_check(data, 'PNG, no IEND chunk')
    else:
        _pil_check(data, path.suffix.lstrip('.').upper() or 'image')
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if bgr is None or bgr.ndim != 3 or 0 in bgr.shape:
        raise UnreadableImage(f'not readable as an image ({len(data)} bytes)')
    return bgr[..., ::-1]


def folder_frames(folder: Path) -> Iterator[tuple]:
    """Yield (rgb, None, None) for the images of a folder in name order (no stamps)."""
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise SystemExit(f'{folder}: no images ({", ".join(IMAGE_EXTENSIONS)})')
    for path in files:
        try:
            rgb = read_image(path)
        except UnreadableImage as exc:
            print(f'skipping {path}: {exc}', file=sys.stderr, flush=True)
            continue
        yield rgb, None, None


def video_frames(path: Path) -> Iterator[tuple]:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise SystemExit(f'{path}: cannot open as a video')
    try:
        while True:
            ok, bgr = cap.read()
            if not ok:
                return
            yield bgr[..., ::-1], None, None
    finally:
        cap.release()


def bag_frames(path: Path, topic: Optional[str]) -> Iterator[tuple]:
    """Yield (rgb, header stamp_ns, frame_id) from the Image / CompressedImage of a bag."""
    from lingbot_ros.tools.bag import BagError, frames
    try:
        for frame in frames(path, topic, skipped=lambda why: print(
                f'skipping {why}', file=sys.stderr, flush=True), flag='--bag-topic'):
            yield frame.rgb, frame.stamp_ns, frame.frame_id
    except BagError as exc:
        raise SystemExit(str(exc)) from exc


def scene_frames(count: int, width: int, height: int) -> Iterator[tuple]:
    from lingbot_ros.tools import scene
    for frame in scene.frames(count, width, height):
        yield frame.image, None, None


def _source(args: argparse.Namespace, count: int) -> Iterator[tuple]:
    """Yield (rgb, stamp_ns or None, frame_id or None): only a bag has stamps and frames."""
    from lingbot_ros.tools.bag import bag_folder, BagError
    if args.source == 'scene':
        return scene_frames(count, args.width, args.height)
    path = Path(args.source)
    try:
        folder = bag_folder(path)
    except BagError as exc:
        raise SystemExit(str(exc)) from exc
    if folder is not None:
        return bag_frames(folder, args.bag_topic)
    if path.is_dir():
        return folder_frames(path)
    if path.suffix.lower() in VIDEO_EXTENSIONS or path.is_file():
        return video_frames(path)
    raise SystemExit(f'{path}: not a folder, video or bag')


class Pacer:
    """
    Slots one period apart, starting at the first frame sent, never closer after a stall.

    A frame ready before its slot waits for it. A frame more than ``slack`` late goes out at
    once and the schedule restarts from it, so a slow source lowers the rate for a while
    instead of owing frames that would then leave in a burst. ``clock`` and ``sleep`` are
    injectable so the schedule can be tested without waiting.
    """

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Any] = time.sleep, slack: Optional[float] = None):
        if rate <= 0:
            raise ValueError(f'rate={rate} is invalid: expected > 0')
        self.period = 1.0 / rate
        # Late by less than this (sleep overshoot) keeps the schedule, so the mean rate holds.
        self.slack = min(0.1 * self.period, 0.01) if slack is None else slack
        self.clock, self.sleep = clock, sleep
        self.next_slot: Optional[float] = None

    def wait(self) -> float:
        """Return at the next slot (at once for the first frame); give the time it is sent."""
        now = self.clock()
        while self.next_slot is not None and now < self.next_slot:
            self.sleep(self.next_slot - now)
            now = self.clock()
        on_time = self.next_slot is not None and now - self.next_slot <= self.slack
        self.next_slot = (self.next_slot if on_time else now) + self.period
        return now


def paced(source: Callable[[], Iterable[Any]], send: Callable[[Any], None], pacer: Pacer,
          count: int = 0, loop: bool = False) -> int:
    """
    Send each item of ``source()`` in its slot; return how many were sent.

    An item is produced (decoded, encoded) before its slot is waited for. ``count`` stops
    after that many (0: no limit); ``loop`` calls ``source`` again at its end.
    """
    sent = 0
    while True:
        produced = 0
        for item in source():
            produced += 1
            pacer.wait()
            send(item)
            sent += 1
            if count and sent >= count:
                return sent
        if not loop or produced == 0:
            return sent


def _to_msg(rgb: np.ndarray, frame_id: str, encoding: str) -> object:
    """Build the message without its stamp, which is set when it is sent."""
    from sensor_msgs.msg import CompressedImage, Image
    if encoding in ('jpeg', 'png'):
        ok, data = cv2.imencode('.jpg' if encoding == 'jpeg' else '.png',
                                np.ascontiguousarray(rgb[..., ::-1]))
        msg = CompressedImage(format=encoding, data=data.tobytes())
    else:
        pix = np.ascontiguousarray(rgb if encoding == 'rgb8' else rgb[..., ::-1])
        h, w = pix.shape[:2]
        msg = Image(height=h, width=w, encoding=encoding, step=w * 3, data=pix.tobytes())
    msg.header.frame_id = frame_id
    return msg


def _size(text: str) -> tuple:
    """Parse WIDTHxHEIGHT (e.g. 640x480) into (width, height)."""
    try:
        w, h = (int(v) for v in text.lower().split('x'))
    except ValueError:
        raise argparse.ArgumentTypeError(f'{text!r}: expected WIDTHxHEIGHT, e.g. 640x480')
    if w < 2 or h < 2:
        raise argparse.ArgumentTypeError(f'{text!r}: width and height must be at least 2')
    return w, h


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
    p.add_argument('--frame-id', default=None,
                   help="header.frame_id (default: a bag's own, else "
                        f'{DEFAULT_FRAME_ID})')
    p.add_argument('--bag-topic', default=None,
                   help='image topic inside the bag (needed when it has several)')
    p.add_argument('--restamp', action='store_true',
                   help="stamp a bag's frames with the clock at publish time instead of "
                        'their own header stamps (kept by default: a loop then jumps back, '
                        'as a looped bag does)')
    p.add_argument('--width', type=int, default=320, help='scene width (scene only)')
    p.add_argument('--height', type=int, default=240, help='scene height (scene only)')
    p.add_argument('--wait', type=float, default=10.0,
                   help='seconds to wait for the subscribers before publishing (default 10)')
    p.add_argument('--subscribers', type=int, default=1,
                   help='publish once this many subscribers are matched (default 1); a '
                        'benchmark that counts beside the node waits for both, so the first '
                        "frames are not sent before the node's reader is matched")
    p.add_argument('--quiet', action='store_true', help='no per-frame output')
    p.add_argument('--size', type=_size, default=None, metavar='WIDTHxHEIGHT',
                   help="resize every frame to this size (e.g. 640x480, a camera's)")
    args = p.parse_args(argv)
    if args.rate <= 0:
        p.error(f'--rate={args.rate} is invalid: expected > 0')
    if args.count < 0:
        p.error(f'--count={args.count} is invalid: expected >= 0')
    if args.subscribers < 1:
        p.error(f'--subscribers={args.subscribers} is invalid: expected >= 1')
    return args


def main(argv: Optional[list] = None) -> int:
    """Publish frames until the source (or --count) ends."""
    args = parse_args(argv)
    from lingbot_ros.ros.dds import use_large_image_profile
    use_large_image_profile()  # a camera's images need a larger shared-memory segment
    from lingbot_ros.ros.messages import stamp_msg
    from lingbot_ros.ros.probe import Probe
    from sensor_msgs.msg import CompressedImage, Image
    compressed = args.encoding in ('jpeg', 'png')
    topic = args.topic.rstrip('/') + '/compressed' if compressed else args.topic
    probe = Probe('lingbot_ros_play')
    try:
        pub = probe.publisher(CompressedImage if compressed else Image, topic)
        if args.wait > 0 and not probe.wait_for_subscribers(pub, args.subscribers, args.wait):
            print(f'{pub.get_subscription_count()} of {args.subscribers} subscriber(s) on '
                  f'{topic} after {args.wait:.0f} s; publishing anyway', file=sys.stderr)
        scene_count = args.count or 120
        sent = 0

        def prepared() -> Iterator[tuple]:
            for rgb, stamp, frame_id in _source(args, scene_count):
                if args.size is not None and rgb.shape[1::-1] != args.size:
                    rgb = cv2.resize(rgb, args.size, interpolation=cv2.INTER_LINEAR)
                frame_id = args.frame_id or frame_id or DEFAULT_FRAME_ID
                yield _to_msg(rgb, frame_id, args.encoding), rgb.shape, stamp

        def send(item: tuple) -> None:
            nonlocal sent
            msg, shape, stamp = item
            if args.restamp or stamp is None:
                stamp = time.time_ns()
            msg.header.stamp = stamp_msg(stamp)
            pub.publish(msg)
            sent += 1
            if not args.quiet:
                print(f'published {sent} {shape[1]}x{shape[0]} '
                      f'stamp {stamp / 1e9:.3f} on {topic}', flush=True)

        paced(prepared, send, Pacer(args.rate, sleep=probe.spin_for), args.count, args.loop)
        probe.spin_for(0.5)  # let reliable deliveries finish
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        probe.close()


if __name__ == '__main__':
    sys.exit(main())
