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
A stream's saved state as a file: one safetensors file, its header in the metadata.

The file's ``__metadata__`` holds ``format`` (:data:`FORMAT_NAME`), ``version``
(:data:`FORMAT_VERSION`) and ``header``, a JSON object: what the state belongs to
(``identity``: the model structure as an object, the weights' hash, the dtypes;
``settings``) and every number of the state (``session``, ``windows``,
``keyframes``). The tensors hold the rest, each in the dtype the stream keeps it in, so
a state read back is bit for bit the one written:

    window.agg.keys / .values        [layers, tokens, heads, head_dim]  the aggregator
    window.camera.keys / .values     the camera head's cache (one token a frame)
    window.sim3.scale / .rotation / .translation   the window's Sim(3) into the map
    window.overlap.<i>.image / .pose / .depth      the frames that seed the next window
    session.last_keyframe.pose / .intrinsics       what the keyframe policy compares with
    session.buffer.<i>.image / .model_to_input     scale frames waiting for their call
    trajectory.stamp_ns / .pose                    the session's trajectory ring
    keyframes.index / .stamp_ns / .position        the current map's keyframe positions
    map.sums / .counts / .keys / .seen / .confidence / .rgb   the voxel map, where saved
    track.stamp_ns / .pose                         the published track, where saved
    scale.*                                        the metric scale, where saved

Three parts are optional, each with a header object of its own: the voxel map (``map``;
the node saves each camera's, the replay tool none), the published track (``track``: the
poses as the node sent them, in metres where they were, with the map convention they
are in) and the camera's metric scale (``scale``: a
:class:`~lingbot_ros.streaming.scale.saved.SavedScale`, encoded by that module; the node
saves it with a ``scale_source``, the replay tool with ``--odometry`` or
``--depth-images``). :func:`read_voxels`, :func:`read_track` and :func:`read_scale` read
them; :func:`read_state` leaves them alone. A file without them is read as before.

:func:`read_state` checks everything it reads (a tensor's presence, shape and dtype, the
header's fields) and raises :class:`~lingbot_ros.streaming.errors.StateCorrupt` naming
the first thing wrong; a newer format is a
:class:`~lingbot_ros.streaming.errors.StateMismatch`. Nothing here compares the state
with a stream: :mod:`lingbot_ros.streaming.state` does.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
import json
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Tuple, Union

from lingbot_ros.cache.stream import CacheState
from lingbot_ros.streaming.atomic import atomic_path
from lingbot_ros.streaming.errors import StateCorrupt, StateMismatch
from lingbot_ros.streaming.map_state import ARRAYS as MAP_ARRAYS, COUNTERS as MAP_COUNTERS
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.preprocess import Prepared
from lingbot_ros.streaming.relocalise import KeyframePositions
from lingbot_ros.streaming.scale import saved as saved_scale
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.trajectory import PublishedTrack
from lingbot_ros.streaming.windows import Kept, Sim3, WindowsState, WindowState
import numpy as np
import torch

FORMAT_NAME = 'lingbot_ros stream state'
FORMAT_VERSION = 1
PathLike = Union[str, Path]


@dataclass(frozen=True)
class StateIdentity:
    """
    What a state belongs to on the engine's side: structure, weights, arithmetic.

    ``model``: the :class:`~lingbot_ros.model.config.ModelConfig` as sorted JSON;
    ``weights``: ``sha256:<hex>`` of the checkpoint file, or ``random:<hex>`` (the sha256
    of the structure and seed random weights are drawn from); dtypes by name.
    """

    model: str
    weights: str
    dtype: str
    kv_dtype: str
    camera_kv_dtype: str


@dataclass(frozen=True)
class StreamSettings:
    """What sizes a stream's caches and clock (the fields a session cannot change live)."""

    scale_frames: int
    sliding_window: int     # as configured (the one in effect is part of the state)
    window_limit: int       # most frames one window commits
    camera_iterations: int  # in effect (0 resolved to the model's)
    image_size: int


@dataclass(frozen=True)
class Counters:
    """A session's lifetime counters (``stats()``)."""

    keyframes: int
    rollbacks: int
    evictions: int
    overflows: int
    calls: int


@dataclass(frozen=True)
class SessionState:
    """
    Everything a session's next frame reads, between frames, nothing in flight.

    ``last_keyframe``: ``(index, pose_map [4, 4], K_model [3, 3])``; ``trajectory``:
    ``(stamp_ns, pose_c2w)`` pairs as the session's ring holds them.
    """

    input_hw: Optional[Tuple[int, int]]
    model_hw: Optional[Tuple[int, int]]
    buffer: Tuple[Tuple[Prepared, int], ...]
    index: int
    stream_frames: int
    last_keyframe: Optional[Tuple[int, np.ndarray, np.ndarray]]
    counters: Counters
    map_epoch: int
    trajectory: Tuple[Tuple[int, np.ndarray], ...]
    keyframes: KeyframePositions
    windows: WindowsState


# --- writing -----------------------------------------------------------------------------

def _host(value: Union[torch.Tensor, np.ndarray]) -> torch.Tensor:
    """Return a CPU copy of its own (safetensors refuses tensors that share memory)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to('cpu', copy=True).contiguous()
    return torch.from_numpy(np.array(value, copy=True, order='C'))


def _cache_header(cache: CacheState) -> dict:
    return {'frames': cache.frames, 'slot_frame': list(cache.slot_frame),
            'evictions': cache.evictions, 'rollbacks': cache.rollbacks,
            'overflow_events': cache.overflow_events}


def _encode(identity: StateIdentity, settings: StreamSettings, state: SessionState,
            voxels: Optional[MapVoxels], scale: Optional[SavedScale],
            track: Optional[PublishedTrack]) -> Tuple[Dict[str, torch.Tensor], dict]:
    """Return the tensors and the header of ``state`` (and of the optional parts given)."""
    t: Dict[str, torch.Tensor] = {}
    last = state.last_keyframe
    if last is not None:
        t['session.last_keyframe.pose'] = _host(last[1])
        t['session.last_keyframe.intrinsics'] = _host(last[2])
    for i, (prep, _) in enumerate(state.buffer):
        t[f'session.buffer.{i}.image'] = _host(prep.image)
        t[f'session.buffer.{i}.model_to_input'] = _host(prep.model_to_input)
    t['trajectory.stamp_ns'] = torch.tensor([s for s, _ in state.trajectory], dtype=torch.int64)
    t['trajectory.pose'] = _host(np.stack([p for _, p in state.trajectory])
                                 if state.trajectory else np.zeros((0, 4, 4)))
    kf = state.keyframes
    t['keyframes.index'], t['keyframes.stamp_ns'] = _host(kf.index), _host(kf.stamp_ns)
    t['keyframes.position'] = _host(kf.position)
    ws = state.windows
    window = None
    if ws.current is not None:
        w = ws.current
        t['window.sim3.scale'] = torch.tensor(w.sim3.scale, dtype=torch.float64)
        t['window.sim3.rotation'] = _host(w.sim3.rotation)
        t['window.sim3.translation'] = _host(w.sim3.translation)
        for i, kept in enumerate(w.overlap):
            t[f'window.overlap.{i}.image'] = _host(kept.image)
            t[f'window.overlap.{i}.pose'] = _host(kept.pose_map)
            if kept.depth_map is not None:
                t[f'window.overlap.{i}.depth'] = _host(kept.depth_map)
        for name, cache in (('agg', w.agg), ('camera', w.camera)):
            # exported for this file already (the largest tensors: copied once only)
            t[f'window.{name}.keys'] = cache.keys.to('cpu').contiguous()
            t[f'window.{name}.values'] = cache.values.to('cpu').contiguous()
        window = {'index': w.index, 'time': w.time, 'seen': w.seen,
                  'overlap': [{'index': k.index, 'depth': k.depth_map is not None}
                              for k in w.overlap],
                  'agg': _cache_header(w.agg), 'camera': _cache_header(w.camera)}
    header = {
        'identity': {**asdict(identity), 'model': json.loads(identity.model)},
        'settings': asdict(settings),
        'session': {'input_hw': state.input_hw, 'model_hw': state.model_hw,
                    'buffer': [{'stamp_ns': s, 'input_hw': list(p.input_hw)}
                               for p, s in state.buffer],
                    'index': state.index, 'stream_frames': state.stream_frames,
                    'last_keyframe_index': None if last is None else last[0],
                    'counters': asdict(state.counters), 'map_epoch': state.map_epoch},
        'windows': {'frames': ws.frames, 'opened': ws.opened,
                    'memory_shrinks': ws.memory_shrinks, 'last_oom': ws.last_oom,
                    'spoiled': ws.spoiled, 'current': window},
        'keyframes': {'map_epoch': kf.map_epoch},
    }
    if voxels is not None:
        for name in MAP_ARRAYS:
            t[f'map.{name}'] = _host(getattr(voxels, name))
        header['map'] = {'voxel_size': float(voxels.voxel_size), 'epoch': voxels.epoch,
                         'frame': voxels.frame,
                         **{name: getattr(voxels, name) for name in MAP_COUNTERS}}
    if track is not None:
        t['track.stamp_ns'] = _host(track.stamp_ns.astype(np.int64))
        t['track.pose'] = _host(track.pose.astype(np.float64))
        header['track'] = {'frame': track.frame}
    if scale is not None:
        arrays, header['scale'] = saved_scale.encode(scale)
        t.update({f'scale.{name}': _host(a) for name, a in arrays.items()})
    return t, header


def write_state(path: PathLike, identity: StateIdentity, settings: StreamSettings,
                state: SessionState, voxels: Optional[MapVoxels] = None,
                scale: Optional[SavedScale] = None,
                track: Optional[PublishedTrack] = None) -> int:
    """Write ``state`` and the optional parts to ``path``, whole or not at all; return the size."""
    from safetensors.torch import save_file
    tensors, header = _encode(identity, settings, state, voxels, scale, track)
    metadata = {'format': FORMAT_NAME, 'version': str(FORMAT_VERSION),
                'header': json.dumps(header, sort_keys=True)}
    with atomic_path(path) as temp:
        save_file(tensors, str(temp), metadata=metadata)
        size = temp.stat().st_size
    return size


# --- reading -----------------------------------------------------------------------------

class _Reader:
    """Typed access to a state file's header fields and tensors; StateCorrupt on anything off."""

    def __init__(self, handle: Any, path: Path) -> None:
        self._f = handle
        self._names = set(handle.keys())
        self.path = path

    def names(self, prefix: str) -> list:
        """Return the tensors whose names start with ``prefix``, sorted."""
        return sorted(n for n in self._names if n.startswith(prefix))

    def corrupt(self, what: str) -> StateCorrupt:
        return StateCorrupt(f'state file {self.path}: {what}')

    def tensor(self, name: str, shape: Optional[tuple] = None,
               dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Return a tensor; ``shape`` may hold None for any size there."""
        if name not in self._names:
            raise self.corrupt(f'tensor {name} is missing')
        try:
            t = self._f.get_tensor(name)
        except Exception as exc:  # noqa: BLE001 - whatever the library says of bad bytes
            raise self.corrupt(f'tensor {name} does not load ({exc})') from exc
        if shape is not None and (t.ndim != len(shape) or any(
                want is not None and got != want for got, want in zip(t.shape, shape))):
            raise self.corrupt(f'tensor {name} has shape {tuple(t.shape)}, expected '
                               f"{tuple('*' if s is None else s for s in shape)}")
        if dtype is not None and t.dtype != dtype:
            raise self.corrupt(f'tensor {name} is {t.dtype}, expected {dtype}')
        return t

    def array(self, name: str, shape: Optional[tuple] = None) -> np.ndarray:
        t = self.tensor(name, shape)
        if not t.dtype.is_floating_point and t.dtype != torch.int64:
            raise self.corrupt(f'tensor {name} is {t.dtype}, expected a float or int64 array')
        return t.numpy()


def _field(data: Any, key: str, kind: Any, where: str, r: _Reader) -> Any:
    """Return ``data[key]`` if it is a ``kind`` (ints are not bools); else StateCorrupt."""
    if not isinstance(data, dict) or key not in data:
        raise r.corrupt(f'header field {where}.{key} is missing')
    value = data[key]
    ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if kind is int and ok:
        ok = value >= 0
    if not ok:
        raise r.corrupt(f'header field {where}.{key}={value!r} is not allowed')
    return value


def _hw(value: Any, where: str, r: _Reader) -> Optional[Tuple[int, int]]:
    if value is None:
        return None
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and v > 0 for v in value)):
        raise r.corrupt(f'header field {where}={value!r} is not allowed: [height, width]')
    return (value[0], value[1])


def _optional_str(value: Any, where: str, r: _Reader) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise r.corrupt(f'header field {where}={value!r} is not allowed')
    return value


def _dataclass(kind: Any, data: Any, where: str, r: _Reader) -> Any:
    """Build a flat dataclass of ints and strs from its header object, every field checked."""
    names = {f.name for f in fields(kind)}
    if not isinstance(data, dict) or set(data) != names:
        raise r.corrupt(f'header field {where} does not hold {sorted(names)}')
    return kind(**{f.name: _field(data, f.name, int if f.type in ('int', int) else str,
                                  where, r) for f in fields(kind)})


def _cache(h: Any, name: str, r: _Reader) -> CacheState:
    where = f'windows.current.{name}'
    slots = _field(h, 'slot_frame', list, where, r)
    if not all(isinstance(f, int) and not isinstance(f, bool) for f in slots):
        raise r.corrupt(f'header field {where}.slot_frame holds a non-integer')
    keys = r.tensor(f'window.{name}.keys', (None, None, None, None))
    values = r.tensor(f'window.{name}.values', tuple(keys.shape), keys.dtype)
    return CacheState(frames=_field(h, 'frames', int, where, r), slot_frame=tuple(slots),
                      evictions=_field(h, 'evictions', int, where, r),
                      rollbacks=_field(h, 'rollbacks', int, where, r),
                      overflow_events=_field(h, 'overflow_events', int, where, r),
                      keys=keys, values=values)


def _window(h: Any, model_hw: Optional[Tuple[int, int]], r: _Reader) -> WindowState:
    where = 'windows.current'
    if model_hw is None:
        raise r.corrupt('a window without an image grid (session.model_hw)')
    overlap = []
    for i, kept in enumerate(_field(h, 'overlap', list, where, r)):
        index = _field(kept, 'index', int, f'{where}.overlap.{i}', r)
        depth = None
        if _field(kept, 'depth', bool, f'{where}.overlap.{i}', r):
            depth = r.array(f'window.overlap.{i}.depth', model_hw)
        overlap.append(Kept(index=index,
                            image=r.tensor(f'window.overlap.{i}.image', (3, *model_hw)),
                            pose_map=r.array(f'window.overlap.{i}.pose', (4, 4)),
                            depth_map=depth))
    sim3 = Sim3(scale=float(r.array('window.sim3.scale', ())),
                rotation=r.array('window.sim3.rotation', (3, 3)),
                translation=r.array('window.sim3.translation', (3,)))
    return WindowState(index=_field(h, 'index', int, where, r), sim3=sim3,
                       time=_field(h, 'time', int, where, r),
                       seen=_field(h, 'seen', int, where, r), overlap=tuple(overlap),
                       agg=_cache(_field(h, 'agg', dict, where, r), 'agg', r),
                       camera=_cache(_field(h, 'camera', dict, where, r), 'camera', r))


def _session(h: dict, r: _Reader) -> SessionState:
    s = _field(h, 'session', dict, 'header', r)
    input_hw = _hw(s.get('input_hw'), 'session.input_hw', r)
    model_hw = _hw(s.get('model_hw'), 'session.model_hw', r)
    buffer = []
    for i, entry in enumerate(_field(s, 'buffer', list, 'session', r)):
        where = f'session.buffer.{i}'
        hw = _hw(_field(entry, 'input_hw', list, where, r), f'{where}.input_hw', r)
        prep = Prepared(image=r.tensor(f'{where}.image', (3, *(model_hw or (None, None)))),
                        model_to_input=r.array(f'{where}.model_to_input', (3, 3)),
                        input_hw=hw)
        buffer.append((prep, _field(entry, 'stamp_ns', int, where, r)))
    last = None
    last_index = s.get('last_keyframe_index')
    if last_index is not None:
        last = (_field(s, 'last_keyframe_index', int, 'session', r),
                r.array('session.last_keyframe.pose', (4, 4)),
                r.array('session.last_keyframe.intrinsics', (3, 3)))
    stamps = r.tensor('trajectory.stamp_ns', (None,), torch.int64).numpy()
    poses = r.array('trajectory.pose', (stamps.shape[0], 4, 4))
    kf_index = r.tensor('keyframes.index', (None,), torch.int64).numpy()
    keyframes = KeyframePositions(
        map_epoch=_keyframe_epoch(h, r), index=kf_index,
        stamp_ns=r.tensor('keyframes.stamp_ns', kf_index.shape, torch.int64).numpy(),
        position=r.array('keyframes.position', (kf_index.shape[0], 3)))
    wh = _field(h, 'windows', dict, 'header', r)
    current = wh.get('current')
    windows = WindowsState(
        frames=_field(wh, 'frames', int, 'windows', r),
        opened=_field(wh, 'opened', int, 'windows', r),
        memory_shrinks=_field(wh, 'memory_shrinks', int, 'windows', r),
        last_oom=_optional_str(wh.get('last_oom'), 'windows.last_oom', r),
        spoiled=_field(wh, 'spoiled', bool, 'windows', r),
        current=None if current is None else _window(current, model_hw, r))
    return SessionState(
        input_hw=input_hw, model_hw=model_hw, buffer=tuple(buffer),
        index=_field(s, 'index', int, 'session', r),
        stream_frames=_field(s, 'stream_frames', int, 'session', r), last_keyframe=last,
        counters=_dataclass(Counters, s.get('counters'), 'session.counters', r),
        map_epoch=_field(s, 'map_epoch', int, 'session', r),
        trajectory=tuple((int(t), p) for t, p in zip(stamps, poses)), keyframes=keyframes,
        windows=windows)


def _keyframe_epoch(h: dict, r: _Reader) -> int:
    value = _field(h, 'keyframes', dict, 'header', r).get('map_epoch')
    if not isinstance(value, int) or isinstance(value, bool) or value < -1:
        raise r.corrupt(f'header field keyframes.map_epoch={value!r} is not allowed')
    return value


def _model_as_text(identity: Any, r: _Reader) -> Any:
    """Return the identity's header object with its model structure as sorted JSON text."""
    if not isinstance(identity, dict) or not isinstance(identity.get('model'), dict):
        raise r.corrupt('header field identity.model is not a model structure')
    return {**identity, 'model': json.dumps(identity['model'], sort_keys=True)}


@contextmanager
def _opened(path: PathLike) -> Iterator[Tuple[_Reader, dict]]:
    """Open a state file and check its format and version; yield its reader and header."""
    from safetensors import safe_open
    path = Path(path)
    if not path.is_file():
        raise StateCorrupt(f'state file {path}: no such file')
    try:
        handle = safe_open(str(path), framework='pt', device='cpu')
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError: the file is unusable
        raise StateCorrupt(f'state file {path}: not a complete safetensors file '
                           f'({str(exc).strip().splitlines()[0] if str(exc) else exc!r})'
                           ) from exc
    with handle as f:
        r = _Reader(f, path)
        meta = f.metadata() or {}
        if meta.get('format') != FORMAT_NAME:
            raise r.corrupt(f'not a stream state (format {meta.get("format")!r})')
        version = meta.get('version', '')
        if not version.isdigit() or int(version) < 1:
            raise r.corrupt(f'format version {version!r} is not allowed')
        if int(version) > FORMAT_VERSION:
            raise StateMismatch(f'state file {path}: format version {version} is newer than '
                                f'this package reads ({FORMAT_VERSION})')
        try:
            header = json.loads(meta.get('header', ''))
        except json.JSONDecodeError as exc:
            raise r.corrupt(f'header is not JSON ({exc})') from exc
        if not isinstance(header, dict):
            raise r.corrupt('header is not a JSON object')
        yield r, header


def read_state(path: PathLike) -> Tuple[StateIdentity, StreamSettings, SessionState]:
    """Read a state file whole (tensors on the CPU); raise StateError saying what is wrong."""
    with _opened(path) as (r, header):
        identity = _dataclass(StateIdentity, _model_as_text(header.get('identity'), r),
                              'identity', r)
        settings = _dataclass(StreamSettings, header.get('settings'), 'settings', r)
        return identity, settings, _session(header, r)


def read_voxels(path: PathLike) -> Optional[MapVoxels]:
    """Read a state file's voxel map (None: it holds none); raise StateError if it is bad."""
    with _opened(path) as (r, header):
        h = header.get('map')
        if h is None:
            return None
        epoch = None if _field(h, 'epoch', object, 'map', r) is None else \
            _field(h, 'epoch', int, 'map', r)
        size = _field(h, 'voxel_size', float, 'map', r)
        arrays = {name: r.tensor(f'map.{name}').numpy() for name in MAP_ARRAYS}
        try:
            return MapVoxels(voxel_size=float(size), epoch=epoch,
                             frame=_field(h, 'frame', str, 'map', r),
                             **{name: _field(h, name, int, 'map', r) for name in MAP_COUNTERS},
                             **arrays).validate()
        except ValueError as exc:
            raise r.corrupt(str(exc)) from exc


def read_track(path: PathLike) -> Optional[PublishedTrack]:
    """Read a state file's published track (None: it holds none); StateError if it is bad."""
    with _opened(path) as (r, header):
        h = header.get('track')
        if h is None:
            return None
        stamps = r.tensor('track.stamp_ns', (None,), torch.int64).numpy()
        poses = r.tensor('track.pose', (len(stamps), 4, 4), torch.float64).numpy()
        if not np.all(np.isfinite(poses)):
            raise r.corrupt('tensor track.pose holds a value that is not finite')
        return PublishedTrack(frame=_field(h, 'frame', str, 'track', r), stamp_ns=stamps,
                              pose=poses)


def read_scale(path: PathLike) -> Optional[SavedScale]:
    """
    Read a state file's metric scale part (None: it holds none); StateError if it is bad.

    The part belongs to the session's map: a scale of another map epoch is corrupt.
    """
    with _opened(path) as (r, header):
        h = header.get('scale')
        if h is None:
            return None
        arrays = {name[len('scale.'):]: r.tensor(name).numpy() for name in r.names('scale.')}
        try:
            saved = saved_scale.decode(arrays, h)
        except ValueError as exc:
            raise r.corrupt(f'scale part: {exc}') from exc
        epoch = _field(_field(header, 'session', dict, 'header', r), 'map_epoch', int,
                       'session', r)
        if saved.epoch != epoch:
            raise r.corrupt(f'scale part of map epoch {saved.epoch}, the stream is in map '
                            f'epoch {epoch}')
        return saved
