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
Camera images of a ROS 2 bag, for ``lingbot-ros-replay`` and ``lingbot-ros-play``.

A bag is a rosbag2 folder (``metadata.yaml`` beside its ``.db3`` or ``.mcap`` files),
read with ``rosbags``: no ROS installation needed, sqlite3 and mcap storage alike. Its
``sensor_msgs/Image`` and ``CompressedImage`` messages are decoded by the node's own
converter (validated the same way, depth refused), and each frame keeps its header's
stamp and ``frame_id``. A bag with several image topics needs one named.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

import numpy as np

IMAGE = 'sensor_msgs/msg/Image'
COMPRESSED = 'sensor_msgs/msg/CompressedImage'
STORAGE_SUFFIXES = ('.db3', '.mcap')


class BagError(ValueError):
    """A bag that cannot be read as asked; the message says why and what there is."""


@dataclass(frozen=True)
class BagFrame:
    """One image of the bag: RGB pixels, its header stamp and frame id."""

    rgb: np.ndarray  # [H, W, 3] uint8
    stamp_ns: int    # the header stamp; the recording time where the header has none
    frame_id: str


def bag_folder(path: Path) -> Optional[Path]:
    """Return the rosbag2 folder ``path`` is (or whose storage file it is), else None."""
    path = Path(path)
    if path.is_file() and path.suffix in STORAGE_SUFFIXES:
        path = path.parent
    if not path.is_dir():
        return None
    if (path / 'metadata.yaml').is_file():
        return path
    if any(p.suffix in STORAGE_SUFFIXES for p in path.iterdir()):
        raise BagError(f'{path}: bag storage files without metadata.yaml; rosbag2 writes it '
                       'when recording ends (ros2 bag reindex rebuilds it)')
    return None


def _open(folder: Path):  # noqa: ANN202 (rosbags' reader, imported here only)
    from rosbags.highlevel import AnyReader
    from rosbags.typesys import get_typestore, Stores
    # bags recorded without message definitions are read with the newest ROS 2 types
    return AnyReader([folder], default_typestore=get_typestore(Stores.LATEST))


def _connections(reader, folder: Path, topic: Optional[str],  # noqa: ANN001
                 flag: str) -> list:
    images = [c for c in reader.connections if c.msgtype in (IMAGE, COMPRESSED)]
    found = ', '.join(sorted({f'{c.topic} ({c.msgtype.rsplit("/", 1)[-1]}, '
                              f'{c.msgcount} messages)' for c in images})) or 'none'
    if topic is not None:
        chosen = [c for c in images if c.topic == topic]
        if not chosen:
            raise BagError(f'{folder}: no Image or CompressedImage topic {topic}; image '
                           f'topics: {found}')
        return chosen
    if not images:
        others = ', '.join(sorted({c.topic for c in reader.connections})) or 'none'
        raise BagError(f'{folder}: no sensor_msgs/Image or CompressedImage topic (topics: '
                       f'{others})')
    if len({c.topic for c in images}) > 1:
        raise BagError(f'{folder}: several image topics, choose one with {flag}: {found}')
    return images


def frames(path: Path, topic: Optional[str] = None,
           skipped: Optional[Callable[[str], None]] = None,
           flag: str = '--topic') -> Iterator[BagFrame]:
    """
    Yield the images of one topic of the bag at ``path`` in recording order.

    A message the converter refuses (a depth encoding, a truncated image ...) is skipped
    and told to ``skipped``; one that does not deserialize at all is a :class:`BagError`.
    ``flag`` is the option that names the topic, for the error when it is ambiguous.
    """
    from lingbot_ros.ros.convert import compressed_to_rgb, image_to_rgb, ImageRejected
    from rosbags.highlevel import AnyReaderError
    folder = bag_folder(path)
    if folder is None:
        raise BagError(f'{path}: not a rosbag2 folder (no metadata.yaml)')
    try:
        with _open(folder) as reader:
            conns = _connections(reader, folder, topic, flag)
            for n, (conn, recorded, raw) in enumerate(reader.messages(connections=conns)):
                msg = reader.deserialize(raw, conn.msgtype)
                try:
                    rgb = compressed_to_rgb(msg) if conn.msgtype == COMPRESSED \
                        else image_to_rgb(msg)
                except ImageRejected as exc:
                    if skipped is not None:
                        skipped(f'{conn.topic} message {n}: {exc}')
                    continue
                header = msg.header.stamp
                stamp = int(header.sec) * 1_000_000_000 + int(header.nanosec) or int(recorded)
                yield BagFrame(rgb, stamp, str(msg.header.frame_id))
    except (AnyReaderError, KeyError, ValueError) as exc:
        if isinstance(exc, BagError):
            raise
        raise BagError(f'{folder}: cannot read the bag ({type(exc).__name__}: {exc})') from exc
