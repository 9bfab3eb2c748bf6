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
``lingbot-ros-replay --odometry / --depth-images``: every output in metres, or model units.

The odometry is the model's own camera track (from a replay without it) times a known
scale, carried into another rigid frame through a base -> camera lever arm: the replay
must find that scale and write the model's outputs times it. The tiny model's random
weights move its camera only a few hundredths of a unit, so the scale is chosen to make
the base drive about two metres (a fit the estimator accepts).
"""

from pathlib import Path
import re

import cv2
from lingbot_ros.streaming.ply import read_ply
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.robot_frame import PairedOdometry, parse_base_to_camera
from lingbot_ros.streaming.scale.estimate import ScaleSource
from lingbot_ros.streaming.trajectory import (invert_rigid, matrix_to_pose_enc, read_tum,
                                              write_tum)
from lingbot_ros.tools import scene
from lingbot_ros.tools.replay import main
from lingbot_ros.tools.replay_metric import MetricInputs, ScaleInput
import numpy as np
import pytest
from synthetic_robot import random_rigid, robot_run, rot_z

FRAMES = 40
TINY = ['--preset', 'tiny', '--device', 'cpu', '--quiet', '--image-size', '84',
        '--scale-frames', '4']
LEVER = '0.25 -0.1 0.6 -0.5 0.5 -0.5 0.5'  # camera ahead, aside, above; looking along x
TRAVEL_M = 2.0


VOXEL = 0.004  # model units: fine enough that the tiny model's map has many points


@pytest.fixture(scope='module')
def images(tmp_path_factory):
    return scene.write(tmp_path_factory.mktemp('scene') / 'rgb', FRAMES, 84, 56)


@pytest.fixture(scope='module')
def baseline(tmp_path_factory, images):
    """Replay without a scale source: (folder, npz, stamps, poses), map and COLMAP too."""
    out = tmp_path_factory.mktemp('model')
    rc, model, stamps, poses = replay(out, images, '--ply', str(out / 'model.ply'),
                                      '--map-voxel-size', str(VOXEL), '--colmap',
                                      str(out / 'colmap'), name='model')
    assert rc == 0
    return out, model, stamps, poses


def replay(out: Path, images: Path, *extra: str, name: str = 'run') -> tuple:
    """Run the replay; return (exit code, npz, stamps, camera poses) of its outputs."""
    npz, tum = out / f'{name}.npz', out / f'{name}.tum'
    rc = main(TINY + ['--images', str(images), '--out', str(npz), '--trajectory', str(tum),
                      *extra])
    if rc != 0:
        return rc, None, None, None
    return rc, np.load(npz), *read_tum(tum)


def scale_for(poses: np.ndarray) -> float:
    """Metres per model unit that make the camera's track spread over TRAVEL_M."""
    pos = poses[:, :3, 3]
    return TRAVEL_M / float(np.sqrt(np.mean(np.sum((pos - pos.mean(0)) ** 2, -1))))


def metric_track(poses: np.ndarray, windows: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Camera poses in metres: each model step of window w times s_w (tied where they meet)."""
    out = poses.copy()
    out[0, :3, 3] = scales[windows[0]] * poses[0, :3, 3]
    for i in range(1, len(poses)):
        step = poses[i, :3, 3] - poses[i - 1, :3, 3]
        out[i, :3, 3] = out[i - 1, :3, 3] + scales[windows[i]] * step
    return out


def write_odometry(path: Path, stamps: np.ndarray, camera_metric: np.ndarray,
                   seed: int = 3) -> Path:
    """Write the base's TUM trajectory, in an odom frame a random rigid transform away."""
    odom_from_map = random_rigid(np.random.default_rng(seed), 20.0)
    base = odom_from_map @ camera_metric @ invert_rigid(parse_base_to_camera(LEVER))
    # one pose a second before and after: the frames lie inside the odometry's span
    write_tum(path, np.concatenate([stamps[:1] - 1, stamps, stamps[-1:] + 1]),
              np.concatenate([base[:1], base, base[-1:]]))
    return path


def test_odometry_of_the_models_track_times_a_scale_gives_metres(tmp_path, images, baseline,
                                                                 capsys):
    _, model, _, poses = baseline
    capsys.readouterr()
    scale = scale_for(poses)
    # the frames on the odometry's clock: TUM RGB-D's 'stamp name' lines, in any order
    stamps = 1.7e9 + np.cumsum(np.random.default_rng(0).uniform(0.05, 0.15, FRAMES))
    names = sorted(p.name for p in images.glob('*.png'))
    lines = [f'{s:.6f} rgb/{n}' for s, n in zip(stamps, names)]
    (tmp_path / 'rgb.txt').write_text('# timestamp filename\n' + '\n'.join(lines[::-1]) + '\n')
    camera = poses.copy()
    camera[:, :3, 3] *= scale
    odom = write_odometry(tmp_path / 'base.tum', stamps, camera)
    rc, got, got_stamps, got_poses = replay(
        tmp_path, images, '--stamps', str(tmp_path / 'rgb.txt'), '--odometry', str(odom),
        '--base-to-camera', LEVER, name='metric')
    assert rc == 0
    np.testing.assert_allclose(got_stamps, stamps, rtol=0, atol=1e-6)
    assert str(got['unit']) == 'metre'
    np.testing.assert_allclose(got['metric_scale'], scale, rtol=0.01)
    assert np.all(got['metric_scale_sigma'] < 0.01 * scale)
    # the trajectory is the model's times the scale, in the model's map axes
    np.testing.assert_allclose(got_poses[:, :3, 3], scale * poses[:, :3, 3], rtol=1e-4,
                               atol=1e-4 * TRAVEL_M)
    np.testing.assert_allclose(got_poses[:, :3, :3], poses[:, :3, :3], atol=1e-6)
    # so is every array of the npz; what is not a length stays as it was
    np.testing.assert_allclose(got['pose_enc'][:, :3], scale * model['pose_enc'][:, :3],
                               rtol=1e-4, atol=1e-4 * TRAVEL_M)
    np.testing.assert_allclose(got['extrinsic_w2c'][:, :, 3], got_poses[:, :3, 3],
                               rtol=1e-5, atol=1e-5 * TRAVEL_M)
    np.testing.assert_allclose(got['pose_enc_iters'][..., :3],
                               scale * model['pose_enc_iters'][..., :3], rtol=1e-4,
                               atol=1e-4 * TRAVEL_M)
    np.testing.assert_allclose(got['depth'], scale * model['depth'], rtol=1e-5)
    for key in ('intrinsic', 'depth_conf', 'frame_type'):
        np.testing.assert_array_equal(got[key], model[key], err_msg=key)
    assert 'metric_scale' not in model.files  # no scale source: the fixture's arrays only
    assert capsys.readouterr().err == ''  # --quiet: a scale found needs no word


def test_several_windows_keep_one_metric_frame(tmp_path, images):
    window = ['--max-window-frames', '16']
    _, model, stamps, poses = replay(tmp_path, images, *window, name='model')
    windows = model['window_index']
    counts = np.bincount(windows)
    assert len(counts) >= 3 and counts.min() >= 12, counts  # each window fits on its own
    # the model's units drift per window: the truth has a scale of its own in each
    scales = scale_for(poses) * (1.0 + 0.2 * np.arange(len(counts)) * (-1) ** np.arange(
        len(counts)))
    truth = metric_track(poses, windows, scales)
    odom = write_odometry(tmp_path / 'base.tum', stamps, truth)
    rc, got, _, got_poses = replay(tmp_path, images, *window, '--odometry', str(odom),
                                   '--base-to-camera', LEVER, name='metric')
    assert rc == 0
    np.testing.assert_array_equal(got['window_index'], windows)
    np.testing.assert_allclose(got['metric_scale'], scales[windows], rtol=0.01)
    # one metric frame: the metric track is continuous where windows meet, and is the truth
    np.testing.assert_allclose(got_poses[:, :3, 3], truth[:, :3, 3], rtol=1e-4,
                               atol=1e-4 * TRAVEL_M)
    np.testing.assert_allclose(got['depth'][..., 0],
                               model['depth'][..., 0] * scales[windows][:, None, None],
                               rtol=1e-5)


def _turning_on_the_spot(stamps: np.ndarray) -> np.ndarray:
    base = np.tile(np.eye(4), (len(stamps), 1, 1))
    base[:, :3, :3] = np.stack([rot_z(a) for a in np.linspace(0, 3.0, len(stamps))])
    base[:, :3, 3] = [1.0, 2.0, 0.0]
    return base


@pytest.mark.parametrize('motion, why', [('still', 'standing still'),
                                         ('turning', 'not travelled far enough')])
def test_odometry_that_does_not_observe_the_scale_keeps_model_units(tmp_path, images, baseline,
                                                                    capsys, motion, why):
    _, model, stamps, poses = baseline
    base = _turning_on_the_spot(stamps)
    if motion == 'still':
        base[:] = base[0]
    write_tum(tmp_path / 'base.tum', stamps, base)
    capsys.readouterr()
    rc, got, got_stamps, got_poses = replay(
        tmp_path, images, '--odometry', str(tmp_path / 'base.tum'), '--base-to-camera', LEVER,
        name='kept')
    assert rc == 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and 'keeping model units' in err and why in err, err
    assert str(got['unit']) == 'model' and np.all(np.isnan(got['metric_scale']))
    np.testing.assert_array_equal(got_poses, poses)
    for key in model.files:
        np.testing.assert_array_equal(got[key], model[key], err_msg=key)


def _colmap_centres(folder: Path) -> dict:
    pycolmap = pytest.importorskip('pycolmap')  # a test dependency: installed in CI
    rec = pycolmap.Reconstruction()
    rec.read_text(str(folder / 'sparse' / '0'))
    return {int(img.name[:6]): img.projection_center() for img in rec.images.values()}


def test_ply_and_colmap_are_in_metres(tmp_path, images, baseline, capsys):
    model_dir, _, stamps, poses = baseline
    scale = scale_for(poses)
    camera = poses.copy()
    camera[:, :3, 3] *= scale
    odom = write_odometry(tmp_path / 'base.tum', stamps, camera)
    capsys.readouterr()
    loud = [a for a in TINY if a != '--quiet']  # and without --quiet the scale is said
    npz, tum = tmp_path / 'metric.npz', tmp_path / 'metric.tum'
    rc = main(loud + ['--images', str(images), '--out', str(npz), '--trajectory', str(tum),
                      '--odometry', str(odom), '--base-to-camera', LEVER, '--ply',
                      str(tmp_path / 'metric.ply'), '--map-voxel-size', str(VOXEL * scale),
                      '--colmap', str(tmp_path / 'metric')])
    assert rc == 0
    got, got_poses = np.load(npz), read_tum(tum)[1]
    assert str(got['unit']) == 'metre'
    err = capsys.readouterr().err
    said = re.search(r'metric scale from odometry: window 0: (\S+) \+- ', err)
    assert said and float(said.group(1)) == pytest.approx(scale, rel=1e-5), err
    assert '(scale: metres)' in err
    # the map: the same voxels (their edge in metres now), each point times the scale
    model_xyz, model_rgb, _ = read_ply(model_dir / 'model.ply')
    xyz, rgb, _ = read_ply(tmp_path / 'metric.ply')
    assert len(xyz) == len(model_xyz) > 1000
    np.testing.assert_allclose(xyz, scale * model_xyz, rtol=1e-4, atol=1e-4 * TRAVEL_M)
    np.testing.assert_array_equal(rgb, model_rgb)
    # the COLMAP model: camera centres are the metric trajectory's, points the map's
    centres, model_centres = _colmap_centres(tmp_path / 'metric'), \
        _colmap_centres(model_dir / 'colmap')
    assert len(centres) == FRAMES
    for i in centres:
        np.testing.assert_allclose(centres[i], got_poses[i, :3, 3], atol=1e-4 * TRAVEL_M)
    first, last = min(centres), max(centres)
    dist = np.linalg.norm(centres[last] - centres[first])
    assert dist == pytest.approx(np.linalg.norm(got_poses[last, :3, 3]
                                                - got_poses[first, :3, 3]), rel=1e-5)
    assert dist == pytest.approx(scale * np.linalg.norm(model_centres[last]
                                                        - model_centres[first]), rel=1e-4)
    points = np.loadtxt(tmp_path / 'metric' / 'sparse' / '0' / 'points3D.txt', usecols=(1, 2, 3))
    assert len(points) == len(xyz)


@pytest.mark.parametrize('form', ['png_mm_by_name', 'float_twice_the_size_by_order'])
def test_depth_images_give_the_scale(tmp_path, images, baseline, form):
    _, model, _, poses = baseline
    factor = 2.5 / float(np.nanmedian(model['depth']))  # the scene about 2.5 m away
    depth = tmp_path / 'depth'
    depth.mkdir()
    names = sorted(p.stem for p in images.glob('*.png'))
    for i, d in enumerate(model['depth'][..., 0] * factor):
        if form == 'png_mm_by_name':
            mm = np.round(np.nan_to_num(d) * 1000).clip(0, 65535).astype(np.uint16)
            assert cv2.imwrite(str(depth / f'{names[i]}.png'), mm)
        else:
            big = np.repeat(np.repeat(d, 2, axis=0), 2, axis=1).astype(np.float32)
            np.save(depth / f'd{i:03d}.npy', big)
    rc, got, _, got_poses = replay(tmp_path, images, '--depth-images', str(depth),
                                   name='metric')
    assert rc == 0 and str(got['unit']) == 'metre'
    np.testing.assert_allclose(got['metric_scale'], factor, rtol=0.01)
    np.testing.assert_allclose(got_poses[:, :3, 3], got['metric_scale'][:, None]
                               * poses[:, :3, 3], rtol=1e-4, atol=1e-6)


def _refused(capsys, argv) -> str:
    rc = main(TINY + argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith('lingbot-ros-replay: error')
    return err


def test_invalid_scale_inputs_are_refused_in_one_line(tmp_path, images, capsys):
    odom = tmp_path / 'base.tum'
    write_tum(odom, [-1.0, 100.0], np.stack([np.eye(4), np.eye(4)]))
    run = ['--images', str(images), '--out', str(tmp_path / 'o.npz')]
    err = _refused(capsys, run + ['--odometry', str(odom), '--base-to-camera', '1 2 3'])
    assert '--base-to-camera' in err and 'expected 7 numbers' in err
    err = _refused(capsys, run + ['--odometry', str(odom), '--base-to-camera', '0 0 0 0 0 0 0'])
    assert 'quaternion is zero' in err
    assert '--base-to-camera' in _refused(capsys, run + ['--odometry', str(odom)])
    assert 'only with --odometry' in _refused(capsys, run + ['--base-to-camera', LEVER])
    err = _refused(capsys, run + ['--odometry', str(tmp_path / 'none.tum'),
                                  '--base-to-camera', LEVER])
    assert 'none.tum' in err and 'cannot read' in err
    (tmp_path / 'bad.tum').write_text('0 1 2 3\nnot a pose\n')
    err = _refused(capsys, run + ['--odometry', str(tmp_path / 'bad.tum'),
                                  '--base-to-camera', LEVER])
    assert 'bad.tum' in err and 'not a TUM trajectory' in err
    write_tum(tmp_path / 'late.tum', [1000.0, 1001.0], np.stack([np.eye(4), np.eye(4)]))
    err = _refused(capsys, run + ['--odometry', str(tmp_path / 'late.tum'),
                                  '--base-to-camera', LEVER])
    assert 'late.tum' in err and "covers none of the frames' stamps" in err
    err = _refused(capsys, run + ['--odometry', str(odom), '--base-to-camera', LEVER,
                                  '--depth-images', str(tmp_path)])
    assert 'give one' in err
    # stamps and depth images that do not fit the frames
    (tmp_path / 'stamps.txt').write_text('0.0\n0.1\n')
    err = _refused(capsys, run + ['--stamps', str(tmp_path / 'stamps.txt')])
    assert f'2 stamps for {FRAMES} frames' in err
    (tmp_path / 'stamps.txt').write_text('zero\n')
    assert 'line 1' in _refused(capsys, run + ['--stamps', str(tmp_path / 'stamps.txt')])
    depth = tmp_path / 'depth'
    depth.mkdir()
    err = _refused(capsys, run + ['--depth-images', str(depth)])
    assert '0 depth images' in err and f'{FRAMES} frames' in err
    for i in range(FRAMES):
        np.save(depth / f'{i:03d}.npy', np.ones((84, 84), np.float32))
    err = _refused(capsys, run + ['--depth-images', str(depth)])
    assert 'register the depth' in err
    for i in range(FRAMES):
        np.save(depth / f'{i:03d}.npy', np.ones((56, 84), np.uint8))
    assert 'uint8' in _refused(capsys, run + ['--depth-images', str(depth)])
    err = _refused(capsys, run + ['--depth-images', str(depth), '--depth-units-per-metre', '0'])
    assert '--depth-units-per-metre' in err


def _results(camera_model: np.ndarray, stamps: np.ndarray, epochs: np.ndarray) -> list:
    k = np.eye(3)
    return [FrameResult(stamp_ns=int(round(t * 1e9)), index=i, frame_type=FrameType.KEYFRAME,
                        pose_c2w=pose, pose_enc=matrix_to_pose_enc(pose, [1.0, 1.0]).astype(
                            np.float32), intrinsics=k, intrinsics_model=k, input_hw=(4, 4),
                        model_hw=(4, 4), map_epoch=int(e))
            for i, (pose, t, e) in enumerate(zip(camera_model, stamps, epochs))]


@pytest.mark.parametrize('second_map_observable', [True, False])
def test_a_restarted_map_gets_a_metric_frame_of_its_own(second_map_observable):
    """A map restart (a new map epoch) is another frame: its scale is fitted apart."""
    run = robot_run(5, 0.5, n=160, duration_s=80.0)
    epochs = np.repeat([1, 2], 80)
    model = run.camera_model.copy()
    # the second map: another origin, orientation and unit (0.25 m per its unit)
    other = random_rigid(np.random.default_rng(9), 3.0)
    model[80:] = other @ model[80:]
    model[80:, :3, 3] *= 2.0
    odometry = run.odometry.copy()
    if not second_map_observable:
        odometry[80:] = odometry[80]
    paired = PairedOdometry(np.ones(160, dtype=bool), odometry)
    source = MetricInputs(ScaleSource.ODOMETRY, odometry='base.tum',
                          base_to_camera=run.base_to_camera)
    results = _results(model, run.stamps, epochs)
    scale = ScaleInput(source, odometry=paired).fit(results)
    metric = scale.results(results)
    got = np.stack([r.pose_c2w for r in metric])
    if second_map_observable:
        assert scale.metric and 'map 0: metric scale' in scale.message
        np.testing.assert_allclose(scale.scales, np.repeat([0.5, 0.25], 80), rtol=1e-6)
        # each map in metres from its own origin: not tied to the other map's last frame
        np.testing.assert_allclose(got[:80, :3, 3], 0.5 * model[:80, :3, 3], atol=1e-6)
        np.testing.assert_allclose(got[80:, :3, 3], 0.25 * model[80:, :3, 3], atol=1e-6)
    else:
        assert not scale.metric and np.all(np.isnan(scale.scales))
        assert scale.message.startswith('map 1: no metric scale from odometry')
        assert scale.message.endswith('(every map keeps model units)')
        np.testing.assert_array_equal(got, model)
        assert str(scale.arrays({})['unit']) == 'model'
