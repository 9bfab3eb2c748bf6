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
Save one camera stream's state; resume it later in the same map frame, exactly.

A stream's state is what its next frame reads: the resident keys and values of both
caches (the aggregator's scale frames and window keyframes, the camera head's tokens)
with their slots and counters, the window's Sim(3) into the map, its RoPE time index,
the frames that seed the next window, the keyframe policy's last keyframe, the
trajectory and the keyframe positions, the map epoch, the lifetime counters.
:func:`save_session` writes it (:mod:`.state_file`: safetensors plus a JSON header),
whole or not at all, with what it belongs to: the model structure, the weights' sha256
(or, for seeded random weights, the sha256 of structure and seed), the compute and
cache dtypes, the stream settings that size the caches, the image grid, the format
version. :func:`load_into` refuses a file that belongs to anything else, or is not
whole, in one line (:class:`~lingbot_ros.streaming.errors.StateError`), before the
session changes; a state it takes continues the stream as if it had never stopped: the
next frame attends to the same keys at the same time index, in the same frame and scale.
A save in two steps (:func:`capture` on the session's thread, :func:`write_captured`
anywhere) lets the node write the file off the thread that owns the session, with what
the camera published beside the state: its voxel map, its track and its metric scale
(:func:`read_voxels`, :func:`read_track`, :func:`read_scale` read them back).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
import hashlib
import json
from pathlib import Path
from typing import Any, List, Optional, Tuple, Union

from lingbot_ros.model.config import ModelConfig, SPECIAL_TOKENS
from lingbot_ros.streaming.config import StreamConfig
from lingbot_ros.streaming.errors import StateCorrupt, StateMismatch
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.relocalise import RESUME_REPORT_FRAMES
from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.state_file import (FORMAT_VERSION, PublishedTrack, read_scale,
                                              read_state, read_track, read_voxels,
                                              SessionState, StateIdentity, StreamSettings,
                                              write_state)
import torch

__all__ = ['capture', 'Captured', 'FORMAT_VERSION', 'identity_of', 'load_into',
           'PublishedTrack', 'random_weights_digest', 'read_scale', 'read_track',
           'read_voxels', 'save_session', 'SavedState', 'state_bytes', 'StateIdentity',
           'StateSize', 'StreamSettings', 'write_captured']

PathLike = Union[str, Path]
# how a refusal names a field of StateIdentity / StreamSettings
LABELS = {'weights': 'checkpoint', 'dtype': 'compute dtype', 'kv_dtype': 'KV cache dtype',
          'camera_kv_dtype': 'camera-head cache dtype', 'window_limit': 'max_window_frames'}


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace('torch.', '')


def model_structure(model_config: ModelConfig) -> str:
    """Return the structure as sorted JSON (its ``name`` left out: a label, not structure)."""
    data = model_config.to_dict()
    data.pop('name', None)
    return json.dumps(data, sort_keys=True)


def random_weights_digest(model_config: ModelConfig, seed: int) -> str:
    """Return the sha256 that stands for seeded random weights: of structure and seed."""
    text = json.dumps({'model': json.loads(model_structure(model_config)), 'seed': int(seed)},
                      sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def identity_of(model_config: ModelConfig, weights: str, dtype: torch.dtype,
                kv_dtype: torch.dtype, camera_kv_dtype: torch.dtype) -> StateIdentity:
    """Build the identity an engine's streams are saved and resumed under."""
    return StateIdentity(model=model_structure(model_config), weights=weights,
                         dtype=_dtype_name(dtype), kv_dtype=_dtype_name(kv_dtype),
                         camera_kv_dtype=_dtype_name(camera_kv_dtype))


def stream_settings(cfg: StreamConfig, window_limit: int,
                    model_config: ModelConfig) -> StreamSettings:
    """Return the settings of a stream that size its caches and clock."""
    return StreamSettings(scale_frames=cfg.scale_frames, sliding_window=cfg.sliding_window,
                          window_limit=window_limit,
                          camera_iterations=cfg.camera_iterations
                          or model_config.camera_head.iterations,
                          image_size=cfg.image_size)


def _settings_of(session: Any, identity: StateIdentity) -> StreamSettings:
    model_config = ModelConfig.from_dict(json.loads(identity.model))
    return stream_settings(session.config, session.window_limit, model_config)


@dataclass(frozen=True)
class SavedState:
    """A state written: where, how many bytes, and the frames landed to write it."""

    path: Path
    size_bytes: int
    landed: List[FrameResult]   # a frame in flight, landed first: hand these out as usual


@dataclass(frozen=True)
class Captured:
    """A session's state copied to the host, ready to write anywhere, any time."""

    identity: StateIdentity
    settings: StreamSettings
    state: SessionState
    landed: List[FrameResult]   # a frame in flight, landed first: hand these out as usual


def capture(session: Any, identity: StateIdentity) -> Captured:
    """
    Copy ``session``'s state to the host under ``identity`` (on the session's own thread).

    A frame still in flight lands first (``session.drain()``); its result is returned
    in ``landed``. The session goes on unchanged. Only paged caches can be saved. The
    copy is the session's whole state: what it takes on the host is what the file takes.
    """
    landed = session.drain()
    state = session.export_state(torch.device('cpu'))
    return Captured(identity, _settings_of(session, identity), state, landed)


def write_captured(captured: Captured, path: PathLike, voxels: Optional[MapVoxels] = None,
                   scale: Optional[SavedScale] = None,
                   track: Optional[PublishedTrack] = None) -> SavedState:
    """
    Write a captured state to ``path``, whole or not at all, with what the stream published.

    ``voxels``: its voxel map; ``scale``: its metric scale (of the captured map epoch);
    ``track``: its published track.
    """
    size = write_state(path, captured.identity, captured.settings, captured.state, voxels,
                       scale, track)
    return SavedState(path=Path(path), size_bytes=size, landed=captured.landed)


def save_session(session: Any, path: PathLike, identity: StateIdentity,
                 scale: Optional[SavedScale] = None) -> SavedState:
    """
    Write ``session``'s state (and its metric scale) to ``path`` under ``identity``.

    :func:`capture` then :func:`write_captured`, on the session's thread: a frame in
    flight lands first and is returned in ``landed``.
    """
    return write_captured(capture(session, identity), path, scale=scale)


def load_into(session: Any, path: PathLike, identity: StateIdentity,
              input_hw: Optional[Tuple[int, int]] = None,
              model_hw: Optional[Tuple[int, int]] = None,
              report_frames: int = RESUME_REPORT_FRAMES) -> None:
    """
    Resume ``session`` from the state at ``path``, saved under the same ``identity``.

    ``input_hw`` / ``model_hw``: the size of the frames that will follow and of the
    model grid, where known (a state of another image grid is then refused); the
    session's own settings are compared with the file's. Any refusal is a
    :class:`StateError` of one line, and the session is left as it was.
    ``report_frames``: resumed frames measured against the saved keyframes
    (``session.resume_report``).
    """
    saved_identity, saved_settings, state = read_state(path)
    _compare(path, saved_identity, identity)
    _compare(path, saved_settings, _settings_of(session, identity))
    for what, saved, ours in (('image size', state.input_hw, input_hw),
                              ('model grid', state.model_hw, model_hw)):
        if saved is not None and ours is not None and tuple(saved) != tuple(ours):
            raise StateMismatch(f'state file {path}: {what} differs: {_hw(saved)} in the '
                                f'file, {_hw(ours)} here')
    _check_consistent(path, state)
    try:
        session.import_state(state, report_frames)
    except ValueError as exc:
        raise StateCorrupt(f'state file {path}: {exc}') from exc


def _hw(hw: Tuple[int, int]) -> str:
    return f'{hw[1]}x{hw[0]}'


def _compare(path: PathLike, saved: Any, ours: Any) -> None:
    """Raise StateMismatch naming the first field of ``saved`` unlike ``ours``."""
    for f in fields(saved):
        theirs, mine = getattr(saved, f.name), getattr(ours, f.name)
        if theirs == mine:
            continue
        if f.name == 'model':
            where, theirs, mine = _first_difference(json.loads(theirs), json.loads(mine))
            raise StateMismatch(f'state file {path}: model structure differs: {where} is '
                                f'{theirs!r} in the file, {mine!r} here')
        raise StateMismatch(f'state file {path}: {LABELS.get(f.name, f.name)} differs: '
                            f'{theirs!r} in the file, {mine!r} here')


def _first_difference(a: Any, b: Any, where: str = '') -> Tuple[str, Any, Any]:
    """Return (dotted key, a's value, b's value) of the first place two JSON values differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f'{where}.{key}'.lstrip('.'))
    return where or 'model', a, b


def _check_consistent(path: PathLike, state: SessionState) -> None:
    """Refuse a state whose parts contradict each other (what a session could never hold)."""
    why = None
    w = state.windows.current
    last = state.last_keyframe
    if w is not None and (last is None or state.buffer):
        why = 'a window without a last keyframe, or with scale frames waiting'
    elif last is not None and not last[0] < state.index:
        why = f'last keyframe {last[0]} is not before frame {state.index}'
    elif state.stream_frames > state.index:
        why = f'{state.stream_frames} streamed frames of {state.index}'
    elif w is not None and state.model_hw is None:
        why = 'a window without an image grid'
    if why is not None:
        raise StateCorrupt(f'state file {path}: {why}')


# --- size ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class StateSize:
    """
    Bytes of a saved state, by part (its tensors; the JSON header adds a few kB).

    ``per_cached_frame``: a frame whose patches are resident (scale frames, the window's
    keyframes): its patch and special tokens in the aggregator, its camera-head token;
    ``per_evicted_frame``: a frame of the window whose patches are gone (special tokens and
    camera token stay); ``per_overlap_frame``: a frame kept to seed the next window (image,
    depth, pose); ``per_pose``: a trajectory entry; ``per_keyframe``: a keyframe position.
    """

    per_cached_frame: int
    per_evicted_frame: int
    per_overlap_frame: int
    per_pose: int = 8 + 16 * 8
    per_keyframe: int = 8 + 8 + 3 * 8
    fixed: int = (1 + 9 + 3) * 8 + (16 + 9) * 8   # Sim(3), last keyframe pose and K

    def total(self, resident: int, committed: int, overlap: int, poses: int = 0,
              keyframes: int = 0) -> int:
        """Bytes of a state with a window of ``committed`` frames, ``resident`` of them whole."""
        return (self.fixed + resident * self.per_cached_frame
                + (committed - resident) * self.per_evicted_frame
                + overlap * self.per_overlap_frame + poses * self.per_pose
                + keyframes * self.per_keyframe)

    def full(self, stream: StreamConfig, window_limit: int) -> int:
        """Bytes of a window at its fullest: every resident slot and special token used."""
        resident = stream.scale_frames + stream.sliding_window
        return self.total(min(resident, window_limit), window_limit, stream.scale_frames)


def state_bytes(model_config: ModelConfig, stream: StreamConfig, model_hw: Tuple[int, int],
                kv_dtype: torch.dtype, camera_kv_dtype: torch.dtype = torch.float32,
                image_dtype: torch.dtype = torch.float32) -> StateSize:
    """Return what a state of this structure, grid and dtypes takes, from the structure."""
    agg, cam = model_config.aggregator, model_config.camera_head
    p = model_config.patch_size
    h, w = model_hw
    patches = (h // p) * (w // p)
    token = 2 * agg.depth * agg.num_heads * agg.head_dim * _size(kv_dtype)
    iterations = stream.camera_iterations or cam.iterations
    camera = 2 * cam.trunk_depth * iterations * model_config.head_width * _size(camera_kv_dtype)
    special = SPECIAL_TOKENS * token + camera
    overlap = 3 * h * w * _size(image_dtype) + h * w * 4 + 16 * 8
    return StateSize(per_cached_frame=patches * token + special, per_evicted_frame=special,
                     per_overlap_frame=overlap)


def _size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
