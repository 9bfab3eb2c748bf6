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

"""lingbot-ros-play publishes folders, videos and bags; lingbot-ros-demo runs end to end."""

import os
from pathlib import Path
import subprocess
import sys
import time

from conftest import dds_domain, dds_env, write_bag
import cv2
from lingbot_ros.ros.probe import Probe
from lingbot_ros.tools import play, scene
from lingbot_ros.tools.play import folder_frames, paced, Pacer, read_image, UnreadableImage
import numpy as np
import pytest
from sensor_msgs.msg import Image

DOMAIN = dds_domain(53)
DEMO_DOMAIN = dds_domain(54)  # the demo's own node and player, apart from the probe
BIN = Path(sys.executable).parent


def _env(domain=DOMAIN):
    return dds_env(domain)


@pytest.fixture(scope='module')
def probe():
    os.environ['ROS_AUTOMATIC_DISCOVERY_RANGE'] = 'LOCALHOST'
    p = Probe('play_probe', domain_id=DOMAIN)
    yield p
    p.close()


def _play(probe, topic, args, expect, output=None):
    got = probe.collect(Image, topic)
    proc = subprocess.Popen([str(BIN / 'lingbot-ros-play')] + args + [
        '--topic', topic, '--rate', '30', '--quiet', '--wait', '30'], env=_env(),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    probe.spin_until(lambda: len(got) >= expect and proc.poll() is not None, 60)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    probe.spin_for(0.3)
    if output is not None:
        output.append(out)
    return got


def _rgb(msg):
    return np.frombuffer(bytes(msg.data), np.uint8).reshape(msg.height, msg.width, 3)


def test_scene_is_deterministic_and_moves():
    a = list(scene.frames(3, 64, 48))
    b = list(scene.frames(3, 64, 48))
    assert all(np.array_equal(x.image, y.image) for x, y in zip(a, b))
    assert not np.array_equal(a[0].image, a[2].image)
    assert a[0].image.std() > 10  # textured, not flat
    assert np.linalg.norm(a[2].pose_c2w[:3, 3] - a[0].pose_c2w[:3, 3]) > 0.5


def test_folder_is_published_in_order_with_its_pixels(probe, tmp_path):
    folder = scene.write(tmp_path / 'seq', 4, 64, 48)
    assert (folder / 'groundtruth.tum').is_file()
    got = _play(probe, '/play/folder', [str(folder)], 4)
    assert len(got) == 4
    files = sorted(folder.glob('*.png'))
    for msg, path in zip(got, files):
        assert msg.encoding == 'rgb8' and msg.header.frame_id == 'camera_optical_frame'
        np.testing.assert_array_equal(_rgb(msg), cv2.imread(str(path))[..., ::-1])
    stamps = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in got]
    assert stamps == sorted(stamps) and len(set(stamps)) == 4


def test_video_with_count_and_loop(probe, tmp_path):
    path = tmp_path / 'clip.avi'
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*'MJPG'), 10, (64, 48))
    for f in scene.frames(3, 64, 48):
        writer.write(np.ascontiguousarray(f.image[..., ::-1]))
    writer.release()
    got = _play(probe, '/play/video', [str(path), '--loop', '--count', '7'], 7)
    assert len(got) == 7 and (got[0].width, got[0].height) == (64, 48)
    # the loop starts again: frame 4 is frame 1 (MJPG is deterministic per frame)
    np.testing.assert_array_equal(_rgb(got[3]), _rgb(got[0]))


@pytest.mark.parametrize('storage', ['sqlite3', 'mcap'])
def test_a_bag_is_republished_with_its_frame_id_and_stamps(probe, tmp_path, storage):
    frames = list(scene.frames(3, 32, 24))
    stamps = [5_000_000_000 + i * 250_000_000 for i in range(3)]
    bag = write_bag(tmp_path / 'bag', {
        '/cam/image_raw': [(s, f.image, 'cam') for s, f in zip(stamps, frames)],
        '/other/compressed': [(1, frames[0].image, 'other')]}, storage)
    got = _play(probe, f'/play/bag_{storage}', [str(bag), '--bag-topic', '/cam/image_raw'], 3)
    assert [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in got] == stamps
    assert [m.header.frame_id for m in got] == ['cam'] * 3
    for msg, f in zip(got, frames):
        np.testing.assert_array_equal(_rgb(msg), f.image)
    # --restamp: the clock at publish time; --frame-id: a name of one's own
    before = time.time_ns()
    got = _play(probe, f'/play/bag_{storage}_now', [str(bag), '--bag-topic', '/cam/image_raw',
                                                    '--restamp', '--frame-id', 'mine'], 3)
    now = [m.header.stamp.sec * 10**9 + m.header.stamp.nanosec for m in got]
    assert all(before <= t <= time.time_ns() for t in now), (before, now)
    assert [m.header.frame_id for m in got] == ['mine'] * 3
    # two image topics and none named: refused, naming them
    proc = subprocess.run([str(BIN / 'lingbot-ros-play'), str(bag), '--wait', '0'],
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and 'choose one with --bag-topic' in proc.stderr
    assert '/cam/image_raw (Image, 3 messages)' in proc.stderr
    assert '/other/compressed (CompressedImage, 1 messages)' in proc.stderr


def test_bad_arguments_are_refused():
    proc = subprocess.run([str(BIN / 'lingbot-ros-play'), 'scene', '--rate', '0'], env=_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and '--rate=0.0 is invalid' in proc.stderr


def test_player_waits_for_as_many_subscribers_as_asked(probe):
    # With --subscribers 2 nothing goes out while one reader is matched (live_node.py's case:
    # the counter beside the node must not see frames sent before the node's reader is).
    topic = '/play_test/two_readers'
    first = probe.collect(Image, topic)
    proc = subprocess.Popen([str(BIN / 'lingbot-ros-play'), 'scene', '--count', '5', '--topic',
                             topic, '--rate', '30', '--quiet', '--wait', '60',
                             '--subscribers', '2'], env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        probe.spin_for(3.0)
        assert first == [] and proc.poll() is None
        second = probe.collect(Image, topic)
        probe.spin_until(lambda: len(second) >= 5 and proc.poll() is not None, 60)
        out = proc.communicate(timeout=30)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    probe.spin_for(0.3)
    assert proc.returncode == 0, out
    assert len(first) == len(second) == 5


def test_subscribers_below_one_are_refused():
    proc = subprocess.run([str(BIN / 'lingbot-ros-play'), 'scene', '--subscribers', '0'],
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and '--subscribers=0 is invalid' in proc.stderr


def test_demo_streams_the_scene_through_the_node_and_exits_zero():
    env = _env(DEMO_DOMAIN)
    proc = subprocess.run([str(BIN / 'lingbot-ros-demo'), '--frames', '6', '--rate', '5',
                           '--image-size', '56', '--scale-frames', '2', '--timeout', '120'],
                          env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert 'TINY RANDOM-WEIGHT' in out
    poses = [line for line in out.splitlines() if line.startswith('pose ')]
    assert len(poses) == 6 and poses[-1].startswith('pose   6/6')
    assert 'final diagnostics' in out and 'processed 6' in out
    assert '[WARN] node: random weights' in out


def test_truncated_file_in_a_folder_is_skipped_and_named(probe, tmp_path):
    folder = scene.write(tmp_path / 'seq', 3, 64, 48)
    cut = folder / 'frame_00001b.png'  # between frames 1 and 2 in name order
    data = (folder / 'frame_00001.png').read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    output = []
    got = _play(probe, '/play/truncated', [str(folder)], 3, output)
    assert len(got) == 3
    files = sorted(folder.glob('frame_?????.png'))
    for msg, path in zip(got, files):
        np.testing.assert_array_equal(_rgb(msg), cv2.imread(str(path))[..., ::-1])
    assert f'skipping {cut}: truncated or corrupt PNG' in output[0]


# --- pacing, without DDS: a fake clock that sleeping and decoding move forward -----------


class FakeTime:
    """A monotonic clock that only moves when the code under test sleeps or works."""

    def __init__(self, start=100.0, overshoot=0.0):
        self.now = start
        self.overshoot = overshoot
        self.sleeps = []

    def clock(self):
        return self.now

    def sleep(self, seconds):
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds + self.overshoot

    def work(self, seconds):
        self.now += seconds


def _run(costs, rate, overshoot=0.0, count=0, loop=False):
    """Send frames whose production costs ``costs`` seconds each; return the send times."""
    t = FakeTime(overshoot=overshoot)
    sent = []

    def source():
        for i, cost in enumerate(costs):
            t.work(cost)  # decoding happens here, before the frame's slot
            yield i

    pacer = Pacer(rate, clock=t.clock, sleep=t.sleep)
    n = paced(source, lambda item: sent.append((item, t.clock())), pacer, count, loop)
    assert n == len(sent)
    return [when for _, when in sent], [item for item, _ in sent], pacer, t


def test_schedule_starts_at_the_first_frame_however_slow_it_is():
    period = 1 / 10
    costs = [2.5] + [0.03] * 20  # a 2.5 s first render, then fast frames
    times, items, _, _ = _run(costs, rate=10)
    assert items == list(range(21))
    assert times[0] == pytest.approx(100.0 + 2.5)  # sent as soon as it exists
    gaps = np.diff(times)
    # the backlog of the slow start is not sent: every gap is one period
    np.testing.assert_allclose(gaps, period, atol=1e-9)


def test_a_stall_moves_the_schedule_instead_of_bursting():
    period = 1 / 30
    costs = [0.01] * 10 + [0.8] + [0.01] * 10 + [0.2, 0.2] + [0.005] * 10
    times, _, pacer, _ = _run(costs, rate=30)
    gaps = np.diff(times)
    assert gaps.min() >= period - pacer.slack - 1e-9
    assert gaps[9] == pytest.approx(0.8)  # the stalled frame goes out when it is ready
    np.testing.assert_allclose(gaps[10:20], period, atol=1e-9)  # then the rate, no burst
    np.testing.assert_allclose(gaps[-10:], period, atol=1e-9)


def test_sleep_overshoot_neither_drifts_nor_crowds():
    period = 1 / 30
    times, _, pacer, _ = _run([0.002] * 301, rate=30, overshoot=0.002)
    gaps = np.diff(times)
    assert gaps.min() >= period - pacer.slack - 1e-9
    # the mean rate is the requested one: overshoot within the slack does not accumulate
    assert (times[-1] - times[0]) / 300 == pytest.approx(period, abs=0.003)


def test_decode_time_does_not_delay_the_slot():
    """A frame produced in less than a period leaves on the schedule, not after its decode."""
    times, _, _, t = _run([0.07] * 6, rate=10)
    np.testing.assert_allclose(times, 100.07 + 0.1 * np.arange(6), atol=1e-9)
    np.testing.assert_allclose(t.sleeps, 0.03, atol=1e-9)


def test_count_and_loop():
    _, items, _, _ = _run([0.0] * 3, rate=100, count=7, loop=True)
    assert items == [0, 1, 2, 0, 1, 2, 0]
    _, items, _, _ = _run([0.0] * 3, rate=100, count=2)
    assert items == [0, 1]
    _, items, _, _ = _run([], rate=100, loop=True)  # an empty source does not spin forever
    assert items == []


def test_pacer_refuses_a_rate_that_is_not_positive():
    with pytest.raises(ValueError, match='rate=0'):
        Pacer(0)


# --- truncated and unreadable image files ------------------------------------------------


@pytest.fixture
def image_folder(tmp_path):
    """Real PNG and JPEG files written by cv2, with cut-short and broken ones among them."""
    frames = [f.image for f in scene.frames(4, 64, 48)]
    folder = tmp_path / 'images'
    folder.mkdir()
    good = {}
    for i, (rgb, ext) in enumerate(zip(frames, ['.png', '.jpg', '.png', '.jpg'])):
        path = folder / f'{i}_good{ext}'
        assert cv2.imwrite(str(path), np.ascontiguousarray(rgb[..., ::-1]))
        good[path.name] = cv2.imread(str(path))[..., ::-1]
    # data after the end of the image (as motion photos have) is not truncation
    tail = folder / '4_trailer.jpg'
    tail.write_bytes((folder / '1_good.jpg').read_bytes() + b'MotionPhoto' * 20)
    good[tail.name] = good['1_good.jpg']
    bad = {}
    for name, src, keep in (('0_cut.png', '0_good.png', 0.5), ('1_cut.jpg', '1_good.jpg', 0.5),
                            ('2_cut.jpg', '3_good.jpg', 0.97), ('3_cut.png', '2_good.png', 0.99)):
        data = (folder / src).read_bytes()
        (folder / name).write_bytes(data[:int(len(data) * keep)])
        bad[name] = 'truncated or corrupt ' + ('PNG' if name.endswith('png') else 'JPEG')
    (folder / '5_empty.png').write_bytes(b'')
    bad['5_empty.png'] = 'empty file'
    (folder / '6_text.jpg').write_text('not an image\n')
    bad['6_text.jpg'] = 'not readable as an image'
    return folder, good, bad


def _check_folder(folder, good, bad, capsys):
    frames = list(folder_frames(folder))
    err = capsys.readouterr().err
    assert len(frames) == len(good)
    for (rgb, stamp, frame_id), name in zip(frames, sorted(good)):
        assert stamp is None and frame_id is None
        np.testing.assert_array_equal(rgb, good[name])
    lines = err.splitlines()
    assert len(lines) == len(bad), err
    for name, reason in bad.items():
        assert any(line.startswith(f'skipping {folder / name}: {reason}') for line in lines), err


def test_folder_skips_truncated_and_broken_files_and_names_them(image_folder, capsys):
    _check_folder(*image_folder, capsys)


def test_truncation_is_caught_even_where_opencv_decodes_part_of_a_file(image_folder, capsys,
                                                                       monkeypatch):
    """Older OpenCV builds return the rows they could decode; that must not be published."""
    real = cv2.imdecode

    def lenient(buf, flags):
        img = real(buf, flags)
        return np.full((48, 64, 3), 128, np.uint8) if img is None else img

    monkeypatch.setattr(play.cv2, 'imdecode', lenient)
    folder, good, bad = image_folder
    bad = dict(bad)
    del bad['6_text.jpg']  # a text file now "decodes": only the end-marker checks remain
    good = dict(good, **{'6_text.jpg': np.full((48, 64, 3), 128, np.uint8)})
    _check_folder(folder, good, bad, capsys)


def test_read_image_says_why(tmp_path):
    path = tmp_path / 'a.jpg'
    ok, data = cv2.imencode('.jpg', np.zeros((8, 8, 3), np.uint8))
    path.write_bytes(data.tobytes()[:-40])
    with pytest.raises(UnreadableImage, match='truncated or corrupt JPEG, no end-of-image'):
        read_image(path)
    with pytest.raises(UnreadableImage, match='cannot be read'):
        read_image(tmp_path / 'absent.png')
