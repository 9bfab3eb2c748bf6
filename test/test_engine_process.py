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

"""The model in a process of its own: the same results as in one, errors, and its end."""

import os
from pathlib import Path
import signal
import subprocess
import sys
import time

from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.engine import Engine, EngineError
from lingbot_ros.streaming.engine_process import (EngineProcess, EngineProcessLost,
                                                  EngineRestarted, ImageSlot, Launch,
                                                  RestartPolicy, share_arrays,
                                                  SHARED_MIN_BYTES, SharedArray,
                                                  unshare_arrays)
from lingbot_ros.streaming.result import FrameResult, FrameType
from lingbot_ros.streaming.session import SizeChanged
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
ENGINE = EngineConfig(preset='tiny', device='cpu', dtype='float32')
STREAM = StreamConfig(scale_frames=2, sliding_window=3, image_size=56)


def _frames(n, h=40, w=56, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for _ in range(n)]


def _gone(pid, wait=15.0):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope='module')
def remote():
    engine = EngineProcess.start(ENGINE)
    yield engine
    engine.close()


def test_a_remote_session_gives_what_the_same_session_gives_in_this_process(remote):
    local = Engine.load(ENGINE)
    assert (remote.description, remote.backend, str(remote.device), remote.hardware_id) == \
        (local.description, local.backend, str(local.device), local.hardware_id)
    assert remote.checkpoint is None and remote.device_memory() is None
    ours, theirs = local.new_session('cam', STREAM), remote.new_session('cam', STREAM)
    assert theirs.config == ours.config
    frames = _frames(7)
    for i, frame in enumerate(frames):
        a, b = ours.step(frame, 10 + i), theirs.step(frame, 10 + i)
        assert [r.stamp_ns for r in a] == [r.stamp_ns for r in b]
        for x, y in zip(a, b):  # the same code on the same CPU: the same numbers
            assert x.frame_type == y.frame_type and x.index == y.index
            np.testing.assert_allclose(y.pose_c2w, x.pose_c2w, rtol=0, atol=1e-6)
            np.testing.assert_allclose(y.depth, x.depth, rtol=1e-5, atol=1e-6)
            assert np.array_equal(y.colors, x.colors)
            assert y.timings.streamed == x.timings.streamed
            assert (y.timings.prepare is None) == (x.timings.prepare is None)
    assert theirs.stats() == ours.stats()
    assert remote.memory_estimate(STREAM, (40, 56)) == local.memory_estimate(STREAM, (40, 56))


def test_large_arrays_come_back_through_the_results_file_as_it_grows(remote):
    local = Engine.load(ENGINE)
    for size in (112, 336, 448):  # below the shared size, then a file, then a larger one
        cfg = STREAM.replace(image_size=size)
        ours, theirs = local.new_session(f'l{size}', cfg), remote.new_session(f'r{size}', cfg)
        frames = _frames(4, h=3 * size // 4, w=size, seed=size)
        pairs = [p for i, frame in enumerate(frames)
                 for p in zip(ours.step(frame, 1 + i), theirs.step(frame, 1 + i))]
        assert len(pairs) == 4
        # compared after later replies reused the file: each result was copied out of it
        for x, y in pairs:
            np.testing.assert_allclose(y.depth, x.depth, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(y.confidence, x.confidence, rtol=1e-5, atol=1e-6)
            assert np.array_equal(y.colors, x.colors) and y.depth.flags.writeable


def test_sharing_replaces_only_large_arrays_and_unsharing_restores_them():
    small, large = np.arange(6.0).reshape(2, 3), np.arange(SHARED_MIN_BYTES, dtype=np.uint8)
    result = FrameResult(stamp_ns=1, index=0, frame_type=FrameType.KEYFRAME,
                         pose_c2w=np.eye(4), pose_enc=np.zeros(9, np.float32),
                         intrinsics=np.eye(3), intrinsics_model=np.eye(3), input_hw=(2, 3),
                         model_hw=(2, 3), depth=small, colors=large)
    area, used = bytearray(2 * SHARED_MIN_BYTES), []

    def place(array):
        offset = 64 * len(used)
        area[offset:offset + array.nbytes] = array.tobytes()
        used.append(array)
        return SharedArray(offset, array.shape, array.dtype.str)
    shared = share_arrays([result], place)[0]
    assert shared.depth is small and isinstance(shared.colors, SharedArray)
    back = unshare_arrays([shared], area)[0]
    assert back.depth is small and np.array_equal(back.colors, large)


def test_errors_come_back_as_raised_there_and_change_nothing(remote):
    session = remote.new_session('errors', STREAM)
    frames = _frames(4, seed=1)
    for i, frame in enumerate(frames[:3]):
        session.step(frame, 100 + i)
    before = session.stats()
    with pytest.raises(SizeChanged, match='differs'):
        session.step(_frames(1, h=42)[0], 200)
    with pytest.raises(ValueError, match='uint8'):
        session.step(frames[0].astype(np.float32), 201)
    with pytest.raises(ValueError, match='exists already'):
        remote.new_session('errors', STREAM)
    assert session.stats() == before
    assert len(session.step(frames[3], 300)) == 1  # it streams on
    # a runtime field applies; one that needs a new session is refused, nothing changed
    session.update(STREAM.replace(keyframe_interval=2))
    assert session.config.keyframe_interval == 2
    with pytest.raises(ConfigError):
        session.update(STREAM.replace(sliding_window=5))
    assert session.config.sliding_window == 3
    session.reset()
    assert session.step(frames[0], 400) == []  # a new stream buffers its scale frames
    assert session.stats().frames == 0


def test_a_frame_larger_than_the_shared_file_is_refused_before_it_is_sent():
    slot = ImageSlot(64)
    try:
        with pytest.raises(ValueError, match='max_input_pixels'):
            slot.put(np.zeros((5, 5, 3), np.uint8))
        meta = slot.put(np.arange(48, dtype=np.uint8).reshape(4, 4, 3))
        assert meta.shape == (4, 4, 3) and bytes(slot.map[:48]) == bytes(range(48))
    finally:
        slot.close()


def test_a_load_that_fails_says_why_and_leaves_no_process():
    launch = Launch()
    pid = launch.proc.pid
    with pytest.raises(EngineError, match='no_such_weights'):
        launch.load(EngineConfig(checkpoint='/nonexistent/no_such_weights.pt', device='cpu'))
    assert _gone(pid)


def test_a_killed_model_process_is_replaced_as_often_as_the_policy_allows():
    said = []
    engine = EngineProcess.start(ENGINE, progress=said.append,
                                 restarts=RestartPolicy(count=1, window_s=600))
    session = engine.new_session('cam', STREAM)
    session.update(STREAM.replace(keyframe_interval=2))
    other = engine.new_session('other', STREAM.replace(image_size=112))
    frames = _frames(4)
    for i in range(3):
        session.step(frames[i], 1 + i)
        other.step(frames[i], 1 + i)
    first = engine.pid
    os.kill(first, signal.SIGKILL)
    with pytest.raises(EngineRestarted, match='signal 9'):
        session.step(frames[3], 4)  # this frame is lost; the session starts over
    assert engine.pid != first and engine.alive and engine.restarts == 1
    assert any('starting a new one' in text for text in said)
    assert session.step(frames[0], 5) == [] and len(session.step(frames[1], 6)) == 2
    assert session.config.keyframe_interval == 2  # opened again as it was configured
    assert other.stats().frames == 0 and other.step(frames[0], 5) == []  # it started over
    assert len(other.step(frames[1], 6)) == 2 and other.config.image_size == 112
    os.kill(engine.pid, signal.SIGKILL)
    with pytest.raises(EngineProcessLost, match='1 restart'):
        session.step(frames[2], 7)
    with pytest.raises(EngineProcessLost, match='gone'):
        session.step(frames[3], 8)
    assert not engine.alive and 'signal 9' in engine.lost
    engine.close()


def test_close_ends_the_process_and_ctrl_c_alone_does_not():
    engine = EngineProcess.start(ENGINE)
    os.kill(engine.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches the whole group
    session = engine.new_session('cam', STREAM)
    assert session.step(_frames(1)[0], 1) == [] and engine.alive
    assert engine.close() == 0 and _gone(engine.pid) and not engine.alive


def test_the_model_process_ends_when_the_node_process_dies_without_closing_it():
    script = ('import sys; from lingbot_ros.streaming.config import EngineConfig;'
              'from lingbot_ros.streaming.engine_process import EngineProcess;'
              "e = EngineProcess.start(EngineConfig(preset='tiny', device='cpu'));"
              'print(e.pid, flush=True); sys.stdin.read()')
    parent = subprocess.Popen([sys.executable, '-c', script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        child = int(parent.stdout.readline())
        os.kill(child, 0)  # running
        parent.kill()  # no close, no atexit: only the OS knows
        parent.wait(10)
        assert _gone(child)
    finally:
        if parent.poll() is None:
            parent.kill()
