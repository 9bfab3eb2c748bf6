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

"""``lingbot-ros-replay --save-state`` / ``--resume``: a replay in parts equals one replay."""

from pathlib import Path

from lingbot_ros.streaming.trajectory import read_tum
from lingbot_ros.tools.replay import main
import numpy as np
import pytest

BASIC = Path(__file__).resolve().parents[1] / 'data' / 'parity' / 'basic'
# the fixture's weights (a checkpoint: its sha256 names them) with a small window, so that
# frames are evicted and windows of 5 frames open at frames 5, 8 and 11
ARGS = ['--model-config', str(BASIC / 'config.json'),
        '--checkpoint', str(BASIC / 'weights.safetensors'), '--device', 'cpu', '--quiet',
        '--scale-frames', '2', '--sliding-window', '2', '--max-window-frames', '5']


@pytest.fixture(scope='module')
def parts(tmp_path_factory):
    """Frames 0..11 in one replay, and in three: 0..3, 4..6 (resumed and saved), 7..11."""
    d = tmp_path_factory.mktemp('parts')
    images = np.load(BASIC / 'images.npy')
    cuts = [(0, 4), (4, 7), (7, len(images))]
    for i, (a, b) in enumerate(cuts):
        np.save(d / f'part{i}.npy', images[a:b])
    np.save(d / 'all.npy', images)
    rcs = [main(ARGS + ['--images', str(d / 'all.npy'), '--out', str(d / 'all.npz'),
                        '--trajectory', str(d / 'all.tum')])]
    for i in range(3):
        flags = ['--images', str(d / f'part{i}.npy'), '--out', str(d / f'part{i}.npz'),
                 '--trajectory', str(d / f'part{i}.tum')]
        if i > 0:
            flags += ['--resume', str(d / f'after{i - 1}.state')]
        if i < 2:
            flags += ['--save-state', str(d / f'after{i}.state')]
        rcs.append(main(ARGS + flags))
    return rcs, d


def test_a_replay_in_parts_equals_one_replay(parts):
    rcs, d = parts
    assert rcs == [0, 0, 0, 0]
    whole = np.load(d / 'all.npz')
    pieces = [np.load(d / f'part{i}.npz') for i in range(3)]
    assert list(whole['window_index']) == [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    for key in whole.files:
        # a part within the first window has no window_index (the npz's convention): 0
        joined = np.concatenate([p[key] if key in p.files else np.zeros_like(p['frame_type'],
                                                                             np.int32)
                                 for p in pieces])
        assert joined.shape == whole[key].shape, key
        if key in ('pose_enc', 'extrinsic_w2c', 'extrinsic_c2w'):
            np.testing.assert_allclose(joined, whole[key], atol=1e-4, err_msg=key)
        if key == 'depth':
            np.testing.assert_allclose(joined, whole[key], rtol=1e-3, err_msg=key)
        assert np.array_equal(joined, whole[key]), key   # the CPU gives the same bits


def test_the_trajectory_goes_on_in_the_same_frame_and_time_base(parts):
    _, d = parts
    stamps, poses = read_tum(d / 'all.tum')
    pieces = [read_tum(d / f'part{i}.tum') for i in range(3)]
    np.testing.assert_array_equal(np.concatenate([s for s, _ in pieces]), stamps)
    np.testing.assert_allclose(np.concatenate([p for _, p in pieces]), poses, atol=1e-4)


def test_resume_says_where_it_found_itself(parts, capsys, tmp_path):
    _, d = parts
    rc = main([a for a in ARGS if a != '--quiet'] + [
        '--images', str(d / 'part2.npy'), '--resume', str(d / 'after1.state'),
        '--save-state', str(tmp_path / 'again.state')])
    err = capsys.readouterr().err
    assert rc == 0
    assert 'resumed: 5 of 10 resumed frames against' in err
    assert f'-> {tmp_path / "again.state"}' in err
    assert (tmp_path / 'again.state').stat().st_size > 0


def _without_checkpoint(args):
    i = args.index('--checkpoint')
    return args[:i] + args[i + 2:]


@pytest.mark.parametrize('args, words', [
    (ARGS + ['--sliding-window', '3'], 'sliding_window differs'),
    (_without_checkpoint(ARGS) + ['--seed', '5'], 'checkpoint differs'),
    (ARGS + ['--dtype', 'bfloat16'], 'compute dtype differs'),
])
def test_a_refused_state_is_one_line_and_status_2(parts, capsys, args, words):
    _, d = parts
    rc = main(args + ['--images', str(d / 'part2.npy'), '--resume', str(d / 'after1.state')])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and '\n' not in err
    assert err.startswith('lingbot-ros-replay: error: state file') and words in err


def test_a_missing_or_truncated_state_is_refused(parts, capsys, tmp_path):
    _, d = parts
    cut = tmp_path / 'cut.state'
    cut.write_bytes((d / 'after1.state').read_bytes()[:-64])
    for path, words in ((tmp_path / 'none.state', 'no such file'), (cut, 'not a complete')):
        rc = main(ARGS + ['--images', str(d / 'part2.npy'), '--resume', str(path)])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and '\n' not in err and words in err
