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

"""``lingbot-ros-replay`` in-process: fixture reproduction, inputs, flags, errors."""

import json
from pathlib import Path

from conftest import write_bag
from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig
from lingbot_ros.streaming.ply import read_ply
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.trajectory import intrinsics_from_fov, pose_enc_to_matrix, read_tum
from lingbot_ros.tools import scene
from lingbot_ros.tools.replay import main
import numpy as np
import pytest

DATA = Path(__file__).resolve().parents[1] / 'data' / 'parity'
BASIC = DATA / 'basic'
FIXTURE_ARGS = ['--model-config', str(BASIC / 'config.json'),
                '--checkpoint', str(BASIC / 'weights.safetensors'), '--device', 'cpu', '--quiet']
POSE_TOL = {'atol': 1e-5, 'rtol': 1e-4}
DENSE_TOL = {'atol': 1e-4, 'rtol': 1e-4}


def _compare(mine, ref, frames=slice(None)):
    for key in ref.files:
        expected = ref[key][frames]
        assert mine[key].shape == expected.shape, key
        if key in ('frame_type', 'is_keyframe'):
            np.testing.assert_array_equal(mine[key], expected, err_msg=key)
        else:
            tol = DENSE_TOL if key in ('depth', 'depth_conf', 'intrinsic') else POSE_TOL
            np.testing.assert_allclose(mine[key], expected, err_msg=key, **tol)


@pytest.fixture(scope='module')
def basic_run(tmp_path_factory):
    out = tmp_path_factory.mktemp('replay')
    rc = main(FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'),
                              '--out', str(out / 'o.npz'), '--trajectory', str(out / 't.tum'),
                              '--kv-stats', str(out / 'kv.json')])
    return rc, out


def test_replay_reproduces_basic_fixture(basic_run):
    rc, out = basic_run
    assert rc == 0
    ref = np.load(BASIC / 'outputs.npz')
    mine = np.load(out / 'o.npz')
    assert set(ref.files) <= set(mine.files)
    _compare(mine, ref)


def test_replay_trajectory_is_camera_to_world_tum(basic_run):
    _, out = basic_run
    stamps, poses = read_tum(out / 't.tum')
    ref = np.load(BASIC / 'outputs.npz')
    assert len(stamps) == 12 and np.all(np.diff(stamps) > 0)
    # [R(q) | T] of the encoding is camera-to-world in this package (spec section 8)
    np.testing.assert_allclose(poses[:, :3, :4], ref['extrinsic_w2c'], atol=1e-5)


def test_replay_kv_stats_file(basic_run):
    _, out = basic_run
    mine = json.loads((out / 'kv.json').read_text())['steps']
    ref = json.loads((BASIC / 'kv_stats.json').read_text())['steps']
    assert [m['agg_attended_kv_tokens_block0'] for m in mine] == \
        [r['agg_attended_kv_tokens_block0'] for r in ref]
    assert [m['after_forward']['visible_kv_tokens'] for m in mine] == \
        [r['after_forward']['visible_kv_tokens'] for r in ref]


def _map_of(outputs, images, cfg):
    """Rebuild the accumulated map from a run's npz: what --ply must have written."""
    cloud = MapCloud(cfg)
    h, w = outputs['depth'].shape[1:3]
    for i, enc in enumerate(outputs['pose_enc']):
        k = intrinsics_from_fov(enc[7], enc[8], h, w)
        rgb = np.round(np.clip(images[i], 0, 1).transpose(1, 2, 0) * np.float32(255))
        cloud.add(FrameResult(
            stamp_ns=i, index=i, frame_type=FrameType(int(outputs['frame_type'][i])),
            pose_c2w=pose_enc_to_matrix(enc), pose_enc=enc, intrinsics=k, intrinsics_model=k,
            input_hw=(h, w), model_hw=(h, w), depth=outputs['depth'][i, ..., 0],
            confidence=outputs['depth_conf'][i], colors=rgb.astype(np.uint8)))
    return cloud


def test_ply_holds_the_accumulated_map_of_the_run(tmp_path):
    rc = main(FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'), '--out',
                              str(tmp_path / 'o.npz'), '--ply', str(tmp_path / 'map.ply'),
                              '--map-voxel-size', '0.05'])
    assert rc == 0
    xyz, rgb, conf = read_ply(tmp_path / 'map.ply')
    cloud = _map_of(np.load(tmp_path / 'o.npz'), np.load(BASIC / 'images.npy'),
                    MapCloudConfig(voxel_size=0.05))
    snap = cloud.snapshot()
    assert cloud.keyframes == 12 and len(xyz) == len(cloud) > 100
    np.testing.assert_array_equal(xyz, snap.xyz)
    np.testing.assert_array_equal(rgb, snap.rgb)
    np.testing.assert_array_equal(conf, snap.confidence)


def test_ply_map_is_bounded_and_keeps_depth_on(tmp_path, capsys):
    cfg = tmp_path / 'no_depth.json'
    data = json.loads((BASIC / 'config.json').read_text())
    data['inference'] = {'stream': {'with_depth': False, 'scale_frames': 8}}
    cfg.write_text(json.dumps(data))
    rc = main(['--model-config', str(cfg), '--checkpoint', str(BASIC / 'weights.safetensors'),
               '--device', 'cpu', '--images', str(BASIC / 'images.npy'), '--ply',
               str(tmp_path / 'map.ply'), '--map-max-points', '40'])
    assert rc == 0
    assert len(read_ply(tmp_path / 'map.ply')[0]) == 40
    err = capsys.readouterr().err
    assert 'map: 40 points from 12 keyframes' in err and 'map.ply' in err


def test_flags_override_the_config_block(tmp_path):
    images = tmp_path / 'seven.npy'
    np.save(images, np.load(BASIC / 'images.npy')[:7])
    rc = main(FIXTURE_ARGS + ['--images', str(images), '--out', str(tmp_path / 'o.npz'),
                              '--keyframe-interval', '2', '--scale-frames', '4'])
    assert rc == 0
    frame_type = np.load(tmp_path / 'o.npz')['frame_type']
    assert list(frame_type) == [0, 0, 0, 0, 1, 2, 1]


def test_image_folder_is_preprocessed_as_the_reference(tmp_path):
    """The shipped PNGs of frames 0-2, replayed, give the fixture's scale-phase outputs."""
    folder = DATA / 'preprocess' / 'inputs' / 'chelsea_sweep'
    rc = main(FIXTURE_ARGS + ['--images', str(folder), '--image-size', '84',
                              '--out', str(tmp_path / 'o.npz')])
    assert rc == 0
    _compare(np.load(tmp_path / 'o.npz'), np.load(BASIC / 'outputs.npz'), slice(0, 3))


def test_video_input(tmp_path):
    cv2 = pytest.importorskip('cv2')
    path = tmp_path / 'clip.avi'
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 10, (84, 56))
    if not writer.isOpened():
        pytest.skip('no MJPG encoder in this OpenCV build')
    rng = np.random.default_rng(0)
    for _ in range(5):
        writer.write(rng.integers(0, 256, (56, 84, 3), dtype=np.uint8))
    writer.release()
    rc = main(['--preset', 'tiny', '--device', 'cpu', '--quiet', '--images', str(path),
               '--image-size', '84', '--scale-frames', '2', '--out', str(tmp_path / 'o.npz')])
    assert rc == 0
    out = np.load(tmp_path / 'o.npz')
    assert out['depth'].shape == (5, 56, 84, 1) and list(out['frame_type'][:3]) == [0, 0, 1]


BAG_STAMPS = [5_000_000_000, 5_130_000_000, 5_210_000_000, 5_400_000_000]  # not index / fps
TINY = ['--preset', 'tiny', '--device', 'cpu', '--quiet', '--image-size', '84',
        '--scale-frames', '2']


@pytest.mark.parametrize('storage', ['sqlite3', 'mcap'])
def test_a_bag_replays_with_its_header_stamps(tmp_path, capsys, storage):
    frames = [f.image for f in scene.frames(len(BAG_STAMPS), 84, 56)]
    late = [s + 7_000_000 for s in BAG_STAMPS]
    bag = write_bag(tmp_path / 'bag', {
        '/cam/image_raw': [(s, f, 'cam_optical') for s, f in zip(BAG_STAMPS, frames)],
        '/cam/compressed': [(s, f, 'cam_optical') for s, f in zip(late, frames)]}, storage)
    err = _error(capsys, TINY + ['--images', str(bag)])
    assert 'several image topics, choose one with --topic' in err
    assert '/cam/image_raw (Image, 4 messages)' in err and '/cam/compressed (Compressed' in err
    err = _error(capsys, TINY + ['--images', str(bag), '--topic', '/cam/depth'])
    assert 'no Image or CompressedImage topic /cam/depth' in err and '/cam/image_raw' in err
    for topic, stamps in (('/cam/image_raw', BAG_STAMPS), ('/cam/compressed', late)):
        tum = tmp_path / f'{topic.rsplit("/", 1)[-1]}.tum'
        rc = main(TINY + ['--images', str(bag), '--topic', topic, '--trajectory', str(tum),
                          '--out', str(tmp_path / 'o.npz')])
        assert rc == 0
        got, poses = read_tum(tum)
        assert [round(t * 1e9) for t in got] == stamps and poses.shape == (4, 4, 4)
        assert np.load(tmp_path / 'o.npz')['depth'].shape[0] == 4
    # a storage file of the bag names the bag too
    stored = next(p for p in bag.iterdir() if p.suffix in ('.db3', '.mcap'))
    tum = tmp_path / 'from_file.tum'
    assert main(TINY + ['--images', str(stored), '--topic', '/cam/image_raw',
                        '--trajectory', str(tum)]) == 0
    assert [round(t * 1e9) for t in read_tum(tum)[0]] == BAG_STAMPS


def _error(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith('lingbot-ros-replay: error')
    return err


def test_errors_are_one_line_with_exit_code_2(tmp_path, capsys):
    missing = tmp_path / 'none.npy'
    assert str(missing) in _error(capsys, FIXTURE_ARGS + ['--images', str(missing)])

    folder = tmp_path / 'imgs'
    folder.mkdir()
    (folder / '000.png').write_bytes(b'not a png at all')
    assert '000.png' in _error(capsys, FIXTURE_ARGS + ['--images', str(folder)])

    bad = tmp_path / 'bad.npy'
    np.save(bad, np.zeros((3, 42, 84), np.float32))
    assert 'expected [S, 3, H, W]' in _error(capsys, FIXTURE_ARGS + ['--images', str(bad)])

    weights = str(BASIC / 'weights.safetensors')
    err = _error(capsys, ['--preset', 'tiny', '--checkpoint', weights, '--device', 'cpu',
                          '--images', str(BASIC / 'images.npy'), '--quiet'])
    assert weights in err and 'pos_embed' in err

    err = _error(capsys, ['--checkpoint', str(tmp_path / 'w.pt'), '--images',
                          str(BASIC / 'images.npy'), '--quiet'])
    assert 'w.pt' in err and 'no such file' in err

    err = _error(capsys, FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'),
                                         '--sliding-window', '0'])
    assert 'sliding_window=0' in err

    err = _error(capsys, FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'), '--ply',
                                         str(tmp_path / 'm.ply'), '--map-voxel-size', '0'])
    assert 'voxel_size=0.0' in err and '--map-voxel-size' in err

    err = _error(capsys, FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'), '--ply',
                                         str(tmp_path / 'no' / 'such' / 'dir' / 'm.ply')])
    assert 'cannot write output' in err


COURTHOUSE = Path(__file__).resolve().parents[2] / '..' / 'shared' / 'data' / 'courthouse'


def _pycolmap_model(folder):
    pycolmap = pytest.importorskip('pycolmap')  # a test dependency: installed in CI
    rec = pycolmap.Reconstruction()
    rec.read_text(str(folder / 'sparse' / '0'))
    return rec, pycolmap


@pytest.mark.skipif(not COURTHOUSE.is_dir(), reason=f'{COURTHOUSE}: shared sample images '
                    'missing')
def test_colmap_model_of_the_courthouse_reads_back_in_pycolmap(tmp_path):
    out = tmp_path / 'colmap'
    rc = main(['--preset', 'tiny', '--device', 'cpu', '--quiet', '--images', str(COURTHOUSE),
               '--image-size', '84', '--scale-frames', '4', '--out', str(tmp_path / 'o.npz'),
               '--ply', str(tmp_path / 'map.ply'), '--map-voxel-size', '0.001',
               '--colmap', str(out)])
    assert rc == 0
    arrays = np.load(tmp_path / 'o.npz')
    keyframes = np.flatnonzero(arrays['is_keyframe'])
    rec, pycolmap = _pycolmap_model(out)
    assert rec.num_images() == rec.num_cameras() == len(keyframes) == 48
    depth = arrays['depth'][..., 0]
    h, w = depth.shape[1:]
    for img in rec.images.values():
        i = int(img.name[:6])
        cam = rec.cameras[img.camera_id]
        assert cam.model == pycolmap.CameraModelId.PINHOLE and (cam.width, cam.height) == (w, h)
        k = intrinsics_from_fov(arrays['pose_enc'][i, 7], arrays['pose_enc'][i, 8], h, w)
        np.testing.assert_allclose(cam.params, [k[0, 0], k[1, 1], k[0, 2] + 0.5, k[1, 2] + 0.5],
                                   rtol=1e-5)
        w2c = np.linalg.inv(pose_enc_to_matrix(arrays['pose_enc'][i]))
        np.testing.assert_allclose(img.cam_from_world().matrix(), w2c[:3], atol=1e-5)
        assert (out / 'images' / img.name).stat().st_size > 0
    # the points are the map of --ply
    xyz, rgb, conf = read_ply(tmp_path / 'map.ply')
    ids = sorted(rec.points3D)
    assert len(ids) == len(xyz) > 1000
    got = np.array([rec.points3D[i].xyz for i in ids]).astype(np.float32)
    np.testing.assert_array_equal(got, xyz)
    np.testing.assert_array_equal(np.array([rec.points3D[i].color for i in ids]), rgb)
    # each lands, at its depth, on a pixel of a keyframe that saw it
    seen = np.zeros(len(xyz), bool)
    for img in rec.images.values():
        cam, d = rec.cameras[img.camera_id], depth[int(img.name[:6])]
        pts = img.cam_from_world() * xyz.astype(np.float64)
        front = pts[:, 2] > 0
        uv = np.full((len(pts), 2), -1.0)
        uv[front] = cam.img_from_cam(pts[front])
        inside = front & np.all((uv >= 0) & (uv < [w, h]), axis=1)
        iu = np.clip(uv[:, 0].astype(int), 0, w - 1)
        iv = np.clip(uv[:, 1].astype(int), 0, h - 1)
        seen |= inside & (np.abs(d[iv, iu] - pts[:, 2]) < 0.01 * np.abs(pts[:, 2]))
    assert seen.mean() > 0.99, seen.mean()


def test_colmap_keeps_the_latest_keyframes_at_the_bound(tmp_path, capsys):
    rc = main(FIXTURE_ARGS[:-1] + ['--images', str(BASIC / 'images.npy'), '--colmap',
                                   str(tmp_path / 'm'), '--colmap-max-keyframes', '3'])
    assert rc == 0
    rec, _ = _pycolmap_model(tmp_path / 'm')
    assert sorted(i.name for i in rec.images.values()) == [
        '000009.jpg', '000010.jpg', '000011.jpg']
    assert sorted(p.name for p in (tmp_path / 'm' / 'images').iterdir()) == [
        '000009.jpg', '000010.jpg', '000011.jpg']
    err = capsys.readouterr().err
    assert f'colmap: 3 keyframe images, {rec.num_points3D()} points -> {tmp_path / "m"}' in err
    err = _error(capsys, FIXTURE_ARGS + ['--images', str(BASIC / 'images.npy'), '--colmap',
                                         str(tmp_path / 'n'), '--colmap-max-keyframes', '0'])
    assert '--colmap-max-keyframes=0' in err
