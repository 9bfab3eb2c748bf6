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
The accumulated map: keyframe points merged into a bounded voxel grid, per camera.

Per-frame point clouds show what one frame sees; a user who wants the reconstruction
in RViz (or a PLY file of it) needs the keyframes' points gathered in the map frame,
with repeated observations of a surface merged rather than piled up, and with a bound
on memory however long the camera runs. That is this module: plain numpy, no ROS.

Each voxel (integer coordinates ``floor(p / voxel_size)``) keeps the running mean of
its points (sum and count, float64), the highest confidence seen in it, the colour of
that most confident observation (a later keyframe wins a tie; within one keyframe any
of the tied points), and the keyframe counter of its last observation. Colour by the
most confident observation rather than a running mean: it stays crisp where exposure
changes or edges blur, it needs three bytes instead of three growing sums, and it
follows the same rule as the confidence.

Everything is vectorised per keyframe: the points' voxel keys are packed into int64,
grouped by one stable sort, and merged into the map through an open-addressing hash
table probed a whole batch at a time. Voxels are stored in a log ordered by last
observation (a re-observed voxel moves to the end; each keyframe's batch is appended
in ascending confidence), so the voxels to drop at the bound are the first live ones
of the log: least recently observed first, ties broken by lowest confidence.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
import functools
import math
from typing import Any, NamedTuple, Optional

from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.key_table import KeyTable
from lingbot_ros.streaming.map_state import MapVoxels
from lingbot_ros.streaming.result import FrameResult
import numpy as np

# Voxel indices are packed into one non-negative int64 key: 21 bits per axis, offset so
# indices in [-2**20, 2**20) fit. Points outside that range (more than 2**20 voxels from
# the origin) or non-finite ones are not merged; they are counted.
AXIS_BITS = 21
INDEX_LIMIT = 1 << (AXIS_BITS - 1)
MIN_LOG = 4096
MAX_POINTS_LIMIT = 100_000_000  # keeps log positions in int32 (and memory under ~20 GB)
# One voxel of the log is one row of 8 int64 (64 bytes, one cache line, so merging a
# voxel touches one line): columns 0-2 are the float64 sum of its points, then the
# count, the packed key, the hash slot, the keyframe of its last observation, and the
# attributes: confidence (float32 bits), colour and the alive flag packed in one int64.
_COLUMNS = 8
_COUNT, _KEY, _SLOT, _SEEN, _ATTRS = 3, 4, 5, 6, 7
_ALIVE = np.int64(1 << 56)
_RGB_SHIFTS = np.array([48, 40, 32], np.int64)
_CONF_BITS = np.int64(0xFFFFFFFF)


def _require(ok: bool, name: str, value: Any, allowed: str) -> None:
    if not ok:
        raise ConfigError(f'{name}={value!r} is invalid: expected {allowed}')


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


@dataclass(frozen=True)
class MapCloudConfig:
    """
    How keyframes become map points; validated on construction.

    ``voxel_size`` is in model units (the map's scale; scene depths are O(1-10)): 0.02
    merges the neighbouring samples of a decimated 518-pixel-wide grid a few units away
    without blurring the room. ``max_points`` bounds the voxels kept: at the bound a
    cloud takes about 180 bytes per voxel (a 64-byte log row with room to move, hash
    slots), so the default 500,000 is ~90 MB and an 8 MB PointCloud2. ``decimation``,
    ``min_confidence`` and ``confidence_percentile`` mean what the node's ``points_*``
    parameters mean for ``~/points``.
    """

    voxel_size: float = 0.02
    max_points: int = 500_000
    decimation: int = 4
    min_confidence: float = 0.0
    confidence_percentile: float = 50.0

    def __post_init__(self) -> None:
        """Refuse an invalid configuration at once, naming the field."""
        self.validate()

    def validate(self) -> 'MapCloudConfig':
        """Check every field; return self so it chains like the other configs."""
        _require(_is_number(self.voxel_size) and self.voxel_size > 0, 'voxel_size',
                 self.voxel_size, 'a finite number > 0 (model units)')
        _require(isinstance(self.max_points, int) and not isinstance(self.max_points, bool)
                 and 1 <= self.max_points <= MAX_POINTS_LIMIT, 'max_points', self.max_points,
                 f'an integer in [1, {MAX_POINTS_LIMIT}]')
        _require(isinstance(self.decimation, int) and not isinstance(self.decimation, bool)
                 and self.decimation >= 1, 'decimation', self.decimation, 'an integer >= 1')
        _require(_is_number(self.min_confidence) and self.min_confidence >= 0,
                 'min_confidence', self.min_confidence, 'a finite number >= 0 (0: off)')
        _require(_is_number(self.confidence_percentile)
                 and 0 <= self.confidence_percentile < 100, 'confidence_percentile',
                 self.confidence_percentile, 'a number in [0, 100) (0: off)')
        return self

    def replace(self, **changes: Any) -> 'MapCloudConfig':
        """Return a validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


class AddOutcome(Enum):
    """What :meth:`MapCloud.add` did with a frame."""

    ADDED = 1         # a keyframe with depth: its points were merged
    NOT_KEYFRAME = 2  # ignored: only keyframes (scale and keyframe types) build the map
    NO_DEPTH = 3      # ignored: a keyframe without depth (the stream runs with depth off)


@dataclass(frozen=True)
class AddReport:
    """
    The outcome of one :meth:`MapCloud.add` or :meth:`MapCloud.add_points` call.

    ``new_epoch`` is set when the frame belonged to a new map of the session: the cloud
    was cleared before the frame was considered (whatever the outcome), because the
    old points are in a frame the new poses do not share.
    """

    outcome: AddOutcome
    new_epoch: bool = False
    points: int = 0      # points merged (after the confidence filter and range check)
    new_voxels: int = 0  # voxels this call created
    dropped: int = 0     # voxels this call dropped to stay within max_points


class MapPoints(NamedTuple):
    """Points as arrays: ``xyz [N, 3]``, ``rgb [N, 3]`` uint8, ``confidence [N]`` float32."""

    xyz: np.ndarray
    rgb: np.ndarray
    confidence: np.ndarray


def packed_rows(xyz: np.ndarray, rgb: np.ndarray,
                confidence: Optional[np.ndarray] = None) -> np.ndarray:
    """
    Return points as float32 rows ``x, y, z, rgb[, confidence]`` (16 or 20 bytes a point).

    ``rgb`` is packed as the bits of one uint32 ``0xRRGGBB`` (PCL's and RViz's convention
    for a cloud's colour field). The rows are the bytes a PointCloud2 of these fields
    carries as they are.
    """
    n = int(len(xyz))
    out = np.empty((n, 4 if confidence is None else 5), np.float32)
    out[:, :3] = xyz
    c = np.asarray(rgb, dtype=np.uint32)
    out[:, 3].view(np.uint32)[:] = (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
    if confidence is not None:
        out[:, 4] = confidence
    return out


@dataclass(frozen=True)
class MapStats:
    """Counters of the cloud since it last started (construction, clear or new epoch)."""

    keyframes: int       # observations merged (keyframes, or add_points calls)
    points: int          # voxels held now
    dropped_points: int  # voxels dropped at the bound
    out_of_range_points: int  # points not merged: non-finite or beyond the key range
    epoch: Optional[int]  # map_epoch of the frames in the cloud; None before the first


def unproject(result: FrameResult, pose_map: np.ndarray, decimation: int,
              min_confidence: float, percentile: float) -> MapPoints:
    """
    Return the frame's depth as map points (float64 xyz), filtered like ``~/points``.

    Same pixel convention and filters as ``messages.point_cloud``: every
    ``decimation``-th pixel ``(u, v)`` of the model grid, ``x = (u - cx) z / fx``; finite
    positive depth; confidence at least ``min_confidence`` and at least the frame's
    ``percentile`` (over its valid pixels). Without confidence nothing is filtered on it
    and the points carry confidence 0; without colours they are black. Points come in
    row-major pixel order. (It runs for every frame's ``~/points``: gathers by flat index
    and a cached pixel grid, which do less work than boolean masks, ``nonzero`` and
    ``np.percentile``.)
    """
    if result.depth is None:
        raise ValueError(f'frame {result.index} has no depth to unproject')
    step = max(1, int(decimation))
    depth = np.asarray(result.depth, dtype=np.float32)[::step, ::step]
    keep = (np.isfinite(depth) & (depth > 0)).reshape(-1)
    conf = None
    if result.confidence is not None:
        conf = np.asarray(result.confidence, dtype=np.float32)[::step, ::step].reshape(-1)
        cut = float(min_confidence)
        if percentile > 0 and keep.any():
            cut = max(cut, percentile_linear(conf[keep], percentile))
        keep &= conf >= cut
    k = np.asarray(result.intrinsics_model, dtype=np.float64)
    du, dv = _pixel_offsets(depth.shape, step, float(k[0, 2]), float(k[1, 2]))
    idx = np.flatnonzero(keep)
    z = depth.reshape(-1).take(idx).astype(np.float64)
    cam = np.stack([du.take(idx) * z / k[0, 0], dv.take(idx) * z / k[1, 1], z], axis=1)
    pose = np.asarray(pose_map, dtype=np.float64)
    xyz = cam @ pose[:3, :3].T + pose[:3, 3]
    rgb = np.zeros((len(z), 3), np.uint8)
    if result.colors is not None:
        colors = np.asarray(result.colors, dtype=np.uint8)[::step, ::step]
        for c in range(3):  # a channel at a time: a gather of 3-byte rows is slow
            rgb[:, c] = colors[..., c].reshape(-1).take(idx)
    confidence = conf.take(idx) if conf is not None else np.zeros(len(z), np.float32)
    return MapPoints(xyz, rgb, confidence)


@functools.lru_cache(maxsize=16)
def _pixel_offsets(shape: tuple, step: int, cx: float, cy: float) -> tuple:
    """``u * step - cx`` and ``v * step - cy`` of a decimated grid, flat (read-only)."""
    v, u = np.indices(shape)
    du, dv = (u.reshape(-1) * step - cx), (v.reshape(-1) * step - cy)
    du.flags.writeable = dv.flags.writeable = False
    return du, dv


def percentile_linear(values: np.ndarray, q: float) -> float:
    """
    ``np.percentile(values, q)`` (its default linear method) by one partition.

    numpy's general version costs about ten times as much for a frame's few thousand
    confidences; this takes the two order statistics around ``(n - 1) q / 100`` and
    interpolates between them in the values' own type, as numpy does.
    """
    n = int(values.size)
    if n == 0:
        raise ValueError('percentile of no values')
    kind = values.dtype.type
    pos = (n - 1) * (float(q) / 100.0)  # float64, as numpy's virtual index
    lo = int(math.floor(pos))
    hi = min(lo + 1, n - 1)
    # one order statistic by partition, the next as the least of what follows it: numpy's
    # partition around two at once costs several times as much
    part = np.partition(values.reshape(-1), lo)
    a = part[lo]
    b = part[lo + 1:].min() if hi != lo else a
    t = pos - lo  # numpy's weights are weak Python floats: they take the values' type
    return float(a + (b - a) * kind(t) if t < 0.5 else b - (b - a) * kind(1.0 - t))


class MapCloud:
    """
    A bounded voxel map of one camera's keyframe points, in the map frame.

    Bound: after every call the cloud holds at most ``config.max_points`` voxels; when a
    keyframe takes it over, the least recently observed voxels are dropped first (ties:
    lowest confidence) and counted in ``dropped_points``. Memory at the bound is about
    180 bytes per voxel (see :class:`MapCloudConfig`).

    Epochs: a frame whose ``map_epoch`` differs from the cloud's clears the cloud first
    (its report says ``new_epoch``), so a restarted map never mixes with the old one.

    Threads: one writer (the worker that produces the frames) calls :meth:`add`; other
    threads only read, through :meth:`snapshot` (which copies), under the owner's lock.
    The cloud itself takes no lock.
    """

    def __init__(self, config: Optional[MapCloudConfig] = None) -> None:
        self.config = (config or MapCloudConfig()).validate()
        self._epoch: Optional[int] = None
        self._reset()

    # --- public -----------------------------------------------------------------------

    def add(self, result: FrameResult, pose_map: Optional[np.ndarray] = None) -> AddReport:
        """
        Merge a keyframe's points; other frames are ignored (the report says why).

        ``pose_map`` is the camera-to-map 4x4 to place the points with (the node's map
        convention); by default ``result.pose_c2w``.
        """
        new_epoch = self._epoch is not None and int(result.map_epoch) != self._epoch
        if new_epoch:
            self._reset()
        self._epoch = int(result.map_epoch)
        if not result.is_keyframe:
            return AddReport(AddOutcome.NOT_KEYFRAME, new_epoch)
        if result.depth is None:
            return AddReport(AddOutcome.NO_DEPTH, new_epoch)
        pose = result.pose_c2w if pose_map is None else pose_map
        if np.shape(pose) != (4, 4):
            raise ValueError(f'pose_map has shape {np.shape(pose)}: expected (4, 4)')
        cfg = self.config
        points = unproject(result, pose, cfg.decimation, cfg.min_confidence,
                           cfg.confidence_percentile)
        return dataclasses.replace(self.add_points(*points), new_epoch=new_epoch)

    def add_points(self, xyz: np.ndarray, rgb: Optional[np.ndarray] = None,
                   confidence: Optional[np.ndarray] = None) -> AddReport:
        """
        Merge one observation of map-frame points (what :meth:`add` does after unprojecting).

        ``xyz [N, 3]``, ``rgb [N, 3]`` uint8 (default black), ``confidence [N]`` (default 0).
        Counts as one keyframe: its voxels become the most recently observed.
        """
        xyz = np.asarray(xyz, dtype=np.float64)
        if xyz.ndim != 2 or xyz.shape[1] != 3:
            raise ValueError(f'xyz has shape {xyz.shape}: expected [N, 3]')
        n = xyz.shape[0]
        rgb = np.zeros((n, 3), np.uint8) if rgb is None else np.asarray(rgb, dtype=np.uint8)
        conf = np.zeros(n, np.float32) if confidence is None else \
            np.asarray(confidence, dtype=np.float32)
        if rgb.shape != (n, 3) or conf.shape != (n,):
            raise ValueError(f'rgb {rgb.shape} and confidence {conf.shape} do not match '
                             f'{n} points: expected ({n}, 3) and ({n},)')
        self._keyframes += 1
        index = np.floor(xyz / self.config.voxel_size)
        if n and not (index.min() >= -INDEX_LIMIT and index.max() < INDEX_LIMIT):  # NaN too
            ok = np.all((index >= -INDEX_LIMIT) & (index < INDEX_LIMIT), axis=1)
            self._out_of_range += int(n - np.count_nonzero(ok))
            xyz, rgb, conf, index = xyz[ok], rgb[ok], conf[ok], index[ok]
        m = len(xyz)
        if m == 0:
            return AddReport(AddOutcome.ADDED)
        keys = _pack(index)
        order = np.argsort(keys)
        keys = keys[order]
        first = np.empty(m, bool)
        first[0] = True
        np.not_equal(keys[1:], keys[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        counts = np.diff(np.append(starts, m))
        sums = np.add.reduceat(xyz[order], starts, axis=0)
        # The most confident point of each voxel in one reduction: the bits of a float32
        # >= 0 order like the float, and the low half keeps the position of the winner.
        conf = np.where(conf > 0, conf, np.float32(0))[order]  # NaN and < 0 count as 0
        ranked = (conf.view(np.int32).astype(np.int64) << 32) | np.arange(m)
        winner = np.maximum.reduceat(ranked, starts) & 0xFFFFFFFF
        return self._merge(keys[starts], sums, counts, conf[winner], rgb[order[winner]], m)

    def snapshot(self) -> MapPoints:
        """Copy the map out: voxel means (float32), colours and confidences, oldest first."""
        live = self._log[self._live_positions()]
        xyz = (live[:, :3].view(np.float64) / live[:, _COUNT, None]).astype(np.float32)
        return MapPoints(xyz, *_unpack_attrs(live[:, _ATTRS])[::-1])

    def rows(self) -> np.ndarray:
        """
        Return :meth:`snapshot` as :func:`packed_rows` with confidence, built in one pass.

        Same values and order, without the three intermediate arrays: the map is copied
        out once a second for ~/map_points, half a million voxels at the default bound.
        """
        live = self._log[self._live_positions()]
        out = np.empty((len(live), 5), np.float32)
        count = live[:, _COUNT].astype(np.float64)
        sums = live[:, :3].view(np.float64)
        for axis in range(3):  # column by column: 2x faster than one broadcast division
            np.divide(sums[:, axis], count, out=out[:, axis], casting='unsafe')
        bits = out.view(np.uint32)
        attrs = live[:, _ATTRS]
        # r, g, b are consecutive bytes of attrs from _RGB_SHIFTS[-1] up: 0xRRGGBB as is
        bits[:, 3] = (attrs >> _RGB_SHIFTS[-1]) & 0xFFFFFF
        bits[:, 4] = attrs & _CONF_BITS
        return out

    def set_config(self, config: MapCloudConfig) -> int:
        """
        Apply a new configuration from the next keyframe on; return the voxels it dropped.

        For runtime parameter changes. The filters (decimation, confidences) only affect
        later keyframes. A smaller ``max_points`` drops the least recently observed voxels
        now; a different ``voxel_size`` restarts the cloud (counters too, the epoch kept),
        since the stored voxels no longer fit the grid: the return value counts them all.
        """
        config = config.validate()
        if config.voxel_size != self.config.voxel_size:
            held = self._live
            self.config = config
            epoch = self._epoch
            self._reset()
            self._epoch = epoch
            return held
        self.config = config
        return self._evict(self._live - config.max_points)

    def export_voxels(self) -> MapVoxels:
        """Copy the voxels out whole, oldest first (a saved state; see import_voxels)."""
        live = self._log[self._live_positions()]
        conf, rgb = _unpack_attrs(live[:, _ATTRS])
        return MapVoxels(voxel_size=self.config.voxel_size, epoch=self._epoch,
                         keyframes=self._keyframes, dropped_points=self._dropped,
                         out_of_range_points=self._out_of_range,
                         sums=live[:, :3].view(np.float64).copy(), counts=live[:, _COUNT].copy(),
                         keys=live[:, _KEY].copy(), seen=live[:, _SEEN].copy(),
                         confidence=conf, rgb=rgb)

    def import_voxels(self, voxels: MapVoxels) -> int:
        """
        Hold ``voxels`` in place of this cloud's; return those dropped to fit max_points.

        The cloud then merges and drops as the one that exported them would. Voxels of
        another voxel size, or that cannot be a map's, are a ValueError (nothing changes).
        """
        voxels.validate()
        if voxels.voxel_size != self.config.voxel_size:
            raise ValueError(f'map voxel size {voxels.voxel_size:g} in the state, '
                             f'{self.config.voxel_size:g} here')
        self._reset()
        n = len(voxels)
        self._epoch = voxels.epoch
        self._keyframes, self._dropped, self._out_of_range = (
            voxels.keyframes, voxels.dropped_points, voxels.out_of_range_points)
        self._reserve(n)
        rows = np.empty((n, _COLUMNS), np.int64)
        rows[:, :3].view(np.float64)[:] = voxels.sums
        rows[:, _COUNT], rows[:, _KEY], rows[:, _SEEN] = voxels.counts, voxels.keys, voxels.seen
        rows[:, _SLOT] = slots = self._table.insert(voxels.keys)
        rows[:, _ATTRS] = _pack_attrs(voxels.confidence, voxels.rgb)
        self._log[:n] = rows
        self._table.set_values(slots, np.arange(n))
        self._tail = self._live = n
        return self._evict(n - self.config.max_points)

    def clear(self) -> None:
        """Drop every point and restart the counters (the next frame sets the epoch)."""
        self._epoch = None
        self._reset()

    def stats(self) -> MapStats:
        """Return the counters, for diagnostics."""
        return MapStats(keyframes=self._keyframes, points=self._live,
                        dropped_points=self._dropped, out_of_range_points=self._out_of_range,
                        epoch=self._epoch)

    @property
    def keyframes(self) -> int:
        """Keyframes merged since the cloud last started."""
        return self._keyframes

    @property
    def points(self) -> int:
        """Voxels held now (at most ``config.max_points``)."""
        return self._live

    @property
    def dropped_points(self) -> int:
        """Voxels dropped at the bound since the cloud last started."""
        return self._dropped

    @property
    def epoch(self) -> Optional[int]:
        """``map_epoch`` of the frames in the cloud; None before the first frame."""
        return self._epoch

    def __len__(self) -> int:
        """Return the number of voxels (points of a snapshot)."""
        return self._live

    # --- storage ----------------------------------------------------------------------
    # The key table maps a voxel's packed key to its position in the log. The log is an
    # array of 64-byte records (one cache line per voxel, so merging a voxel touches one
    # line); positions [_head, _tail) hold the voxels in order of last observation, dead
    # records (moved or dropped) not alive.

    def _reset(self) -> None:
        self._keyframes = self._live = self._dropped = self._out_of_range = 0
        self._table = KeyTable()
        self._log = _records(MIN_LOG)
        self._head = self._tail = 0

    def _live_positions(self) -> np.ndarray:
        attrs = self._log[self._head:self._tail, _ATTRS]
        return np.flatnonzero(attrs & _ALIVE) + self._head

    def _merge(self, keys: np.ndarray, sums: np.ndarray, counts: np.ndarray,
               conf: np.ndarray, rgb: np.ndarray, points: int) -> AddReport:
        """Fold one observation's per-voxel aggregates into the map, then apply the bound."""
        b = len(keys)
        self._reserve(b)
        slots = self._table.lookup(keys)
        found = np.flatnonzero(slots >= 0)
        old = self._table.values(slots[found])
        prev = self._log[old]
        sums[found] += prev[:, :3].view(np.float64)
        counts[found] += prev[:, _COUNT]
        prev_conf, prev_rgb = _unpack_attrs(prev[:, _ATTRS])
        keep = conf[found] < prev_conf  # the new colour wins a tie: it is later
        rgb[found[keep]] = prev_rgb[keep]
        conf[found[keep]] = prev_conf[keep]
        self._log[old, _ATTRS] = prev[:, _ATTRS] & ~_ALIVE
        created = np.flatnonzero(slots < 0)
        slots[created] = self._table.insert(keys[created])
        self._live += len(created)
        rows = np.empty((b, _COLUMNS), np.int64)
        rows[:, :3].view(np.float64)[:] = sums
        rows[:, _COUNT] = counts
        rows[:, _KEY] = keys
        rows[:, _SLOT] = slots
        rows[:, _SEEN] = self._keyframes
        rows[:, _ATTRS] = _pack_attrs(conf, rgb)
        order = np.argsort(conf)  # lowest confidence first in the batch: dropped first
        self._log[self._tail:self._tail + b] = rows[order]
        self._table.set_values(slots[order], np.arange(self._tail, self._tail + b))
        self._tail += b
        dropped = self._evict(self._live - self.config.max_points)
        return AddReport(AddOutcome.ADDED, points=points, new_voxels=len(created),
                         dropped=dropped)

    def _reserve(self, b: int) -> None:
        """Make room for ``b`` more voxels in the table and the log before any lookup."""
        if self._table.full(self._live, b):
            self._rebuild_table(self._live + b)
        if self._tail + b > len(self._log):
            self._compact(b)

    def _rebuild_table(self, expected: int) -> None:
        self._table = KeyTable.for_keys(expected)
        live = self._live_positions()
        slots = self._table.insert(self._log[live, _KEY])
        self._log[live, _SLOT] = slots
        self._table.set_values(slots, live)

    def _compact(self, b: int) -> None:
        """Move the live voxels to the front of the log (in order), growing it if needed."""
        moved = self._log[self._live_positions()]
        n = len(moved)
        if 3 * (n + b) > 2 * len(self._log):
            self._log = _records(max(MIN_LOG, 2 * (n + b)))
        self._log[:n] = moved
        self._log[n:, _ATTRS] = 0
        self._head, self._tail = 0, n
        self._table.set_values(moved[:, _SLOT], np.arange(n))

    def _evict(self, excess: int) -> int:
        """Drop the ``excess`` first live voxels of the log (least recently observed)."""
        if excess <= 0:
            return 0
        attrs = self._log[:, _ATTRS]
        found = []
        need, start, chunk = excess, self._head, max(4096, 2 * excess)
        while need > 0:  # scan forward in growing chunks: dead entries are skipped once
            stop = min(self._tail, start + chunk)
            hits = np.flatnonzero(attrs[start:stop] & _ALIVE)[:need] + start
            found.append(hits)
            need -= len(hits)
            start, chunk = stop, 2 * chunk
        victims = np.concatenate(found)
        attrs[victims] &= ~_ALIVE
        self._table.drop(self._log[victims, _SLOT])
        self._live -= len(victims)
        self._dropped += len(victims)
        self._head = int(victims[-1]) + 1
        return len(victims)


def _records(size: int) -> np.ndarray:
    """Allocate a zeroed log of ``size`` rows starting on a 64-byte boundary (a row per line)."""
    raw = np.zeros(size * _COLUMNS + 8, np.int64)
    start = (-raw.ctypes.data % 64) // 8
    return raw[start:start + size * _COLUMNS].reshape(size, _COLUMNS)


def _pack_attrs(conf: np.ndarray, rgb: np.ndarray) -> np.ndarray:
    """Confidence (float32 bits), colour and the alive flag as one int64 per voxel."""
    packed = conf.view(np.uint32).astype(np.int64) | _ALIVE
    for channel, shift in enumerate(_RGB_SHIFTS):
        packed |= rgb[:, channel].astype(np.int64) << shift
    return packed


def _unpack_attrs(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (confidence float32, rgb uint8 [N, 3]) of packed attributes."""
    conf = (packed & _CONF_BITS).astype(np.uint32).view(np.float32)
    rgb = ((packed[:, None] >> _RGB_SHIFTS) & 0xFF).astype(np.uint8)
    return conf, rgb


def _pack(index: np.ndarray) -> np.ndarray:
    """Pack in-range voxel indices ``[N, 3]`` into distinct non-negative int64 keys."""
    i = index.astype(np.int64) + INDEX_LIMIT
    return (i[:, 0] << (2 * AXIS_BITS)) | (i[:, 1] << AXIS_BITS) | i[:, 2]
