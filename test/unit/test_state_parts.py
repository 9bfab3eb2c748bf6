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
A state file's optional parts: the published track and the metric scale.

Each comes back as written, bit for bit; a file without them (saved with ``scale_source:
none``, or by the replay tool) reads as before; a part that is cut, of the wrong shape,
or of another map than the stream's is refused in one line like the rest of the file.
"""

from dataclasses import replace
import json

from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.errors import StateCorrupt
from lingbot_ros.streaming.scale.estimate import FixedScale, ScaleSource
from lingbot_ros.streaming.scale.metric import FrameKind, MetricFrame
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.state import (capture, load_into, PublishedTrack, read_scale,
                                         read_track, read_voxels, save_session, write_captured)
import numpy as np
import pytest
from safetensors import safe_open
from safetensors.torch import save_file
import torch


@pytest.fixture(scope='module')
def stream():
    """Return a tiny engine, a session that ran a few frames, and what it published."""
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', seed=1))
    session = engine.new_session('parts', StreamConfig(scale_frames=2, image_size=56))
    images = torch.rand(5, 3, 28, 56, generator=torch.Generator().manual_seed(0))
    session.run(images, stamps=range(100, 105))
    metric = MetricFrame(FixedScale(2.5))
    records = []
    for stamp, pose in session.trajectory:
        metric.observe(0, pose)
        records.append((stamp, metric.pose(pose, 0)))
    epoch = capture(session, engine.state_identity()).state.map_epoch
    scale = SavedScale(source=ScaleSource.FIXED, drives=False, fixed_scale=2.5, estimator=None,
                       metric=metric.export(), anchor=None, epoch=epoch, frame=FrameKind.METRIC,
                       base_previous=(104, np.eye(4)))
    return engine, session, scale, PublishedTrack.of(records, 'rep103')


def test_the_track_and_the_scale_come_back_as_written(stream, tmp_path):
    engine, session, scale, track = stream
    path = tmp_path / 'parts.state'
    write_captured(capture(session, engine.state_identity()), path, scale=scale, track=track)
    got = read_track(path)
    assert got.frame == 'rep103' and got.stamp_ns.dtype == np.int64
    np.testing.assert_array_equal(got.stamp_ns, track.stamp_ns)
    np.testing.assert_array_equal(got.pose, track.pose)
    assert [s for s, _ in got.records()] == list(range(100, 105))
    back = read_scale(path)
    assert (back.source, back.fixed_scale, back.frame, back.epoch) == \
        (ScaleSource.FIXED, 2.5, FrameKind.METRIC, scale.epoch)
    np.testing.assert_array_equal(back.metric.anchors, scale.metric.anchors)
    np.testing.assert_array_equal(back.metric.last, scale.metric.last)
    assert back.base_previous[0] == 104
    # the stream itself resumes as ever, and the voxel map (none here) stays optional
    load_into(engine.new_session('again', session.config), path, engine.state_identity())
    assert read_voxels(path) is None


def test_a_file_without_the_parts_reads_as_before(stream, tmp_path):
    engine, session, _, _ = stream
    path = tmp_path / 'plain.state'
    save_session(session, path, engine.state_identity())
    assert read_track(path) is None and read_scale(path) is None
    load_into(engine.new_session('again', session.config), path, engine.state_identity())


def _rewrite(src, dst, change):
    """Copy a state file, changing its tensors and header with ``change(tensors, header)``."""
    with safe_open(str(src), framework='pt') as f:
        meta = dict(f.metadata())
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    header = json.loads(meta['header'])
    change(tensors, header)
    save_file(tensors, str(dst), metadata={**meta, 'header': json.dumps(header)})
    return dst


@pytest.mark.parametrize('change, read, words', [
    (lambda t, h: t.pop('scale.metric.anchors'), read_scale,
     'scale part: array metric.anchors is missing'),
    (lambda t, h: t.update({'scale.metric.last': torch.zeros(4, dtype=torch.float64)}),
     read_scale, 'scale part: array metric.last has shape (4,)'),
    (lambda t, h: h['scale'].update(frame='ANCHORED'), read_scale,
     "scale part: outputs 'metres, map anchored to odom' for a camera not driving"),
    (lambda t, h: h['scale'].update(epoch=h['scale']['epoch'] + 1), read_scale,
     'scale part of map epoch {later}, the stream is in map epoch {epoch}'),
    (lambda t, h: t.update({'track.pose': t['track.pose'][:2]}), read_track,
     'tensor track.pose has shape (2, 4, 4), expected (5, 4, 4)'),
    (lambda t, h: h['track'].pop('frame'), read_track, 'header field track.frame is missing'),
])
def test_a_broken_part_is_refused_in_one_line(stream, tmp_path, change, read, words):
    engine, session, scale, track = stream
    path = tmp_path / 'parts.state'
    write_captured(capture(session, engine.state_identity()), path, scale=scale, track=track)
    bad = _rewrite(path, tmp_path / 'bad.state', change)
    with pytest.raises(StateCorrupt) as err:
        read(bad)
    text = str(err.value)
    words = words.format(epoch=scale.epoch, later=scale.epoch + 1)
    assert text.startswith(f'state file {bad}: ') and words in text and '\n' not in text


def test_a_track_with_a_pose_that_is_not_finite_is_refused(stream, tmp_path):
    engine, session, scale, track = stream
    pose = track.pose.copy()
    pose[1, 0, 3] = np.inf
    path = tmp_path / 'inf.state'
    write_captured(capture(session, engine.state_identity()), path,
                   track=replace(track, pose=pose))
    with pytest.raises(StateCorrupt, match='track.pose holds a value that is not finite'):
        read_track(path)
