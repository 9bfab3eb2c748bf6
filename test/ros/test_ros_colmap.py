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
``~/save_colmap`` over DDS: a node process writes its kept keyframes and map as COLMAP.

The node runs the tiny random-weight model on a small grid in its own process, on
loopback in a domain of its own; this process publishes images, reads the poses,
``camera_info`` and ``~/map_points``, calls the service and opens the model with pycolmap.
"""

from functools import partial
import os
from pathlib import Path
import subprocess

from conftest import dds_domain, dds_env, node_executable, stop_group, TINY_NODE_YAML
from geometry_msgs.msg import PoseStamped
from lingbot_ros.ros.probe import Probe
from lingbot_ros.streaming.trajectory import quat_to_matrix
import numpy as np
import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_images import random_image, stamp_of
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_srvs.srv import Trigger

pycolmap = pytest.importorskip('pycolmap')  # a test dependency: installed in CI

DOMAIN = dds_domain(141)
ROOT = Path(__file__).resolve().parents[2]
NAME = 'lingbot_colmap'
KEEP = 4
OVERRIDES = TINY_NODE_YAML + """    publish_map: true
    map_period: 0.1
    map_max_points: 300
    colmap_max_keyframes: {keep}
    trajectory_dir: {traj}
"""
KEPT = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                  durability=DurabilityPolicy.TRANSIENT_LOCAL)


@pytest.fixture(scope='module')
def rig(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('colmap_dds')
    extra = tmp / 'overrides.yaml'
    extra.write_text(OVERRIDES.format(keep=KEEP, traj=tmp / 'traj'))
    log = open(tmp / 'node.log', 'w+')
    cmd = [str(node_executable()), '--ros-args', '--params-file',
           str(ROOT / 'config' / 'lingbot.yaml'), '--params-file', str(extra),
           '-r', f'__node:={NAME}', '-p', "camera_topics:=['/colmap/image']"]
    proc = subprocess.Popen(cmd, env=dds_env(DOMAIN), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    probe = Probe('colmap_probe', domain_id=DOMAIN)
    rig = {'probe': probe, 'tmp': tmp, 'image': probe.publisher(Image, '/colmap/image'),
           'poses': probe.collect(PoseStamped, f'/{NAME}/pose'),
           'info': probe.collect(CameraInfo, f'/{NAME}/camera_info'),
           'map': probe.collect(PointCloud2, f'/{NAME}/map_points', KEPT)}
    ok = probe.wait_for_subscribers(rig['image'], 1, 90) and \
        probe.wait_for_publishers(f'/{NAME}/pose', 1, 30)
    if not ok:
        log.seek(0)
        print(log.read())
    assert ok, 'the node did not come up'
    yield rig
    stop_group(proc)
    probe.close()
    log.close()


_image = partial(random_image, frame_id='colmap_camera')
_stamp = stamp_of


def _pose(msg):
    m = np.eye(4)
    q = msg.pose.orientation
    m[:3, :3] = quat_to_matrix(np.array([q.x, q.y, q.z, q.w]))
    m[:3, 3] = [msg.pose.position.x, msg.pose.position.y, msg.pose.position.z]
    return m


def test_save_colmap_writes_the_kept_keyframes_and_the_map(rig):
    probe = rig['probe']
    stamps = [1_000_000_000 + i * 100_000_000 for i in range(6)]
    for s in stamps:
        rig['image'].publish(_image(s))
        probe.spin_for(0.05)
    assert probe.spin_until(lambda: len(rig['poses']) >= 6 and rig['map'] and _stamp(
        rig['map'][-1]) == stamps[-1], 60), 'no map of the last keyframe'
    cloud = rig['map'][-1]
    first = probe.call(Trigger, f'/{NAME}/save_colmap', Trigger.Request())
    second = probe.call(Trigger, f'/{NAME}/save_colmap', Trigger.Request())
    assert first.success and second.success, (first.message, second.message)
    (folder,) = [Path(p) for p in first.message.replace('wrote ', '').split(', ')]
    (again,) = [Path(p) for p in second.message.replace('wrote ', '').split(', ')]
    assert folder != again and folder.parent == again.parent == rig['tmp'] / 'traj'
    assert folder.name.startswith('camera_') and folder.name.endswith('_colmap')
    rec = pycolmap.Reconstruction()
    rec.read_text(str(folder / 'sparse' / '0'))
    # bounded: the last KEEP keyframes (every frame is one here), one camera each
    assert rec.num_images() == rec.num_cameras() == KEEP
    names = sorted(i.name for i in rec.images.values())
    assert names == [f'{i:06d}.jpg' for i in range(6 - KEEP, 6)]
    assert sorted(p.name for p in (folder / 'images').iterdir()) == names
    poses = {_stamp(p): _pose(p) for p in rig['poses']}
    infos = {_stamp(m): m for m in rig['info']}
    for img in rec.images.values():
        stamp = stamps[int(img.name[:6])]
        # the same pose as ~/pose (map frame), as world-to-camera
        np.testing.assert_allclose(img.cam_from_world().matrix(),
                                   np.linalg.inv(poses[stamp])[:3], atol=1e-5)
        # the image is the 56 x 42 model grid; camera_info's 64 x 48 intrinsics, scaled
        cam = rec.cameras[img.camera_id]
        assert (cam.width, cam.height) == (56, 42)
        k = np.array(infos[stamp].k).reshape(3, 3) * (56 / 64)
        np.testing.assert_allclose(cam.params, [k[0, 0], k[1, 1], k[0, 2] + 0.5,
                                                k[1, 2] + 0.5], rtol=1e-5)
    # the points are ~/map_points
    rec_xyz = np.array([p.xyz for p in rec.points3D.values()], np.float32)
    msg = np.frombuffer(bytes(cloud.data), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                                  ('rgb', '<u4'), ('c', '<f4')])
    assert 0 < len(rec_xyz) == cloud.width <= 300
    np.testing.assert_array_equal(np.sort(rec_xyz[:, 2]), np.sort(msg['z']))
    np.testing.assert_allclose(np.sort([p.error for p in rec.points3D.values()]),
                               np.sort(1.0 / msg['c'].astype(np.float64)), rtol=1e-7)
