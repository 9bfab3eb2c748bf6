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

"""The COLMAP writer, read back by pycolmap: the demo room's true poses, depth and map."""

import cv2
from lingbot_ros.streaming.colmap import (keyframe_image, KeyframeStore, point_errors,
                                          write_colmap)
from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig, MapPoints
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.tools import scene
import numpy as np
import pytest

pycolmap = pytest.importorskip('pycolmap')  # a test dependency: installed in CI

H, W = 98, 130


def _result(frame, k, epoch=0):
    depth = scene.depth(frame.pose_c2w, k, W, H)
    return FrameResult(stamp_ns=frame.index, index=frame.index, frame_type=FrameType.KEYFRAME,
                       pose_c2w=frame.pose_c2w, pose_enc=np.zeros(9, np.float32),
                       intrinsics=k, intrinsics_model=k, input_hw=(H, W), model_hw=(H, W),
                       map_epoch=epoch, depth=depth,
                       confidence=np.full((H, W), 2.0, np.float32) + np.float32(frame.index),
                       colors=frame.image)


@pytest.fixture(scope='module')
def room(tmp_path_factory):
    """Six keyframes of the demo walk, their map and the model written from them."""
    k = scene.intrinsics(W, H)
    results = [_result(f, k) for f in scene.frames(6, W, H)]
    cloud = MapCloud(MapCloudConfig(voxel_size=0.005, max_points=10**6, decimation=3,
                                    confidence_percentile=0.0))
    store = KeyframeStore(10)
    for r in results:
        cloud.add(r)
        store.add(keyframe_image(r))
    folder = tmp_path_factory.mktemp('colmap') / 'model'
    summary = write_colmap(folder, store.images(), cloud.snapshot())
    return results, cloud.snapshot(), folder, summary


def _read(folder, kind):
    rec = pycolmap.Reconstruction()
    getattr(rec, f'read_{kind}')(str(folder / 'sparse' / '0'))
    return rec


@pytest.mark.parametrize('kind', ['text', 'binary'])
def test_cameras_images_and_points_read_back_as_written(room, kind):
    results, snap, folder, summary = room
    rec = _read(folder, kind)
    assert summary.images == rec.num_images() == rec.num_cameras() == len(results)
    assert summary.points == rec.num_points3D() == len(snap.xyz) > 1000
    by_name = {img.name: img for img in rec.images.values()}
    for r in results:
        img = by_name[f'{r.index:06d}.jpg']
        cam = rec.cameras[img.camera_id]
        assert cam.model == pycolmap.CameraModelId.PINHOLE
        assert (cam.width, cam.height) == (W, H)
        k = r.intrinsics_model
        # COLMAP's pixel centres are at u + 0.5, ours (and ROS's) at u
        np.testing.assert_allclose(cam.params, [k[0, 0], k[1, 1], k[0, 2] + 0.5,
                                                k[1, 2] + 0.5])
        w2c = np.linalg.inv(r.pose_c2w)
        np.testing.assert_allclose(img.cam_from_world().matrix(), w2c[:3], atol=1e-9)
        assert img.num_points2D() == 0
        pixels = cv2.imread(str(folder / 'images' / img.name))
        assert pixels.shape == (H, W, 3)
        # the JPEG is the frame's colours (RGB order), up to compression
        assert np.abs(pixels[..., ::-1].astype(int) - r.colors).mean() < 8
    ids = sorted(rec.points3D)
    xyz = np.array([rec.points3D[i].xyz for i in ids])
    rgb = np.array([rec.points3D[i].color for i in ids])
    err = np.array([rec.points3D[i].error for i in ids])
    np.testing.assert_array_equal(xyz.astype(np.float32), snap.xyz)  # float32 exact
    np.testing.assert_array_equal(rgb, snap.rgb)
    np.testing.assert_allclose(err, 1.0 / snap.confidence.astype(np.float64), rtol=1e-8)
    assert all(rec.points3D[i].track.length() == 0 for i in ids[:50])


def test_a_depth_pixel_projects_back_onto_its_centre_through_pycolmap(room):
    """The poses' convention: world-to-camera rotation and translation of the optical frame."""
    results, _, folder, _ = room
    rec = _read(folder, 'text')
    by_name = {img.name: img for img in rec.images.values()}
    rng = np.random.default_rng(0)
    u, v = rng.integers(0, W, 200), rng.integers(0, H, 200)
    for r in results:
        k = r.intrinsics_model
        z = r.depth[v, u].astype(np.float64)  # unprojected as the map does: centre at u
        cam_pts = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1],
                            np.ones(len(u))], 1) * z[:, None]
        world = cam_pts @ r.pose_c2w[:3, :3].T + r.pose_c2w[:3, 3]
        img = by_name[f'{r.index:06d}.jpg']
        cam = rec.cameras[img.camera_id]
        projected = cam.img_from_cam(img.cam_from_world() * world)
        np.testing.assert_allclose(projected, np.stack([u, v], 1) + 0.5, atol=1e-6)


def test_map_points_project_inside_the_keyframes_that_saw_them(room):
    """Every map point lands, with its depth, on a surface pixel of some written keyframe."""
    results, snap, folder, _ = room
    rec = _read(folder, 'binary')
    seen = np.zeros(len(snap.xyz), bool)
    world = snap.xyz.astype(np.float64)
    for img in rec.images.values():
        cam = rec.cameras[img.camera_id]
        r = results[int(img.name[:6])]
        cam_pts = img.cam_from_world() * world
        z = cam_pts[:, 2]
        front = z > 0
        uv = np.full((len(world), 2), -1.0)
        uv[front] = cam.img_from_cam(cam_pts[front])
        inside = front & (uv[:, 0] >= 0) & (uv[:, 0] < W) & (uv[:, 1] >= 0) & (uv[:, 1] < H)
        depth = r.depth
        iu = np.clip(np.floor(uv[:, 0]).astype(int), 0, W - 1)
        iv = np.clip(np.floor(uv[:, 1]).astype(int), 0, H - 1)
        near = np.zeros(len(world), bool)  # the keyframe's own surface is there (no occluder)
        for du in (-1, 0, 1):
            for dv in (-1, 0, 1):
                d = depth[np.clip(iv + dv, 0, H - 1), np.clip(iu + du, 0, W - 1)]
                near |= np.abs(d - z) < 0.02 * np.abs(z) + 0.01
        seen |= inside & near
    assert seen.all(), f'{np.count_nonzero(~seen)} of {len(seen)} points seen by no keyframe'


def test_the_store_keeps_the_last_keyframes_of_one_map():
    k = scene.intrinsics(W, H)
    frames = list(scene.frames(5, W, H))
    store = KeyframeStore(3)
    for f in frames:
        store.add(keyframe_image(_result(f, k)))
    assert [i.name for i in store.images()] == ['000002.jpg', '000003.jpg', '000004.jpg']
    assert store.dropped == 2 and 0 < store.nbytes < 3 * W * H * 3
    store.add(keyframe_image(_result(frames[0], k, epoch=1)))  # a new map: the old goes
    assert [i.name for i in store.images()] == ['000000.jpg'] and store.dropped == 0
    off = KeyframeStore(0)
    off.add(keyframe_image(_result(frames[0], k)))
    assert len(off) == 0
    with pytest.raises(ValueError, match='max_keyframes'):
        KeyframeStore(-1)


def test_a_second_model_in_the_folder_replaces_the_first(tmp_path):
    k = scene.intrinsics(W, H)
    images = [keyframe_image(_result(f, k)) for f in scene.frames(3, W, H)]
    points = MapPoints(np.zeros((2, 3), np.float32), np.zeros((2, 3), np.uint8),
                       np.array([0.0, 4.0], np.float32))
    write_colmap(tmp_path, images, points)
    write_colmap(tmp_path, images[1:], points)
    written = sorted(p.name for p in (tmp_path / 'images').iterdir())
    assert written == ['000001.jpg', '000002.jpg']
    assert not (tmp_path / '.partial').exists()
    rec = _read(tmp_path, 'text')
    assert rec.num_images() == 2
    assert sorted(p.error for p in rec.points3D.values()) == [-1.0, 0.25]
    with pytest.raises(ValueError, match='at least one'):
        write_colmap(tmp_path / 'none', [], points)


def test_a_folder_holding_other_files_is_refused_and_kept(tmp_path):
    k = scene.intrinsics(W, H)
    images = [keyframe_image(_result(f, k)) for f in scene.frames(2, W, H)]
    points = MapPoints(np.zeros((1, 3), np.float32), np.zeros((1, 3), np.uint8),
                       np.array([2.0], np.float32))
    (tmp_path / 'notes.txt').write_text('mine')
    with pytest.raises(ValueError, match='notes.txt'):
        write_colmap(tmp_path, images, points)
    assert [p.name for p in tmp_path.iterdir()] == ['notes.txt']
    (tmp_path / 'file').write_text('x')
    with pytest.raises(ValueError, match='not a folder'):
        write_colmap(tmp_path / 'file', images, points)


def test_errors_come_from_the_confidence():
    np.testing.assert_allclose(point_errors(np.array([2.0, 10.0, 0.0, np.nan])),
                               [0.5, 0.1, -1.0, -1.0])
