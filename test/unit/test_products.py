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

"""A frame's depth image and points, made by the session, against plain formulations."""

from dataclasses import replace

from conftest import unproject_plain
from lingbot_ros.model.config import ConfigError
from lingbot_ros.ros import messages
from lingbot_ros.ros.conventions import map_from_optical, MapConvention
from lingbot_ros.streaming import products
from lingbot_ros.streaming.config import FrameProducts, PointsSpec
from lingbot_ros.streaming.engine import model_to_input_matrix
from lingbot_ros.streaming.map_cloud import packed_rows
from lingbot_ros.streaming.preprocess import plan_transform
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.trajectory import intrinsics_from_fov
import numpy as np
import pytest


def _result(input_hw, image_size=252, seed=0, with_conf=True, with_colors=True):
    """Make a frame as the session does: the real crop plan and intrinsics, random depth."""
    plan = plan_transform(input_hw, image_size, 14)
    h, w = plan.model_hw
    rng = np.random.default_rng(seed)
    k_model = intrinsics_from_fov(np.float32(0.9 + 0.1 * rng.random()),
                                  np.float32(1.1 + 0.1 * rng.random()), h, w)
    k_input = model_to_input_matrix(plan) @ k_model
    depth = rng.uniform(0.2, 8.0, (h, w)).astype(np.float32)
    depth[::7, ::5] = np.nan
    depth[3, ::3] = -1.0
    depth[5, ::4] = 0.0
    conf = (1 + rng.exponential(1.0, (h, w))).astype(np.float32)
    conf[::9, ::2] = 2.0  # ties at a percentile
    colors = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    angle = rng.uniform(-1, 1, 3)
    r, _ = np.linalg.qr(np.eye(3) + 0.3 * np.array([[0, -angle[2], angle[1]],
                                                    [angle[2], 0, -angle[0]],
                                                    [-angle[1], angle[0], 0]]))
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = r * np.sign(np.linalg.det(r)), rng.normal(0, 3, 3)
    return FrameResult(stamp_ns=1, index=0, frame_type=FrameType.KEYFRAME, pose_c2w=pose,
                       pose_enc=np.zeros(9, np.float32), intrinsics=k_input,
                       intrinsics_model=k_model, input_hw=tuple(input_hw), model_hw=(h, w),
                       depth=depth, confidence=conf if with_conf else None,
                       colors=colors if with_colors else None)


def _nearest_pixels(r):
    """Depth on the input's pixels by OpenCV's nearest-pixel rule, written out (NaN outside)."""
    (sx, _, cx), (_, sy, cy) = products.input_to_model(r.intrinsics_model, r.intrinsics)
    one = 1 << 10  # warpAffine's fixed point: coordinates in 1/1024 pixel, rounded
    x = np.arange(r.input_hw[1], dtype=np.float64)
    y = np.arange(r.input_hw[0], dtype=np.float64)
    ix = (np.rint(sx * x * one).astype(np.int64) + int(np.rint(cx * one)) + one // 2) >> 10
    iy = (np.rint((sy * y + cy) * one).astype(np.int64) + one // 2) >> 10
    h, w = r.depth.shape
    inside = (iy[:, None] >= 0) & (iy[:, None] < h) & (ix[None, :] >= 0) & (ix[None, :] < w)
    picked = r.depth[np.clip(iy, 0, h - 1)[:, None], np.clip(ix, 0, w - 1)[None, :]]
    return np.where(inside, picked, np.float32(np.nan)).astype(np.float32)


def _plain_rows(r, pose, step, min_conf, pct):
    """Return the frame's rows from the plainly written unprojection (masks, np.percentile)."""
    xyz, rgb, _ = unproject_plain(r, pose, step, min_conf, pct)
    return packed_rows(xyz, rgb)


def _same_rows(ours, theirs):
    assert ours.shape == theirs.shape
    assert np.array_equal(ours[:, 3].view(np.uint32), theirs[:, 3].view(np.uint32))
    np.testing.assert_allclose(ours[:, :3], theirs[:, :3], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize('input_hw,image_size', [((480, 640), 252), ((720, 1280), 518),
                                                 ((640, 480), 224), ((37, 53), 56)])
def test_depth_on_input_takes_the_nearest_model_pixel_and_nan_outside(input_hw, image_size):
    r = _result(input_hw, image_size)
    ours = products.depth_on_input(r)
    assert ours.shape == tuple(input_hw) and ours.dtype == np.float32
    assert np.array_equal(ours, _nearest_pixels(r), equal_nan=True)
    assert np.array_equal(messages.depth_on_input(r), ours, equal_nan=True)


@pytest.mark.parametrize('decimation,min_conf,pct', [(1, 0.0, 0.0), (2, 1.5, 0.0),
                                                     (3, 0.0, 50.0), (2, 4.0, 30.0),
                                                     (1, 0.0, 99.9)])
@pytest.mark.parametrize('convention', list(MapConvention), ids=lambda c: c.value)
def test_point_rows_are_the_plainly_filtered_rows_in_the_map_convention(decimation, min_conf,
                                                                        pct, convention):
    r = _result((480, 640), seed=decimation)
    to_map = map_from_optical(convention)
    spec = PointsSpec(decimation, min_conf, pct,
                      tuple(float(v) for v in to_map.reshape(-1))).validate()
    ours = products.point_rows(r, spec)
    assert len(ours) > 0
    _same_rows(ours, _plain_rows(r, messages.map_pose(r, convention), decimation, min_conf,
                                 pct))


def test_without_confidence_or_colours_nothing_is_filtered_on_it_and_points_are_black():
    r = _result((480, 640), with_conf=False, with_colors=False)
    ours = products.point_rows(r, PointsSpec(2, 5.0, 50.0))
    _same_rows(ours, _plain_rows(r, r.pose_c2w, 2, 5.0, 50.0))
    assert len(ours) > 0 and not ours[:, 3].view(np.uint32).any()


def test_a_frame_without_valid_depth_gives_no_points_and_one_without_depth_nothing():
    r = _result((480, 640))
    none_valid = replace(r, depth=np.full_like(r.depth, np.nan))
    assert products.point_rows(none_valid, PointsSpec(1, 0.0, 50.0)).shape == (0, 4)
    no_depth = replace(r, depth=None)
    assert products.make(FrameProducts(True, PointsSpec()), no_depth) is no_depth


@pytest.mark.parametrize('spec,field', [
    (PointsSpec(decimation=0), 'points.decimation'),
    (PointsSpec(min_confidence=float('nan')), 'points.min_confidence'),
    (PointsSpec(percentile=100.0), 'points.percentile'),
    (PointsSpec(map_from_session=(1.0,) * 15), 'points.map_from_session'),
])
def test_invalid_specs_name_the_field(spec, field):
    with pytest.raises(ConfigError, match=field):
        FrameProducts(points=spec).validate()


def test_a_session_makes_them_for_every_frame_and_follows_a_runtime_change():
    from lingbot_ros.streaming.config import EngineConfig, StreamConfig
    from lingbot_ros.streaming.engine import Engine
    spec = PointsSpec(2, 1.2, 20.0, tuple(map_from_optical(MapConvention.REP103).reshape(-1)))
    cfg = StreamConfig(scale_frames=2, sliding_window=3, max_window_frames=5, image_size=112,
                       products=FrameProducts(depth_on_input=True, points=spec))
    session = Engine.load(EngineConfig(preset='tiny', device='cpu')).new_session('c', cfg)
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(9)]
    seen = []
    for i, frame in enumerate(frames[:7]):  # the scale call, frames, a re-seeded window
        seen += session.step(frame, 1 + i)
    assert len(seen) == 7 and max(r.window_index for r in seen) >= 1
    for r in seen:
        assert np.array_equal(r.depth_input, _nearest_pixels(r), equal_nan=True)
        _same_rows(r.points_rows,
                   _plain_rows(r, messages.map_pose(r, MapConvention.REP103), 2, 1.2, 20.0))
    session.update(cfg.replace(products=FrameProducts(depth_on_input=False)))
    (r,) = session.step(frames[7], 8)
    assert r.points_rows is None and r.depth_input is None and r.depth is not None
    session.update(cfg.replace(with_depth=False))
    (r,) = session.step(frames[8], 9)
    assert r.points_rows is None and r.depth_input is None and r.depth is None


def test_the_messages_carry_the_made_bytes_as_they_would_have_built_them():
    r = _result((480, 640))
    spec = PointsSpec(2, 1.5, 25.0, tuple(map_from_optical(MapConvention.REP103).reshape(-1)))
    with_made = products.make(FrameProducts(True, spec), r)
    depth = (messages.depth_image(r, 'cam'), messages.depth_image(with_made, 'cam'))
    rep103 = messages.map_pose(r, MapConvention.REP103)
    points = (messages.point_cloud(r, rep103, 'map', 2, 1.5, 25.0),
              messages.point_cloud(with_made, np.eye(4), 'map', 9, 0.0, 0.0))
    for built, wrapped in (depth, points):
        assert bytes(wrapped.data) == bytes(built.data)
        assert (wrapped.height, wrapped.width) == (built.height, built.width)


def test_the_node_asks_only_for_what_someone_reads():
    from lingbot_ros.ros.params import Listened, stream_config
    from lingbot_ros.streaming.parameters import parse
    p = parse({'publish_depth': True, 'publish_points': True, 'map_convention': 'rep103'})
    both = stream_config(p).products
    assert p.map_convention is MapConvention.REP103
    assert both.depth_on_input and both.points.decimation == p.points_decimation
    to_map = map_from_optical(MapConvention.REP103)
    assert both.points.map_from_session == tuple(to_map.reshape(-1))
    only_points = stream_config(p, Listened(depth=False, points=True)).products
    assert not only_points.depth_on_input and only_points.points == both.points
    assert not stream_config(p, Listened(False, False)).products.wanted
    off = parse({'publish_depth': False, 'publish_points': False})
    assert not stream_config(off, Listened(True, True)).products.wanted
