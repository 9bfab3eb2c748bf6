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
The replay's metric scale: frame stamps, the scale source's inputs, and the outputs in metres.

``--odometry BASE.tum --base-to-camera "x y z qx qy qz qw"`` fits each model window's
scale to a TUM trajectory of ``base_frame`` in ``odom_frame``, paired with the frames by
stamp; ``--depth-images FOLDER`` fits it to registered depth images instead. Both run
:mod:`lingbot_ros.streaming.scale.offline` over the finished run, per map (a restarted map
is a frame of its own), and :class:`RunScale` turns every output of the run into metres,
each frame with its window's scale in one metric frame. A run where any map gets no scale
keeps model units everywhere, so no file mixes units, and says why.

Frames are stamped as replay stamps them: a bag's header stamps, else ``--stamps FILE``
(seconds, one line per frame: ``stamp`` in the frames' order, or ``stamp name`` as TUM
RGB-D's ``rgb.txt``, matched to a folder's images by file name), else ``index / --fps``
from 0. The odometry's stamps must be on the same clock. Errors are ValueErrors whose
text is the one line the user sees.

With ``--save-state`` the scale of the run's last map is saved with the stream (the
estimator and the metric frame as the last frame left them); with ``--resume`` and the
same source (and lever arm) the fit of the resumed map goes on from it, so the frames of
a run in parts get the scales of one run. A saved scale of another source, lever arm or
map is not taken: the fit starts over and :attr:`RunScale.resumed` says why.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
import math
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

from lingbot_ros.streaming.result import FrameResult
from lingbot_ros.streaming.robot_frame import (PairedOdometry, parse_base_to_camera,
                                               read_base_trajectory)
from lingbot_ros.streaming.scale.depth import depth_on_grid
from lingbot_ros.streaming.scale.estimate import ScaleSource
from lingbot_ros.streaming.scale.metric import MetricFrame
from lingbot_ros.streaming.scale.offline import (fit_depth_offline, fit_odometry_offline,
                                                 OfflineScale)
from lingbot_ros.streaming.scale.saved import SavedScale
from lingbot_ros.streaming.trajectory import invert_rigid, pose_enc_to_matrix
import numpy as np

DEPTH_EXTENSIONS = ('.png', '.tif', '.tiff', '.npy')
DEPTH_UNITS_PER_METRE = 1000.0  # 16-bit depth images in millimetres
LEVER_TOLERANCE_M = 1e-6        # a --base-to-camera that differs less is the saved one


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the stamps and scale-source flags to the replay's parser."""
    g = parser.add_argument_group(
        'metric scale', 'fit metres per model unit; every output is then in metres (a run '
        'where the scale is not observable keeps model units and says so)')
    g.add_argument('--stamps', metavar='FILE',
                   help="frame stamps in seconds, one line per frame: 'stamp' in the frames' "
                   "order, or 'stamp name' (TUM RGB-D rgb.txt) matched to a folder's images "
                   "by file name (default: a bag's header stamps, else index / --fps)")
    g.add_argument('--odometry', metavar='BASE.tum',
                   help='TUM trajectory (stamp tx ty tz qx qy qz qw; seconds, metres) of '
                   "base_frame in odom_frame, on the frames' clock")
    g.add_argument('--base-to-camera', metavar='"x y z qx qy qz qw"',
                   help="the camera's optical frame in base_frame (metres; as "
                   'static_transform_publisher takes it); needed with --odometry')
    g.add_argument('--depth-images', metavar='FOLDER',
                   help='depth registered to the colour images (16-bit PNG/TIFF in '
                   '--depth-units-per-metre, 32-bit float TIFF or .npy in metres; 0: none), '
                   "matched to a folder's images by name, else by order")
    g.add_argument('--depth-units-per-metre', type=float, default=DEPTH_UNITS_PER_METRE,
                   help='units of 16-bit depth images per metre (default 1000: millimetres; '
                   'TUM RGB-D: 5000)')


# --- frame stamps -------------------------------------------------------------------------

def frame_stamps(args: argparse.Namespace, count: int,
                 own: Optional[Sequence[int]]) -> List[int]:
    """
    Return the ``count`` frames' stamps (ns): the input's own, ``--stamps`` or ``index / --fps``.

    ``own`` are a bag's header stamps (None for other inputs); ``--stamps`` with a bag is
    refused, as is a file that does not give every frame one finite stamp.
    """
    path = getattr(args, 'stamps', None)
    if own is not None:
        if path:
            raise ValueError(f'--stamps {path}: a bag has its own stamps (its header stamps); '
                             'leave --stamps out')
        return [int(s) for s in own]
    if not path:
        return [int(round(i * 1e9 / args.fps)) for i in range(count)]
    rows = _stamp_rows(path)
    named = all(name is not None for _, name in rows)
    files = _image_files(args.images)
    if named and files:
        by_name = {Path(name).name: stamp for stamp, name in rows}
        missing = [f.name for f in files if f.name not in by_name]
        if missing:
            raise ValueError(f'--stamps {path}: no stamp for {len(missing)} of the '
                             f'{len(files)} images (first: {missing[0]})')
        seconds = [by_name[f.name] for f in files]
    else:
        seconds = [stamp for stamp, _ in rows]
        if len(seconds) != count:
            raise ValueError(f'--stamps {path}: {len(seconds)} stamps for {count} frames: '
                             'expected one line per frame, in order')
    return [int(round(s * 1e9)) for s in seconds]


def _image_files(images: str) -> List[Path]:
    """Return the image files of a folder input, in replay's order; [] for other inputs."""
    from lingbot_ros.streaming.preprocess import list_images
    from lingbot_ros.tools.bag import bag_folder
    src = Path(images)
    if not src.is_dir() or bag_folder(src) is not None:
        return []
    return list_images(src)


def _stamp_rows(path: str) -> List[Tuple[float, Optional[str]]]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f'--stamps {path}: cannot read it ({exc})') from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith('#'):
            continue
        try:
            stamp = float(parts[0])
        except ValueError:
            stamp = math.nan
        if not math.isfinite(stamp):
            raise ValueError(f'--stamps {path}: line {number} does not start with a stamp in '
                             f'seconds: {line.strip()[:60]!r}')
        rows.append((stamp, parts[1] if len(parts) > 1 else None))
    if not rows:
        raise ValueError(f'--stamps {path}: no stamp in the file')
    return rows


# --- the scale source's inputs ------------------------------------------------------------

@dataclass(frozen=True)
class MetricInputs:
    """The scale source the flags name, checked before the model runs."""

    source: ScaleSource
    odometry: Optional[str] = None
    base_to_camera: Optional[np.ndarray] = None
    depth_folder: Optional[str] = None
    depth_units_per_metre: float = DEPTH_UNITS_PER_METRE

    @staticmethod
    def from_args(args: argparse.Namespace) -> Optional['MetricInputs']:
        """Read the flags (None: no scale source); a wrong combination is a ValueError."""
        odom, lever = getattr(args, 'odometry', None), getattr(args, 'base_to_camera', None)
        depth = getattr(args, 'depth_images', None)
        units = getattr(args, 'depth_units_per_metre', DEPTH_UNITS_PER_METRE)
        if not (math.isfinite(units) and units > 0):
            raise ValueError(f'--depth-units-per-metre={units} is invalid: expected a number > 0')
        if odom and depth:
            raise ValueError('--odometry and --depth-images are two scale sources: give one')
        if lever is not None and not odom:
            raise ValueError('--base-to-camera is used only with --odometry')
        if odom:
            if lever is None:
                raise ValueError('--odometry needs --base-to-camera "x y z qx qy qz qw" (the '
                                 "camera's optical frame in base_frame, metres)")
            try:
                matrix = parse_base_to_camera(lever)
            except ValueError as exc:
                raise ValueError(f'--base-to-camera: {exc}') from None
            return MetricInputs(ScaleSource.ODOMETRY, odometry=odom, base_to_camera=matrix)
        if depth:
            return MetricInputs(ScaleSource.DEPTH, depth_folder=depth,
                                depth_units_per_metre=units)
        return None

    def prepare(self, images: str, stamps_ns: Sequence[int],
                grid_hw: Tuple[int, int], patch_size: int) -> 'ScaleInput':
        """Read what the fit needs for the frames (stamps in ns, model grid ``grid_hw``)."""
        if self.source is ScaleSource.ODOMETRY:
            return ScaleInput(self, odometry=_paired_odometry(self.odometry, stamps_ns))
        files = _depth_files(self.depth_folder, images, len(stamps_ns))
        load = _DepthLoader(grid_hw, patch_size, self.depth_units_per_metre)
        load(files[0])  # a first image that does not fit is refused before the model runs
        return ScaleInput(self, depth_files=files, load_depth=load)


def _paired_odometry(path: str, stamps_ns: Sequence[int]) -> PairedOdometry:
    seconds = np.asarray(stamps_ns, dtype=np.float64) * 1e-9
    try:
        paired = read_base_trajectory(path, seconds)
    except OSError as exc:
        raise ValueError(f'--odometry {path}: cannot read it ({exc.strerror or exc})') from None
    except ValueError as exc:
        raise ValueError(f'--odometry {exc}') from None
    if paired.count == 0:
        raise ValueError(f"--odometry {path}: covers none of the frames' stamps (the frames "
                         f'span {seconds[0]:.3f} .. {seconds[-1]:.3f} s): stamp the frames on '
                         "the odometry's clock (a bag's header stamps, or --stamps FILE)")
    return paired


def _depth_files(folder: str, images: str, count: int) -> List[Path]:
    root = Path(folder)
    if not root.is_dir():
        raise ValueError(f'--depth-images {folder}: no such folder')
    files = sorted(p for p in root.iterdir()
                   if p.is_file() and p.suffix.lower() in DEPTH_EXTENSIONS)
    frames = _image_files(images)
    if frames and files:
        by_stem = {p.stem: p for p in files}
        named = [by_stem.get(p.stem) for p in frames]
        if all(p is not None for p in named):
            return named
    if len(files) != count:
        raise ValueError(f'--depth-images {folder}: {len(files)} depth images '
                         f'({"/".join(DEPTH_EXTENSIONS)}) for {count} frames, and not one '
                         "of each image's name: expected one per frame")
    return files


class _DepthLoader:
    """Reads one depth image in metres, resampled (nearest) onto the model grid."""

    def __init__(self, grid_hw: Tuple[int, int], patch_size: int, units_per_metre: float):
        self._grid = (int(grid_hw[0]), int(grid_hw[1]))
        self._patch = patch_size
        self._units = units_per_metre

    def __call__(self, path: Path) -> np.ndarray:
        raw = _read_depth(path)
        if raw.dtype == np.uint16:
            metres = raw.astype(np.float32) / np.float32(self._units)
        elif raw.dtype in (np.float32, np.float64):
            metres = raw.astype(np.float32)
        else:
            raise ValueError(f'--depth-images {path}: {raw.dtype} pixels: expected 16-bit '
                             'integers (--depth-units-per-metre) or 32-bit floats (metres)')
        try:
            return depth_on_grid(metres, self._grid, self._patch)
        except ValueError as exc:
            raise ValueError(f'--depth-images {path}: {exc}') from None


def _read_depth(path: Path) -> np.ndarray:
    if path.suffix.lower() == '.npy':
        try:
            return np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ValueError(f'--depth-images {path}: not a readable .npy array ({exc})') \
                from None
    import cv2
    image = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    if image is None:
        raise ValueError(f'--depth-images {path}: not a readable image')
    return image


@dataclass(frozen=True)
class ScaleInput:
    """A scale source's data for the run's frames (by their index in the input)."""

    inputs: MetricInputs
    odometry: Optional[PairedOdometry] = None
    depth_files: Sequence[Path] = ()
    load_depth: Optional[Callable[[Path], np.ndarray]] = None

    def fit(self, results: Sequence[FrameResult], first_index: int = 0,
            start: Optional[SavedScale] = None) -> 'RunScale':
        """
        Fit the scale of each map of the run (results in stream order).

        ``first_index``: the stream's index of the run's first input frame (a resumed
        stream's frames go on from the saved one's); ``start``: a saved scale to go on
        from, taken for the run's first map when it is of that map and fits the source.
        """
        epochs = np.array([r.map_epoch for r in results], dtype=np.int64)
        fits, maps, note = [], list(dict.fromkeys(epochs.tolist())), None  # maps in order
        for k, epoch in enumerate(maps):
            rows = np.flatnonzero(epochs == epoch)
            part = [results[i] for i in rows]
            begin = None
            if start is not None and k == 0:
                begin, note = self._usable(start, epoch)
            try:
                fit = self._fit(part, first_index, begin)
            except ValueError as exc:  # a saved state this estimator cannot hold
                note = f'not resumed: {exc}; the scale starts over'
                fit = self._fit(part, first_index, None)
            fits.append((rows, fit))
        if start is not None and note is None:
            note = 'not resumed: the run has no frame; the scale starts over'
        return RunScale(fits, [r.window_index for r in results], maps, note)

    def _usable(self, saved: SavedScale, epoch: int) -> Tuple[Optional[SavedScale], str]:
        """Return the saved scale to go on from (None: start over) and what became of it."""
        source = self.inputs.source
        why = None
        if saved.source is not source:
            why = f'saved with {saved.source.value}, {source.value} here'
        elif saved.epoch != epoch:
            why = f'saved for map epoch {saved.epoch}, the run continues map epoch {epoch}'
        elif source is ScaleSource.ODOMETRY and saved.estimator is not None and not np.allclose(
                saved.estimator.base_to_camera, self.inputs.base_to_camera,
                atol=LEVER_TOLERANCE_M):
            why = 'saved for another --base-to-camera'
        if why is not None:
            return None, f'not resumed: {why}; the scale starts over'
        return saved, 'resumed from the saved state'

    def _fit(self, results: Sequence[FrameResult], first_index: int,
             start: Optional[SavedScale]) -> OfflineScale:
        stamps = [r.stamp_ns * 1e-9 for r in results]
        poses = np.stack([r.pose_c2w for r in results])
        windows = [r.window_index for r in results]
        inputs = len(self.odometry.paired) if self.odometry is not None else \
            len(self.depth_files)
        # each result's input frame in this run (a frame saved before the run has none)
        frames = np.array([r.index - first_index for r in results], dtype=np.int64)
        here = (frames >= 0) & (frames < inputs)
        if self.odometry is not None:
            paired = np.zeros(len(results), dtype=bool)
            base = np.full((len(results), 4, 4), np.nan)
            paired[here] = self.odometry.paired[frames[here]]
            base[here] = self.odometry.base_in_odom[frames[here]]
            return fit_odometry_offline(stamps, poses, windows, PairedOdometry(paired, base),
                                        self.inputs.base_to_camera, start=start)
        sensor = _Lazy(lambda i: self.load_depth(self.depth_files[frames[i]]) if here[i]
                       else None, len(frames))
        return fit_depth_offline(stamps, poses, windows, [r.depth for r in results], sensor,
                                 start=start)


class _Lazy(Sequence):
    """Items made on demand: one depth image at a time, not the run's all at once."""

    def __init__(self, make: Callable[[int], np.ndarray], length: int) -> None:
        self._make, self._length = make, length
        self._last: Optional[Tuple[int, np.ndarray]] = None  # the fit reads an item twice

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> np.ndarray:
        """Make item ``i`` (the last one made is kept)."""
        if not 0 <= i < self._length:
            raise IndexError(i)
        if self._last is None or self._last[0] != i:
            self._last = (i, self._make(i))
        return self._last[1]


# --- the outputs in metres ----------------------------------------------------------------

class RunScale:
    """
    A run's scale, per map ``(rows of the run's frames, fit)``, and its outputs in metres.

    :attr:`metric` only when every map got a scale; otherwise every output keeps model
    units (NaN scales) and :attr:`message` says which map lacked one and why.
    ``windows [N]`` is each frame's model window, in the run's order; ``epochs`` the
    maps' epochs, in the order of ``fits``.
    """

    def __init__(self, fits: Sequence[Tuple[np.ndarray, OfflineScale]],
                 windows: Sequence[int], epochs: Sequence[int],
                 resumed: Optional[str] = None) -> None:
        self.fits = tuple(fits)
        self.epochs = [int(e) for e in epochs]
        self.resumed = resumed  # what became of a saved scale (None: none was given)
        self._windows = [int(w) for w in windows]
        self._metric: List[Optional[MetricFrame]] = [None] * len(self._windows)
        for rows, fit in self.fits:
            for i in rows:
                self._metric[i] = fit.metric

    @property
    def metric(self) -> bool:
        return bool(self.fits) and all(fit.observable for _, fit in self.fits)

    @property
    def source(self) -> ScaleSource:
        return self.fits[0][1].source if self.fits else ScaleSource.NONE

    def saved(self) -> Optional[SavedScale]:
        """Return the last map's scale, to save with the stream (None: the run had no frame)."""
        if not self.fits:
            return None
        return self.fits[-1][1].saved(self.epochs[-1], self.metric)

    @property
    def message(self) -> str:
        """One line: the scales, or why the outputs keep model units."""
        if len(self.fits) == 1:
            text = self.fits[0][1].message
        else:
            parts = [f'map {k}: {fit.message}' for k, (_, fit) in enumerate(self.fits)]
            text = '; '.join(parts) if self.metric else '; '.join(
                p for p, (_, fit) in zip(parts, self.fits) if not fit.observable) \
                + ' (every map keeps model units)'
        samples = sum(fit.samples for _, fit in self.fits)
        if 0 < samples < len(self._windows):
            text += f' ({samples} of {len(self._windows)} frames had {self.source.value})'
        return text

    @property
    def scales(self) -> np.ndarray:
        """Metres per model unit per frame (its window's); NaN everywhere without a scale."""
        out = np.full(len(self._windows), np.nan)
        if self.metric:
            for rows, fit in self.fits:
                out[rows] = fit.scales
        return out

    @property
    def sigmas(self) -> np.ndarray:
        """Return the standard uncertainty of :attr:`scales` per frame."""
        out = np.full(len(self._windows), np.nan)
        if self.metric:
            for rows, fit in self.fits:
                by_window = {e.window_index: e.sigma for e in fit.windows}
                out[rows] = [by_window[self._windows[i]] for i in rows]
        return out

    def results(self, results: Sequence[FrameResult]) -> List[FrameResult]:
        """Return the run's results in metres (as they are without a scale)."""
        if not self.metric:
            return list(results)
        out = []
        for r, metric, w in zip(results, self._metric, self._windows):
            enc = np.array(r.pose_enc, copy=True)
            enc[:3] = metric.points(enc[:3].astype(np.float64), w)
            depth = None if r.depth is None else metric.depth(r.depth, w)
            out.append(replace(r, pose_c2w=metric.pose(r.pose_c2w, w), pose_enc=enc,
                               depth=depth))
        return out

    def arrays(self, arrays: dict) -> dict:
        """
        Return the run's fixture arrays in metres, with ``metric_scale`` and ``unit``.

        Translations of ``pose_enc``, ``pose_enc_iters`` and the extrinsics and ``depth``
        change; ``metric_scale [N]`` / ``metric_scale_sigma [N]`` (metres per model unit,
        NaN: none) and ``unit`` (``'metre'`` or ``'model'``) are added.
        """
        out = dict(arrays)
        if self.metric:
            enc = np.array(arrays['pose_enc'], dtype=np.float64)
            iters = np.array(arrays['pose_enc_iters'], dtype=np.float64)
            for i, (metric, w) in enumerate(zip(self._metric, self._windows)):
                enc[i, :3] = metric.points(enc[i, :3], w)
                iters[i, :, :3] = metric.points(iters[i, :, :3], w)
            mats = pose_enc_to_matrix(enc.astype(np.float32))
            out['pose_enc'] = enc.astype(np.float32)
            out['pose_enc_iters'] = iters.astype(np.float32)
            out['extrinsic_w2c'] = mats[:, :3, :4].astype(np.float32)  # [R(q) | T], as the run
            out['extrinsic_c2w'] = invert_rigid(mats)[:, :3, :4].astype(np.float32)
            if 'depth' in arrays:  # float32 products, as each result's depth
                out['depth'] = arrays['depth'] * \
                    self.scales.astype(arrays['depth'].dtype)[:, None, None, None]
        out['metric_scale'] = self.scales
        out['metric_scale_sigma'] = self.sigmas
        out['unit'] = np.array('metre' if self.metric else 'model')
        return out
