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
Saves are whole or absent under their final names, even when the process is SIGKILLed.

A child process runs the very functions ``~/save_trajectory``, ``~/save_map`` and
``~/save_colmap`` run, on a camera with a published track and a map with keyframe images.
Its ``open`` (or ``rename``) is wrapped so that the save stops at a chosen file it opens
in the output folder (or at a chosen rename into it); this process then SIGKILLs it and
looks at what is left: every entry under a final name must be complete. A second child
then saves into the same folder, and removes what the killed one left behind.
"""

import json
import os
from pathlib import Path
import signal
import subprocess
import sys

from lingbot_ros.streaming import atomic
from lingbot_ros.streaming.atomic import atomic_file, atomic_folder, remove_stale
from lingbot_ros.streaming.ply import read_ply
from lingbot_ros.streaming.trajectory import read_tum
import numpy as np
import pytest

POSES = 40
KEYFRAMES = 3
CHILD = r'''
import builtins, io, json, os, sys, time
from pathlib import Path
kind, folder, hook, stop_at = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
seen = [0]


def reached(path):
    """Count a write into the folder; at the chosen one, say so and wait to be killed."""
    if not str(os.path.abspath(path)).startswith(str(folder)):
        return
    seen[0] += 1
    if seen[0] == stop_at:
        print('stopped', path, flush=True)
        time.sleep(600)


real_open, real_rename, real_replace = io.open, os.rename, os.replace


def hooked_open(file, mode='r', *args, **kwargs):
    fh = real_open(file, mode, *args, **kwargs)
    if hook == 'open' and isinstance(file, (str, os.PathLike)) and set(mode) & set('wxa'):
        reached(file)
    return fh


def hooked(real):
    def move(src, dst, *args, **kwargs):
        if hook == 'rename':
            reached(dst)
        return real(src, dst, *args, **kwargs)
    return move


builtins.open = io.open = hooked_open
os.rename, os.replace = hooked(real_rename), hooked(real_replace)

import numpy as np
from lingbot_ros.ros.camera import CameraStream
from lingbot_ros.ros.map_thread import MapThread, save_colmap
from lingbot_ros.ros.services import save_maps, save_trajectories
from lingbot_ros.streaming.map_cloud import MapCloudConfig
from lingbot_ros.streaming.result import FrameResult, FrameType

cam = CameraStream(0, 'front', '/front/image', None, 10)
for i in range(POSES):
    pose = np.eye(4)
    pose[0, 3] = 0.01 * i
    cam.track.add(1_000_000_000 + i * 100_000_000, pose)
k = np.array([[40.0, 0, 32.0], [0, 40.0, 24.0], [0, 0, 1]])
maps = MapThread(1, MapCloudConfig(voxel_size=0.001, max_points=100000, decimation=1,
                                   confidence_percentile=0.0), max_keyframe_images=4)
maps.start()
rng = np.random.default_rng(0)
for i in range(KEYFRAMES):
    pose = np.eye(4)
    pose[0, 3] = 0.1 * i
    result = FrameResult(stamp_ns=i + 1, index=i, frame_type=FrameType.KEYFRAME, pose_c2w=pose,
                         pose_enc=np.zeros(9, np.float32), intrinsics=k, intrinsics_model=k,
                         input_hw=(48, 64), model_hw=(48, 64), map_epoch=0,
                         depth=rng.uniform(1, 3, (48, 64)).astype(np.float32),
                         confidence=np.full((48, 64), 2.0, np.float32),
                         colors=rng.integers(0, 256, (48, 64, 3), dtype=np.uint8))
    maps.submit(0, result, pose)
assert maps.drain(30)
if kind == 'trajectory':
    written, _ = save_trajectories(folder, [cam], lambda c: ('lingbot_map', 'front_lingbot'),
                                   'rep103')
elif kind == 'map':
    written, _ = save_maps(folder, [cam], maps)
else:
    written, _ = save_colmap(maps, ['front'], folder, '20260101-000000-000000')
maps.stop()
print('saved', json.dumps(written), flush=True)
'''.replace('POSES', str(POSES)).replace('KEYFRAMES', str(KEYFRAMES))


def _child(kind, folder, hook='none', stop_at=0):
    return subprocess.Popen([sys.executable, '-c', CHILD, kind, str(folder), hook,
                             str(stop_at)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _complete(entry):
    """Assert that a final-named entry of the output folder is a whole save."""
    name = entry.name
    if name.endswith('.tum'):
        stamps, poses = read_tum(entry)
        assert len(stamps) == POSES and poses.shape == (POSES, 4, 4), name
    elif name.endswith('.npz'):
        with np.load(entry) as saved:
            assert saved['poses'].shape == (POSES, 4, 4), name
            assert saved['stamps_ns'].shape == (POSES,), name
            assert str(saved['map_frame']) == 'lingbot_map', name
    elif name.endswith('_map.ply'):
        xyz, _, _ = read_ply(entry)  # refuses a body shorter than its header says
        assert len(xyz) > 0, name
    elif name.endswith('_colmap'):
        sparse = entry / 'sparse' / '0'
        files = sorted(p.name for p in sparse.iterdir())
        assert files == sorted(f'{s}.{e}' for s in ('cameras', 'images', 'points3D')
                               for e in ('bin', 'txt')), name
        assert len(list((entry / 'images').iterdir())) == KEYFRAMES, name
        listed = [ln for ln in (sparse / 'images.txt').read_text().splitlines()
                  if ln and not ln.startswith('#')]
        assert len(listed) == KEYFRAMES, name
        try:
            import pycolmap
        except ImportError:
            return
        assert pycolmap.Reconstruction(str(sparse)).num_images() == KEYFRAMES
    else:
        raise AssertionError(f'{name} is not a save under its final name')


def _visible(folder):
    return sorted(p for p in folder.iterdir() if not p.name.startswith('.'))


@pytest.mark.parametrize('kind', ['trajectory', 'map', 'colmap'])
@pytest.mark.parametrize('hook,stop_at', [('open', 1), ('open', 2), ('rename', 1)])
def test_sigkill_during_a_save_leaves_the_final_name_absent_or_complete(kind, hook, stop_at,
                                                                        tmp_path):
    folder = tmp_path / 'saves'
    folder.mkdir()
    proc = _child(kind, folder, hook, stop_at)
    try:
        line = proc.stdout.readline()
        assert line.startswith(('stopped', 'saved')), line + proc.stderr.read()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    for entry in _visible(folder):
        _complete(entry)
    # the next save writes whole files and removes what the killed one left behind
    again = _child(kind, folder)
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    written = json.loads(out.split('saved ', 1)[1])
    assert written and all(Path(p).exists() for p in written)
    for entry in _visible(folder):
        _complete(entry)
    assert [p.name for p in folder.iterdir() if p.name.startswith('.')] == []


def _dead_pid():
    proc = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'],
                          capture_output=True, text=True, check=True)
    return int(proc.stdout)


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / 'a.bin'
    with atomic_file(target) as fh:
        fh.write(b'first')
    with pytest.raises(RuntimeError):
        with atomic_file(target) as fh:
            fh.write(b'second, cut short')
            raise RuntimeError('disk gone')
    assert target.read_bytes() == b'first'
    assert [p.name for p in tmp_path.iterdir()] == ['a.bin']


def test_stale_temporaries_of_dead_processes_go_and_live_ones_stay(tmp_path):
    dead, alive = _dead_pid(), os.getppid()
    stale_file = tmp_path / f'.a.tum.{dead}.0123abcd.partial'
    stale_dir = tmp_path / f'.m_colmap.{dead}.89abcdef.partial'
    live = tmp_path / f'.b.tum.{alive}.0123abcd.partial'
    mine = atomic.temp_path(tmp_path / 'c.ply')
    unrelated = tmp_path / '.hidden.partial'
    stale_file.write_bytes(b'half')
    (stale_dir / 'images').mkdir(parents=True)
    for path in (live, mine, unrelated):
        path.write_bytes(b'x')
    assert sorted(remove_stale(tmp_path)) == sorted([stale_file, stale_dir])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, mine.name, unrelated.name])
    with atomic_file(tmp_path / 'd.bin') as fh:  # a save sweeps its folder first
        fh.write(b'd')
    assert (tmp_path / 'd.bin').read_bytes() == b'd'


def test_a_folder_appears_whole_and_replaces_the_old_one_whole(tmp_path):
    target = tmp_path / 'model'
    with atomic_folder(target) as partial:
        (partial / 'one').write_text('1')
        assert not target.exists()
    assert sorted(p.name for p in target.iterdir()) == ['one']
    with pytest.raises(ValueError):
        with atomic_folder(target) as partial:
            (partial / 'two').write_text('2')
            raise ValueError('encoder failed')
    assert sorted(p.name for p in target.iterdir()) == ['one']  # the old one stays
    with atomic_folder(target) as partial:
        (partial / 'two').write_text('2')
    assert sorted(p.name for p in target.iterdir()) == ['two']
    assert sorted(p.name for p in tmp_path.iterdir()) == ['model']


def test_a_new_file_gets_the_usual_permissions(tmp_path):
    with atomic_file(tmp_path / 'p.txt') as fh:
        fh.write(b'p')
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / 'p.txt').stat().st_mode & 0o777 == 0o666 & ~umask
