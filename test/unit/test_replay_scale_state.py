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
``lingbot-ros-replay --odometry`` in two parts (``--save-state``, ``--resume``) equals one run.

The odometry is the model's own track in metres (each window its own scale) through a
lever arm, as in test_replay_metric. A replay of the 40 frames in one go is the yardstick:
the second part, resumed from the first part's state, must give its frames the same
metres: the saved estimator goes on with the same samples and the metric frame with the
same window anchors. A saved scale that does not fit (another lever arm, none saved) is
not taken, said in one line even with ``--quiet``.
"""

import shutil

from lingbot_ros.streaming.state import read_scale
from lingbot_ros.tools import scene
import numpy as np
import pytest
from test_replay_metric import LEVER, metric_track, replay, scale_for, write_odometry

FRAMES, CUT = 40, 20
WINDOW = ['--max-window-frames', '16']   # windows at frames 0, 16, 32: the cut is inside one


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    """Write the scene in one folder and in two halves; the odometry of its metric track."""
    d = tmp_path_factory.mktemp('scale_state')
    images = scene.write(d / 'rgb', FRAMES, 84, 56)
    files = sorted(images.glob('*.png'))
    for part, chosen in (('part0', files[:CUT]), ('part1', files[CUT:])):
        (d / part).mkdir()
        for f in chosen:
            shutil.copy(f, d / part / f.name)
    rc, model, stamps, poses = replay(d, images, *WINDOW, name='model')
    assert rc == 0
    windows = model['window_index']
    scales = scale_for(poses) * np.array([1.0, 1.15, 0.9])[:windows.max() + 1]
    odom = write_odometry(d / 'base.tum', stamps, metric_track(poses, windows, scales))
    metric = ['--odometry', str(odom), '--base-to-camera', LEVER, *WINDOW]
    rc, whole, _, whole_poses = replay(d, images, *metric, name='whole')
    assert rc == 0 and str(whole['unit']) == 'metre'
    rc, first, _, _ = replay(d, d / 'part0', *metric, '--save-state', str(d / 'half.state'),
                             name='first')
    assert rc == 0
    return d, metric, whole, whole_poses


def test_the_second_part_gets_the_metres_of_one_run(run, capsys):
    d, metric, whole, whole_poses = run
    saved = read_scale(d / 'half.state')
    assert saved is not None and saved.estimator.window == 1  # saved inside window 1
    assert len(saved.estimator.stamps_s) > 0 and saved.metric.windows == (0, 1)
    capsys.readouterr()
    rc, second, stamps, poses = replay(d, d / 'part1', *metric, '--resume',
                                       str(d / 'half.state'), name='second')
    assert rc == 0 and str(second['unit']) == 'metre'
    assert capsys.readouterr().err == ''  # --quiet: a scale resumed needs no word
    np.testing.assert_array_equal(second['window_index'], whole['window_index'][CUT:])
    np.testing.assert_allclose(second['metric_scale'], whole['metric_scale'][CUT:], rtol=1e-12)
    np.testing.assert_allclose(poses, whole_poses[CUT:], rtol=1e-6, atol=1e-6)
    for key in ('pose_enc', 'extrinsic_c2w', 'depth'):
        np.testing.assert_allclose(second[key], whole[key][CUT:], rtol=1e-5, atol=1e-6,
                                   err_msg=key)


def test_a_saved_scale_that_does_not_fit_is_said_and_not_taken(run, capsys, tmp_path):
    d, metric, whole, _ = run
    moved = list(metric)
    moved[moved.index(LEVER)] = '0.3 -0.1 0.6 -0.5 0.5 -0.5 0.5'
    capsys.readouterr()
    rc, _, _, _ = replay(tmp_path, d / 'part1', *moved, '--resume', str(d / 'half.state'),
                         name='moved')
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0
    assert 'lingbot-ros-replay: saved scale not resumed: saved for another --base-to-camera; ' \
        'the scale starts over' in err
    # a state saved without a scale source: nothing to go on from, said as well
    rc = replay(tmp_path, d / 'part0', *WINDOW, '--save-state', str(tmp_path / 'plain.state'),
                name='plain')[0]
    assert rc == 0 and read_scale(tmp_path / 'plain.state') is None
    capsys.readouterr()
    rc = replay(tmp_path, d / 'part1', *metric, '--resume', str(tmp_path / 'plain.state'),
                name='fresh')[0]
    assert rc == 0
    assert 'lingbot-ros-replay: saved scale not resumed: none in the state file; the scale ' \
        'starts over' in capsys.readouterr().err
