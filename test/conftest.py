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
Shared test helpers: the repository root, a per-module DDS domain, child nodes, bags.

The tests are sorted by kind: ``unit/`` (in one process, no DDS), ``ros/`` (rclpy nodes,
processes over DDS, ``ros2 launch``, colcon: marked ``slow`` here) and ``gpu/`` (CUDA only,
marked ``gpu``; they skip without it). Helpers they share live beside this file
(``doubles.py``, ``oracles/``, ``synthetic_robot.py``) and are imported by name.
"""

import os
from pathlib import Path
import shutil
import signal
import subprocess
import sys
from typing import Optional

from hypothesis import settings
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

# CI (``HYPOTHESIS_PROFILE=ci``, set by .ci/run) draws the same examples on every run, so a red
# CI means a change broke a property; a plain ``pytest`` draws fresh examples each time and is
# where a marginal case gets found.
settings.register_profile('ci', derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get('HYPOTHESIS_PROFILE', 'default'))
ROS_TESTS = Path(__file__).resolve().parent / 'ros'


def pytest_collection_modifyitems(items: list) -> None:
    """Mark every test under ``test/ros`` slow: each starts nodes or processes over DDS."""
    for item in items:
        if ROS_TESTS in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope='session')
def repo_root() -> Path:
    return ROOT


def node_executable() -> Path:
    """Return the ``lingbot_node`` script of this interpreter's environment."""
    return Path(sys.executable).with_name('lingbot_node')


# A child node that runs fast on the CPU and loses nothing a test sends: the tiny model on a
# 56-pixel grid, reliable input with room for every frame. Tests append their own lines.
TINY_NODE_YAML = """
/**:
  ros__parameters:
    scale_frames: 2
    image_size: 56
    qos_reliability: reliable
    qos_depth: 50
    queue_size: 32
"""


def dds_domain(default: int) -> int:
    """
    Return the DDS domain a test file runs its nodes in: ``ROS_DOMAIN_ID`` when set.

    Unset, each file keeps a default of its own (51-60, 121-123, 141), so that files
    never see each other's nodes. Set (CI, or several people on one machine), every file uses that
    domain: files run one after another and each stops its nodes before the next starts,
    and a test that counts what arrives on a shared topic (``/diagnostics``) counts only
    its own node's messages.
    """
    value = os.environ.get('ROS_DOMAIN_ID', '').strip()
    return int(value) if value else default


def dds_env(domain: int, **extra: str) -> dict:
    """Return a child process's environment: loopback-only DDS in the test's own domain."""
    env = dict(os.environ, ROS_AUTOMATIC_DISCOVERY_RANGE='LOCALHOST',
               ROS_DOMAIN_ID=str(domain), PYTHONUNBUFFERED='1', **extra)
    env.pop('ROS_STATIC_PEERS', None)
    return env


def stop_group(proc: subprocess.Popen, wait: float = 20.0) -> None:
    """SIGINT a child's process group (a terminal's Ctrl-C); SIGKILL what outlives ``wait``."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


def stop_groups(procs, wait: float = 20.0) -> None:
    """Ctrl-C every child's process group at once, then wait for each (SIGKILL what outlives)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
    for proc in procs:
        stop_group(proc, wait)


def installed_share() -> Optional[Path]:
    """Return the share directory of an installed lingbot_ros (colcon), or None."""
    try:
        from ament_index_python.packages import get_package_share_directory
        return Path(get_package_share_directory('lingbot_ros'))
    except Exception:  # noqa: BLE001 (not installed, or no ament_index_python)
        return None


@pytest.fixture(scope='session')
def ament_env(tmp_path_factory) -> dict:
    """
    Return an environment in which ``ros2 launch lingbot_ros ...`` finds this package.

    After ``colcon build`` and ``source install/setup.bash`` the package is in the ament
    index already. Otherwise (a pip install, pytest run by hand) a throw-away install
    prefix is laid out the way colcon lays it out, pointing at this checkout's files and
    running this interpreter, and put in front of AMENT_PREFIX_PATH.
    """
    if installed_share() is not None:
        return dict(os.environ)
    prefix = tmp_path_factory.mktemp('ament_prefix')
    index = prefix / 'share' / 'ament_index' / 'resource_index' / 'packages'
    index.mkdir(parents=True)
    (index / 'lingbot_ros').write_text('')
    share = prefix / 'share' / 'lingbot_ros'
    share.mkdir(parents=True)
    shutil.copy2(ROOT / 'package.xml', share)
    for name in ('launch', 'config'):  # copies: ros2 launch's os.walk skips linked folders
        shutil.copytree(ROOT / name, share / name)
    lib = prefix / 'lib' / 'lingbot_ros'
    lib.mkdir(parents=True)
    exe = lib / 'lingbot_node'
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m lingbot_ros.ros.cli "$@"\n')
    exe.chmod(0o755)
    paths = [str(prefix)] + [p for p in os.environ.get('AMENT_PREFIX_PATH', '').split(':') if p]
    return dict(os.environ, AMENT_PREFIX_PATH=':'.join(paths))


def png_bomb(width: int = 30000, height: int = 30000) -> bytes:
    """
    Return a real, small PNG of ``width`` x ``height`` black pixels (1 bit grey).

    About 110 KB for 30000x30000; decoded as colour it would be 2.7 GB. Rows are
    compressed one at a time, so making it never holds the raw image either.
    """
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack('>I', len(data)) + body + struct.pack('>I', zlib.crc32(body))
    pack = zlib.compressobj(9)
    row = bytes(1 + (width + 7) // 8)  # filter byte 0, then the packed bits
    idat = b''.join(pack.compress(row) for _ in range(height)) + pack.flush()
    ihdr = struct.pack('>IIBBBBB', width, height, 1, 0, 0, 0, 0)
    return (b'\x89PNG\r\n\x1a\n' + chunk(b'IHDR', ihdr) + chunk(b'IDAT', idat)
            + chunk(b'IEND', b''))


def jpeg_declaring(width: int = 30000, height: int = 30000) -> bytes:
    """Return a small real JPEG whose frame header (SOF0) is rewritten to declare this size."""
    import struct

    import cv2
    import numpy as np
    ok, enc = cv2.imencode('.jpg', np.full((48, 64, 3), 128, np.uint8))
    data = bytearray(enc.tobytes())
    at = data.index(b'\xff\xc0')  # baseline frame header: FFC0, length, precision, H, W
    data[at + 5:at + 9] = struct.pack('>HH', height, width)
    return bytes(data)


def unproject_plain(r, pose, step, min_confidence, percentile):
    """Unproject written out directly (nonzero, np.percentile): what unproject equals."""
    depth = r.depth[::step, ::step]
    keep = np.isfinite(depth) & (depth > 0)
    conf = None if r.confidence is None else r.confidence[::step, ::step]
    if conf is not None:
        cut = min_confidence
        if percentile > 0 and keep.any():
            cut = max(cut, float(np.percentile(conf[keep], percentile)))
        keep &= conf >= cut
    v, u = np.nonzero(keep)
    z = depth[v, u].astype(np.float64)
    k = r.intrinsics_model
    cam = np.stack([(u * step - k[0, 2]) * z / k[0, 0], (v * step - k[1, 2]) * z / k[1, 1], z],
                   axis=1)
    xyz = cam @ pose[:3, :3].T + pose[:3, 3]
    rgb = r.colors[::step, ::step][v, u] if r.colors is not None \
        else np.zeros((len(z), 3), np.uint8)
    return xyz, rgb, (conf[v, u] if conf is not None else np.zeros(len(z), np.float32))


def write_bag(path: Path, topics: dict, storage: str = 'sqlite3') -> Path:
    """
    Write a rosbag2 folder with ``rosbags`` itself: ``{topic: [(stamp_ns, rgb, frame_id)]}``.

    A topic ending in ``/compressed`` holds JPEG CompressedImages, any other bgr8 Images;
    ``storage`` is 'sqlite3' or 'mcap'. Messages are recorded 1 ms after their stamps.
    """
    import cv2
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import get_typestore, Stores
    store = get_typestore(Stores.ROS2_KILTED)
    types = store.types
    img, comp = types['sensor_msgs/msg/Image'], types['sensor_msgs/msg/CompressedImage']
    hdr, time_ = types['std_msgs/msg/Header'], types['builtin_interfaces/msg/Time']
    plugin = {'sqlite3': StoragePlugin.SQLITE3, 'mcap': StoragePlugin.MCAP}[storage]
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        for topic, frames in topics.items():
            kind = comp if topic.endswith('/compressed') else img
            conn = writer.add_connection(topic, kind.__msgtype__, typestore=store)
            for stamp, rgb, frame_id in frames:
                header = hdr(stamp=time_(sec=stamp // 10**9, nanosec=stamp % 10**9),
                             frame_id=frame_id)
                bgr = np.ascontiguousarray(rgb[..., ::-1])
                if kind is comp:
                    data = cv2.imencode('.jpg', bgr, [cv2.IMWRITE_JPEG_QUALITY, 95])[1]
                    msg = comp(header=header, format='jpeg', data=data.reshape(-1))
                else:
                    h, w = rgb.shape[:2]
                    msg = img(header=header, height=h, width=w, encoding='bgr8',
                              is_bigendian=0, step=w * 3, data=bgr.reshape(-1))
                writer.write(conn, stamp + 1_000_000, store.serialize_cdr(msg, kind.__msgtype__))
    return path
