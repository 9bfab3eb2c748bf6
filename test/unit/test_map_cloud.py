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

"""The accumulated map: ground truth of the demo room, exact merging, the bound, PLY."""

import math

from conftest import unproject_plain
from hypothesis import given, settings
from hypothesis import strategies as st
from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.map_cloud import (AddOutcome, MapCloud, MapCloudConfig, packed_rows,
                                             percentile_linear, unproject)
from lingbot_ros.streaming.ply import PlyError, read_ply, write_ply
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.tools import scene
import numpy as np
import pytest

H, W = 98, 130  # a decimated 392x518 model grid
VOXEL = 0.07    # no wall of the room lies on a voxel boundary


def wall_distance(xyz):
    """Distance of points inside the room to its nearest face (floor, ceiling, walls)."""
    xyz = np.asarray(xyz, np.float64)
    per_axis = [np.minimum(abs(xyz[:, a] - scene.ROOM[n][0]), abs(xyz[:, a] - scene.ROOM[n][1]))
                for a, n in enumerate('xyz')]
    return np.min(per_axis, axis=0)


def result(index, pose, depth=None, k=None, colors=None, confidence=None,
           frame_type=FrameType.KEYFRAME, epoch=0):
    k = scene.intrinsics(W, H) if k is None else k
    hw = (H, W) if depth is None else depth.shape
    return FrameResult(stamp_ns=index, index=index, frame_type=frame_type, pose_c2w=pose,
                       pose_enc=np.zeros(9, np.float32), intrinsics=k, intrinsics_model=k,
                       input_hw=hw, model_hw=hw, map_epoch=epoch, depth=depth,
                       confidence=confidence, colors=colors)


@pytest.fixture(scope='module')
def room():
    """Ground-truth keyframes of the demo walk: pose, intrinsics, depth, confidence 2."""
    k = scene.intrinsics(W, H)
    out = []
    for f in scene.frames(10, W, H):
        depth = scene.depth(f.pose_c2w, k, W, H)
        out.append(result(f.index, f.pose_c2w, depth, k, f.image, np.full((H, W), 2.0,
                                                                          np.float32)))
    return out


def voxel_count(points, voxel):
    return len(np.unique(np.floor(points / voxel).astype(np.int64), axis=0))


# --- ground truth ----------------------------------------------------------------------


def test_room_points_lie_on_the_room_surfaces(room):
    cloud = MapCloud(MapCloudConfig(voxel_size=VOXEL, max_points=10**6, decimation=1))
    seen = []
    for r in room:
        report = cloud.add(r)
        assert report.outcome is AddOutcome.ADDED and not report.new_epoch
        assert report.points == H * W  # confidence 2 everywhere passes the median cut
        seen.append(unproject(r, r.pose_c2w, 1, 0.0, 50.0).xyz)
    snap = cloud.snapshot()
    dist = wall_distance(snap.xyz)
    # a voxel's mean lies in the convex hull of its points, all on the room's faces
    assert dist.max() <= math.sqrt(3) * VOXEL
    # voxels away from an edge hold points of one face: their mean is on it exactly
    assert np.mean(dist < 1e-5) > 0.9
    lo = np.array([scene.ROOM[n][0] for n in 'xyz']) - 1e-5
    hi = np.array([scene.ROOM[n][1] for n in 'xyz']) + 1e-5
    assert np.all((snap.xyz >= lo) & (snap.xyz <= hi))
    # one voxel per distinct voxel of all the keyframes' points: nothing lost, nothing split
    assert len(cloud) == voxel_count(np.concatenate(seen), VOXEL)
    assert cloud.keyframes == len(room) and cloud.dropped_points == 0
    assert snap.xyz.dtype == np.float32 and snap.rgb.dtype == np.uint8
    assert np.all(snap.confidence == 2.0)


def test_the_ground_truth_points_are_exactly_on_the_walls(room):
    """The unprojection inverts the analytic ray cast: the test's premise."""
    r = room[3]
    xyz = unproject(r, r.pose_c2w, 1, 0.0, 0.0).xyz
    assert len(xyz) == H * W and wall_distance(xyz).max() < 1e-5


def test_the_bound_holds_along_the_walk_and_keeps_the_newest(room):
    last = unproject(room[-1], room[-1].pose_c2w, 2, 0.0, 50.0).xyz
    newest = {tuple(k) for k in np.floor(last / VOXEL).astype(int)}
    cfg = MapCloudConfig(voxel_size=VOXEL, max_points=len(newest) + 300, decimation=2)
    cloud = MapCloud(cfg)
    total = 0
    for r in room:
        report = cloud.add(r)
        total += report.dropped
        assert len(cloud) <= cfg.max_points
    assert cloud.dropped_points == total > 0 and len(cloud) == cfg.max_points
    xyz = cloud.snapshot().xyz
    assert wall_distance(xyz).max() <= math.sqrt(3) * VOXEL
    # the least recently observed went first: every voxel of the last keyframe is kept
    assert newest <= _voxels_near(xyz, VOXEL)


def _voxels_near(xyz, voxel, eps=1e-4):
    """Voxels of points, both sides where a float32 mean sits on a voxel face."""
    scaled = xyz.astype(np.float64) / voxel
    lo, hi = np.floor(scaled - eps).astype(int), np.floor(scaled + eps).astype(int)
    out = set()
    for corner in range(8):
        pick = [(corner >> a) & 1 for a in range(3)]
        keys = np.stack([hi[:, a] if pick[a] else lo[:, a] for a in range(3)], axis=1)
        out.update(map(tuple, keys))
    return out


def test_the_same_keyframe_twice_gives_the_same_voxels(room):
    cloud = MapCloud(MapCloudConfig(voxel_size=VOXEL, decimation=1))
    cloud.add(room[0])
    first = cloud.snapshot()
    report = cloud.add(room[0])
    assert report.new_voxels == 0 and report.points == H * W
    second = cloud.snapshot()
    a, b = np.lexsort(first.xyz.T), np.lexsort(second.xyz.T)
    # sums and counts both double: the means are bit for bit the same
    np.testing.assert_array_equal(first.xyz[a], second.xyz[b])
    np.testing.assert_array_equal(first.rgb[a], second.rgb[b])
    np.testing.assert_array_equal(first.confidence[a], second.confidence[b])


def test_the_pose_given_places_the_points(room):
    r = room[2]
    flip = np.array([[0.0, 0.0, 1.0, 0.5], [-1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 2.0],
                     [0.0, 0.0, 0.0, 1.0]])
    cloud = MapCloud(MapCloudConfig(voxel_size=VOXEL))
    cloud.add(r, flip @ r.pose_c2w)
    expected = unproject(r, flip @ r.pose_c2w, 4, 0.0, 50.0).xyz
    assert len(cloud) == voxel_count(expected, VOXEL)
    back = (cloud.snapshot().xyz.astype(np.float64) - flip[:3, 3]) @ flip[:3, :3]
    dist = wall_distance(back)
    assert dist.max() <= math.sqrt(3) * VOXEL and np.mean(dist < 1e-5) > 0.9


# --- unprojection and filters ----------------------------------------------------------


def test_unproject_pixel_convention_and_filters():
    k = np.array([[2.0, 0.0, 1.0], [0.0, 4.0, 0.5], [0.0, 0.0, 1.0]])
    depth = np.array([[1.0, 2.0, np.nan, 4.0], [5.0, 0.0, 7.0, 8.0]], np.float32)
    conf = np.array([[1.0, 5.0, 9.0, 2.0], [3.0, 9.0, 4.0, 6.0]], np.float32)
    colors = np.arange(24, dtype=np.uint8).reshape(2, 4, 3)
    pose = np.eye(4)
    pose[:3, 3] = [10.0, 20.0, 30.0]
    r = result(0, pose, depth, k, colors, conf)
    pts = unproject(r, pose, 1, 0.0, 0.0)  # only the NaN and the zero depth go
    assert len(pts.xyz) == 6
    pts = unproject(r, pose, 1, 2.5, 0.0)  # and the confidences below 2.5
    np.testing.assert_array_equal(pts.confidence, [5.0, 3.0, 4.0, 6.0])
    np.testing.assert_allclose(pts.xyz[0], [(1 - 1) * 2 / 2 + 10, (0 - 0.5) * 2 / 4 + 20, 32])
    np.testing.assert_allclose(pts.xyz[2], [(2 - 1) * 7 / 2 + 10, (1 - 0.5) * 7 / 4 + 20, 37])
    np.testing.assert_array_equal(pts.rgb[2], colors[1, 2])
    # the percentile is over the frame's valid pixels: [1, 5, 2, 3, 4, 6] -> median 3.5
    np.testing.assert_array_equal(unproject(r, pose, 1, 0.0, 50.0).confidence, [5.0, 4.0, 6.0])
    # decimation keeps pixel (u, v) = (2i, 2j) at its own coordinates
    pts = unproject(r, pose, 2, 0.0, 0.0)
    np.testing.assert_allclose(pts.xyz, [[(0 - 1) * 1 / 2 + 10, (0 - 0.5) * 1 / 4 + 20, 31]])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), step=st.integers(1, 5),
       min_confidence=st.sampled_from([0.0, 1.5, 2.2]),
       percentile=st.sampled_from([0.0, 50.0, 37.5, 99.9]),
       with_conf=st.booleans(), with_colors=st.booleans())
def test_unproject_equals_the_plain_formulation(seed, step, min_confidence, percentile,
                                                with_conf, with_colors):
    """Bit for bit: the cached pixel grid and flat masks change how, not what."""
    rng = np.random.default_rng(seed)
    h, w = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    depth = rng.uniform(0.1, 5.0, (h, w)).astype(np.float32)
    depth[rng.random((h, w)) < 0.1] = np.nan
    depth[rng.random((h, w)) < 0.1] = 0.0
    conf = np.round(rng.uniform(1.0, 3.0, (h, w)), 1).astype(np.float32) if with_conf else None
    colors = rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if with_colors else None
    k = np.array([[rng.uniform(5, 50), 0, rng.uniform(0, w)],
                  [0, rng.uniform(5, 50), rng.uniform(0, h)], [0, 0, 1.0]])
    pose = np.eye(4)
    pose[:3, :3] = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    pose[:3, 3] = rng.normal(size=3)
    r = result(0, pose, depth, k, colors, conf)
    got = unproject(r, pose, step, min_confidence, percentile)
    want = unproject_plain(r, pose, step, min_confidence, percentile)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 300),
       q=st.one_of(st.sampled_from([0.0, 50.0, 99.9, 100.0]), st.floats(0.0, 100.0)),
       dtype=st.sampled_from([np.float32, np.float64]), coarse=st.booleans())
def test_percentile_linear_is_numpys(seed, n, q, dtype, coarse):
    rng = np.random.default_rng(seed)
    values = rng.uniform(1.0, 3.0, n)
    values = (np.round(values, 1) if coarse else values).astype(dtype)  # ties, when coarse
    assert percentile_linear(values, q) == float(np.percentile(values, q))


def test_frames_that_are_not_added():
    cloud = MapCloud(MapCloudConfig(voxel_size=0.5, decimation=1))
    depth = np.ones((2, 2), np.float32)
    k = np.eye(3)
    assert cloud.add(result(0, np.eye(4), depth, k, frame_type=FrameType.NON_KEYFRAME)) \
        .outcome is AddOutcome.NOT_KEYFRAME
    assert cloud.add(result(1, np.eye(4), None, k)).outcome is AddOutcome.NO_DEPTH
    assert len(cloud) == 0 and cloud.keyframes == 0
    report = cloud.add(result(2, np.eye(4), depth, k, frame_type=FrameType.SCALE))
    # pixels (u, v) at depth 1 with K = I: points (u, v, 1), four voxels of 0.5
    assert report.outcome is AddOutcome.ADDED and report.points == 4 and len(cloud) == 4
    with pytest.raises(ValueError, match='pose_map'):
        cloud.add(result(3, np.eye(4), depth, k), np.eye(3))


def test_a_new_map_epoch_clears_the_cloud():
    cloud = MapCloud(MapCloudConfig(voxel_size=0.5, decimation=1))
    depth = np.ones((2, 2), np.float32)
    k = np.eye(3)
    assert not cloud.add(result(0, np.eye(4), depth, k, epoch=1)).new_epoch
    cloud.add(result(1, np.eye(4), 2 * depth, k, epoch=1))
    assert len(cloud) == 8 and cloud.epoch == 1 and cloud.keyframes == 2
    shifted = np.eye(4)
    shifted[0, 3] = 100.0
    report = cloud.add(result(2, shifted, depth, k, epoch=2))
    assert report.new_epoch and report.outcome is AddOutcome.ADDED
    assert cloud.epoch == 2 and cloud.keyframes == 1 and len(cloud) == 4
    assert np.all(cloud.snapshot().xyz[:, 0] > 99)
    # a non-keyframe of yet another map clears too: the old points are in another frame
    report = cloud.add(result(3, np.eye(4), depth, k, frame_type=FrameType.NON_KEYFRAME,
                              epoch=3))
    assert report.new_epoch and report.outcome is AddOutcome.NOT_KEYFRAME and len(cloud) == 0
    cloud.add(result(4, np.eye(4), depth, k, epoch=3))
    cloud.clear()
    assert len(cloud) == 0 and cloud.epoch is None and cloud.stats().keyframes == 0
    assert len(cloud.snapshot().xyz) == 0 and cloud.rows().shape == (0, 5)
    assert not cloud.add(result(5, np.eye(4), depth, k, epoch=7)).new_epoch


# --- exact merging and the bound --------------------------------------------------------


def test_hand_built_points_merge_into_the_expected_voxels():
    cloud = MapCloud(MapCloudConfig(voxel_size=0.5))
    xyz = [[0.125, 0.125, 0.125], [0.375, 0.25, 0.375], [-0.125, 0.125, 0.125],
           [0.625, 0.125, 0.125], [0.875, 0.375, 0.25]]
    rgb = np.array([[1, 1, 1], [2, 2, 2], [3, 3, 3], [4, 4, 4], [5, 5, 5]], np.uint8)
    report = cloud.add_points(xyz, rgb, [1.0, 3.0, 2.0, 5.0, 4.0])
    assert (report.points, report.new_voxels, report.dropped) == (5, 3, 0)
    got = _by_voxel(cloud, 0.5)
    assert set(got) == {(0, 0, 0), (-1, 0, 0), (1, 0, 0)}
    assert got[(0, 0, 0)] == ((0.25, 0.1875, 0.25), (2, 2, 2), 3.0)
    assert got[(-1, 0, 0)] == ((-0.125, 0.125, 0.125), (3, 3, 3), 2.0)
    assert got[(1, 0, 0)] == ((0.75, 0.25, 0.1875), (4, 4, 4), 5.0)
    # a later observation: the mean takes it in; its colour wins only if as confident
    cloud.add_points([[0.25, 0.25, 0.25], [0.5, 0.0, 0.0]], [[9, 9, 9], [8, 8, 8]], [3.0, 1.0])
    got = _by_voxel(cloud, 0.5)
    assert got[(0, 0, 0)][1:] == ((9, 9, 9), 3.0)
    np.testing.assert_allclose(got[(0, 0, 0)][0], (0.25, 0.625 / 3, 0.25), rtol=1e-7)
    np.testing.assert_allclose(got[(1, 0, 0)][0], (2 / 3, 0.5 / 3, 0.125), rtol=1e-7)
    assert got[(1, 0, 0)][1:] == ((4, 4, 4), 5.0)
    assert len(cloud) == 3 and cloud.keyframes == 2


def test_the_least_recently_observed_voxels_are_dropped_first():
    cloud = MapCloud(MapCloudConfig(voxel_size=1.0, max_points=3))

    def add(*voxels, conf=None):
        pts = np.array(voxels, np.float64) + 0.5
        return cloud.add_points(pts, None, conf if conf is not None else np.ones(len(pts)))

    a, b, c, d, e, f, g, h = ((i, 0, 0) for i in range(8))
    add(a)
    add(b)
    add(c)
    add(a)  # a is now newer than b and c
    assert add(d).dropped == 1 and set(_by_voxel(cloud, 1.0)) == {a, c, d}
    assert add(e, f, conf=[1.0, 2.0]).dropped == 2  # c (oldest), then a
    assert set(_by_voxel(cloud, 1.0)) == {d, e, f}
    add(g)  # drops d
    add(h)  # e and f were seen together: the less confident e goes
    assert set(_by_voxel(cloud, 1.0)) == {f, g, h}
    assert cloud.dropped_points == 5
    # one keyframe larger than the bound keeps its most confident voxels
    report = add((10, 0, 0), (11, 0, 0), (12, 0, 0), (13, 0, 0), (14, 0, 0),
                 conf=[5.0, 1.0, 4.0, 2.0, 3.0])
    assert report.new_voxels == 5 and report.dropped == 5  # f, g, h and the two weakest
    assert set(_by_voxel(cloud, 1.0)) == {(10, 0, 0), (12, 0, 0), (14, 0, 0)}


def test_points_out_of_range_are_counted_not_merged():
    cloud = MapCloud(MapCloudConfig(voxel_size=1.0))
    report = cloud.add_points([[0.5, 0.5, 0.5], [np.nan, 0, 0], [2.0**21, 0, 0],
                               [-(2.0**20), 0, 0]])
    assert report.points == 2 and len(cloud) == 2
    assert cloud.stats().out_of_range_points == 2
    assert cloud.add_points(np.zeros((0, 3))).points == 0


def _by_voxel(cloud, voxel):
    snap = cloud.snapshot()
    keys = np.floor(snap.xyz.astype(np.float64) / voxel).astype(int)
    return {tuple(int(v) for v in key): (tuple(float(v) for v in p), tuple(int(v) for v in c),
                                         float(s))
            for key, p, c, s in zip(keys, snap.xyz, snap.rgb, snap.confidence)}


class DenseReference:
    """The map as a dict per voxel, point by point: what the vectorised code must equal."""

    def __init__(self, voxel, max_points):
        self.voxel, self.max_points = voxel, max_points
        self.voxels, self.tick, self.dropped = {}, 0, 0

    def add(self, xyz, rgb, conf):
        self.tick += 1
        for p, c, s in zip(xyz, rgb, conf):
            key = tuple(int(v) for v in np.floor(p / self.voxel))
            v = self.voxels.setdefault(key, {'sum': np.zeros(3), 'n': 0, 'conf': -1.0})
            v['sum'] = v['sum'] + p
            v['n'] += 1
            if s >= v['conf']:
                v['conf'], v['rgb'] = float(s), tuple(int(x) for x in c)
            v['seen'] = self.tick
        excess = len(self.voxels) - self.max_points
        if excess > 0:
            order = sorted(self.voxels, key=lambda k: (self.voxels[k]['seen'],
                                                       self.voxels[k]['conf']))
            for key in order[:excess]:
                del self.voxels[key]
            self.dropped += excess

    def expected(self):
        return {k: (v['sum'] / v['n'], v['rgb'], v['conf']) for k, v in self.voxels.items()}


def _batches(seed, count, size, extent, voxel):
    """Points inside voxels of a small lattice (never near a face) with distinct confidences."""
    rng = np.random.default_rng(seed)
    conf = rng.permutation(count * size).astype(np.float32) / 7 + 1
    out = []
    for i in range(count):
        cells = rng.integers(-extent, extent, (size, 3))
        xyz = (cells + 0.25 + 0.5 * rng.random((size, 3))) * voxel
        out.append((xyz, rng.integers(0, 256, (size, 3), dtype=np.uint8),
                    conf[i * size:(i + 1) * size]))
    return out


def _check_against_reference(batches, voxel, max_points):
    cloud = MapCloud(MapCloudConfig(voxel_size=voxel, max_points=max_points))
    ref = DenseReference(voxel, max_points)
    for xyz, rgb, conf in batches:
        cloud.add_points(xyz, rgb, conf)
        ref.add(xyz, rgb, conf)
        assert len(cloud) == len(ref.voxels) <= max_points
        # what ~/map_points sends, built from the log in one pass, is the snapshot packed
        assert cloud.rows().tobytes() == packed_rows(*cloud.snapshot()).tobytes()
    got, want = _by_voxel(cloud, voxel), ref.expected()
    assert set(got) == set(want)
    for key, (mean, rgb, conf) in want.items():
        np.testing.assert_allclose(got[key][0], mean, rtol=1e-6, atol=1e-6 * voxel)
        assert got[key][1:] == (rgb, np.float32(conf))
    assert cloud.dropped_points == ref.dropped


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 12), size=st.integers(1, 60),
       extent=st.integers(1, 6), max_points=st.integers(1, 200),
       voxel=st.sampled_from([0.01, 0.5, 3.0]))
def test_property_the_map_equals_a_dense_reference(seed, count, size, extent, max_points, voxel):
    _check_against_reference(_batches(seed, count, size, extent, voxel), voxel, max_points)


def test_a_long_run_through_table_rebuilds_and_log_compactions():
    """Enough drops and moves to rebuild the hash table and compact the log many times."""
    _check_against_reference(_batches(3, 250, 120, 12, 0.1), 0.1, 900)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), max_points=st.integers(1, 50),
       sizes=st.lists(st.integers(0, 80), min_size=1, max_size=15))
def test_property_the_bound_always_holds(seed, max_points, sizes):
    cloud = MapCloud(MapCloudConfig(voxel_size=0.3, max_points=max_points))
    rng = np.random.default_rng(seed)
    dropped = 0
    for n in sizes:
        report = cloud.add_points(rng.normal(0, 2, (n, 3)), None, rng.random(n))
        dropped += report.dropped
        assert len(cloud) <= max_points
        assert len(cloud.snapshot().xyz) == len(cloud)
    assert cloud.dropped_points == dropped


# --- configuration -----------------------------------------------------------------------


def test_set_config_applies_at_runtime():
    cloud = MapCloud(MapCloudConfig(voxel_size=1.0, max_points=10))
    for i in range(6):
        cloud.add_points([[i + 0.5, 0.5, 0.5]], None, [1.0])
    assert cloud.set_config(cloud.config.replace(decimation=2, max_points=20)) == 0
    assert cloud.config.decimation == 2 and len(cloud) == 6
    assert cloud.set_config(cloud.config.replace(max_points=4)) == 2  # the two oldest
    assert set(_by_voxel(cloud, 1.0)) == {(i, 0, 0) for i in range(2, 6)}
    assert cloud.dropped_points == 2
    cloud.add_points([[0.5, 0.5, 0.5]], None, [1.0])
    assert len(cloud) == 4 and (0, 0, 0) in _by_voxel(cloud, 1.0)
    assert cloud.set_config(cloud.config.replace(voxel_size=0.5)) == 4
    assert len(cloud) == 0 and cloud.config.voxel_size == 0.5


@pytest.mark.parametrize('field,value', [
    ('voxel_size', 0), ('voxel_size', -0.1), ('voxel_size', float('nan')),
    ('voxel_size', True), ('max_points', 0), ('max_points', 2.5), ('max_points', 10**9),
    ('decimation', 0),
    ('min_confidence', -1.0), ('confidence_percentile', 100.0),
    ('confidence_percentile', -1.0)])
def test_invalid_configuration_names_the_field(field, value):
    with pytest.raises(ConfigError, match=f'{field}=') as err:
        MapCloudConfig(**{field: value})
    assert 'expected' in str(err.value)


def test_configuration_replace_validates():
    cfg = MapCloudConfig()
    assert cfg.replace(voxel_size=0.05).voxel_size == 0.05
    with pytest.raises(ConfigError, match='max_points'):
        cfg.replace(max_points=-3)


# --- PLY ---------------------------------------------------------------------------------


def test_ply_round_trip_of_a_map(tmp_path, room):
    cloud = MapCloud(MapCloudConfig(voxel_size=VOXEL))
    for r in room[:3]:
        cloud.add(r)
    snap = cloud.snapshot()
    path = tmp_path / 'map.ply'
    assert write_ply(path, *snap) == len(cloud)
    xyz, rgb, conf = read_ply(path)
    np.testing.assert_array_equal(xyz, snap.xyz)
    np.testing.assert_array_equal(rgb, snap.rgb)
    np.testing.assert_array_equal(conf, snap.confidence)
    data = path.read_bytes()
    header = data[:data.index(b'end_header\n') + 11].decode()
    assert header.splitlines()[:2] == ['ply', 'format binary_little_endian 1.0']
    assert f'element vertex {len(cloud)}' in header
    assert header.splitlines()[-8:-1] == [
        'property float x', 'property float y', 'property float z', 'property uchar red',
        'property uchar green', 'property uchar blue', 'property float confidence']
    assert len(data) == len(header) + 19 * len(cloud)
    assert not list(tmp_path.glob('*.partial'))


def test_ply_empty_and_bad_input(tmp_path):
    path = tmp_path / 'empty.ply'
    write_ply(path, np.zeros((0, 3)), np.zeros((0, 3), np.uint8), np.zeros(0))
    assert read_ply(path)[0].shape == (0, 3)
    with pytest.raises(ValueError, match='expected'):
        write_ply(path, np.zeros((2, 3)), np.zeros((3, 3), np.uint8), np.zeros(2))
    with pytest.raises(ValueError, match='uint8'):
        write_ply(path, np.zeros((2, 3)), np.zeros((2, 3)), np.zeros(2))


@pytest.mark.parametrize('text,reason', [
    ('ply\nformat ascii 1.0\nelement vertex 0\nend_header\n', 'format'),
    ('ply\nformat binary_little_endian 1.0\nelement face 0\nend_header\n', 'element vertex'),
    ('ply\nformat binary_little_endian 1.0\nelement vertex 0\nproperty float x\n'
     'end_header\n', 'vertex properties'),
    ('not a ply at all', 'not a PLY file')])
def test_read_ply_rejects_other_layouts(tmp_path, text, reason):
    path = tmp_path / 'other.ply'
    path.write_bytes(text.encode())
    with pytest.raises(PlyError, match=reason):
        read_ply(path)


def test_read_ply_rejects_truncated_data(tmp_path):
    path = tmp_path / 'cut.ply'
    write_ply(path, np.ones((4, 3)), np.ones((4, 3), np.uint8), np.ones(4))
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(PlyError, match='bytes of vertex data'):
        read_ply(path)
