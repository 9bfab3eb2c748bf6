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

"""The map thread: keyframes merged off the worker, resets in order, bounded, counted."""

import threading

from lingbot_ros.ros import messages
from lingbot_ros.ros.map_thread import JobKind, MapThread
from lingbot_ros.streaming.map_cloud import MapCloudConfig
from lingbot_ros.streaming.result import FrameResult, FrameType
import numpy as np

K = np.array([[8.0, 0, 4.0], [0, 8.0, 3.0], [0, 0, 1]])


def _result(stamp, epoch=0, kind=FrameType.KEYFRAME, depth=2.0, shift=0.0):
    pose = np.eye(4)
    pose[0, 3] = shift
    return FrameResult(stamp_ns=stamp, index=0, frame_type=kind, pose_c2w=pose,
                       pose_enc=np.zeros(9, np.float32), intrinsics=K, intrinsics_model=K,
                       input_hw=(6, 8), model_hw=(6, 8), map_epoch=epoch,
                       depth=np.full((6, 8), depth, np.float32),
                       confidence=np.full((6, 8), 2.0, np.float32),
                       colors=np.full((6, 8, 3), 200, np.uint8))


CFG = MapCloudConfig(voxel_size=0.01, max_points=1000, decimation=1, confidence_percentile=0.0)


def test_keyframes_merge_in_the_thread_and_resets_keep_their_order():
    maps = MapThread(2, CFG)
    maps.start()
    try:
        maps.submit(0, _result(1), np.eye(4))
        maps.submit(0, _result(2, kind=FrameType.NON_KEYFRAME), np.eye(4))
        maps.submit(1, _result(3, depth=3.0), np.eye(4))
        assert maps.drain(10)
        points, counters = maps.snapshot(0)
        assert points.xyz.shape == (48, 3) and counters.keyframes == 1
        assert counters.stamp_ns == 1 and counters.points == 48
        np.testing.assert_allclose(points.xyz[:, 2], 2.0, atol=1e-6)
        assert maps.snapshot(1)[1].points == 48
        before = counters.version
        # a reset queued behind a keyframe: that keyframe is merged, then cleared
        old, new = _result(4, shift=1.0), _result(5, shift=2.0)
        maps.submit(0, old, old.pose_c2w)
        maps.clear(0)
        maps.submit(0, new, new.pose_c2w)
        assert maps.drain(10)
        points, counters = maps.snapshot(0)
        assert counters.restarts == 1 and counters.keyframes == 1 and counters.version > before
        np.testing.assert_allclose(points.xyz[:, 0].min(), 2.0 + (0 - 4.0) * 2.0 / 8.0,
                                   atol=1e-5)  # only the last keyframe's points
        # a new map epoch from the session starts over too, and is counted
        maps.submit(1, _result(6, epoch=1), np.eye(4))
        assert maps.drain(10) and maps.counters(1).restarts == 1
    finally:
        maps.stop()


def test_a_map_thread_that_falls_behind_skips_the_oldest_keyframes_and_counts_them():
    maps = MapThread(1, CFG, queue_frames=2)
    gate = threading.Event()
    real = maps.run

    def slow(job):
        gate.wait(10)
        real(job)
    maps.run = slow
    maps.start()
    try:
        for stamp in range(1, 7):
            maps.submit(0, _result(stamp, shift=stamp), np.eye(4))
        # one job may already be taken by the thread; at most 2 wait, the rest skipped
        assert maps.pending() <= 2
        skipped = maps.counters(0).skipped_keyframes
        assert skipped >= 3
        gate.set()
        assert maps.drain(10)
        assert maps.counters(0).keyframes + skipped == 6
        assert maps.counters(0).stamp_ns == 6  # the newest always goes in
    finally:
        gate.set()
        maps.stop()


def test_a_failing_merge_is_recorded_and_the_thread_goes_on():
    maps = MapThread(1, CFG)
    maps.start()
    try:
        bad = _result(1)
        maps.submit(0, bad, np.eye(3))  # a wrong pose shape raises inside the merge
        maps.submit(0, _result(2), np.eye(4))
        assert maps.drain(10)
        assert len(maps.errors) == 1 and 'pose_map' in maps.errors[0][1]
        assert maps.counters(0).keyframes == 1
    finally:
        maps.stop()


def test_set_config_bounds_and_restarts():
    maps = MapThread(1, CFG)
    for stamp in range(3):
        maps.run(type('J', (), {'kind': JobKind.ADD, 'camera': 0,
                                'result': _result(stamp, shift=10.0 * stamp), 'pose_map': None})())
    assert maps.counters(0).points == 3 * 48
    maps.set_config(CFG.replace(max_points=50))
    assert maps.snapshot(0)[0].xyz.shape[0] == 50
    maps.set_config(CFG.replace(max_points=50, voxel_size=0.5))
    assert maps.snapshot(0)[0].xyz.shape[0] == 0 and maps.counters(0).restarts == 1


def test_the_map_message_carries_xyz_rgb_and_confidence():
    xyz = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    rgb = np.array([[255, 0, 0], [0, 0, 255]], np.uint8)
    from lingbot_ros.streaming.map_cloud import packed_rows
    msg = messages.map_cloud(packed_rows(xyz, rgb, np.array([1.5, 2.5], np.float32)),
                             1_500_000_000, 'map')
    assert [f.name for f in msg.fields] == ['x', 'y', 'z', 'rgb', 'confidence']
    assert msg.width == 2 and msg.point_step == 20 and msg.header.frame_id == 'map'
    rec = np.frombuffer(bytes(msg.data), dtype=[('x', '<f4'), ('y', '<f4'), ('z', '<f4'),
                                                ('rgb', '<u4'), ('c', '<f4')])
    np.testing.assert_array_equal(rec['z'], [3.0, 6.0])
    assert list(rec['rgb']) == [0xFF0000, 0x0000FF] and list(rec['c']) == [1.5, 2.5]


def _indexed(index, epoch=0, kind=FrameType.KEYFRAME):
    from dataclasses import replace
    return replace(_result(index, epoch=epoch, kind=kind), index=index)


def test_keyframe_images_are_kept_beside_the_map_bounded_and_cleared_with_it(tmp_path):
    from lingbot_ros.ros.map_thread import save_colmap
    maps = MapThread(2, CFG, max_keyframe_images=2)
    pose = np.eye(4)
    pose[1, 3] = 0.5
    for i in range(3):
        maps.run(maps_job(0, _indexed(i), pose))
    maps.run(maps_job(0, _indexed(3, kind=FrameType.NON_KEYFRAME), pose))  # not a keyframe
    points, images = maps.keyframe_images(0)
    assert [i.name for i in images] == ['000001.jpg', '000002.jpg']  # the bound: the last 2
    assert len(points.xyz) > 0 and all(np.array_equal(i.pose_c2w, pose) for i in images)
    written, empty = save_colmap(maps, ['a', 'b'], tmp_path, 'now')
    again, _ = save_colmap(maps, ['a', 'b'], tmp_path, 'now')  # the same stamp: no overwrite
    assert written == [str(tmp_path / 'a_now_colmap')] and empty == ['b']
    assert again == [str(tmp_path / 'a_now_colmap_2')]
    assert sorted(p.name for p in (tmp_path / 'a_now_colmap' / 'images').iterdir()) == \
        ['000001.jpg', '000002.jpg']
    maps.run(maps_job(0, None, None, JobKind.CLEAR))
    assert maps.keyframe_images(0)[1] == []
    maps.run(maps_job(0, _indexed(4), pose))
    maps.run(maps_job(0, _indexed(5, epoch=1), pose))  # a new map: its images only
    assert [i.name for i in maps.keyframe_images(0)[1]] == ['000005.jpg']
    off = MapThread(1, CFG)  # 0 images by default: nothing is encoded or kept
    off.run(maps_job(0, _indexed(0), pose))
    assert off.keyframe_images(0)[1] == [] and off.write_colmap(0, tmp_path / 'x') is None


def maps_job(camera, result, pose, kind=JobKind.ADD):
    from lingbot_ros.ros.map_thread import _Job
    return _Job(kind, camera, result, pose)
