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
``lingbot-ros-replay``: run the streaming model offline over images; write npz / TUM / PLY.

INPUT is a ``.npy`` stack ``[S, 3, H, W]`` in [0, 1] (used as is), a folder of images, a
video file or a ROS 2 bag folder (sqlite3 or mcap; Image or CompressedImage, ``--topic``
where it has several), all preprocessed as the reference does. A bag's header stamps
become the trajectory's; the others are stamped ``index / --fps``. A model config with an
``inference`` block (a parity fixture's ``config.json``) also sets the streaming
arguments, so a fixture's config, weights and images reproduce its ``outputs.npz``;
flags override. OUT.npz holds the fixtures' array names: note that ``extrinsic_w2c`` is
the raw ``[R(q) | T]`` (which this package reads as camera-to-world, as the fixtures
README explains) and ``extrinsic_c2w`` its inverse. ``--ply`` writes the accumulated map
of the run (the node's ``~/map``: keyframe points merged per voxel, bounded, of the last
map epoch) in the optical map frame of ``--trajectory``. ``--colmap DIR`` writes the same
map with the keyframes of that epoch (at most ``--colmap-max-keyframes``, the latest) as a
COLMAP model (``DIR/images``, ``DIR/sparse/0``) for NeRF / Gaussian-splat trainers. No ROS
needed. With ``--odometry`` (a TUM trajectory of the robot's base, and ``--base-to-camera``)
or ``--depth-images`` every output is in metres, each frame with its window's scale, and
OUT.npz adds ``metric_scale`` and ``unit`` (:mod:`lingbot_ros.tools.replay_metric`).
``--save-state`` / ``--resume`` save and continue the stream, and with a scale source its
metric scale: a run in parts is in the frame and scale of one run.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys
from typing import Any, Optional, Sequence

from lingbot_ros.model.config import ConfigError
from lingbot_ros.streaming.config import (BACKENDS, DTYPES, EngineConfig, KeyframeMode,
                                          StreamConfig)
from lingbot_ros.streaming.map_cloud import MapCloud, MapCloudConfig
from lingbot_ros.tools import replay_metric
import numpy as np

COLMAP_MAX_KEYFRAMES = 1000  # ~50 MB of JPEGs at a 518-pixel-wide model grid
VIDEO_SUFFIXES = ('.mp4', '.avi', '.mov', '.mkv', '.webm', '.m4v', '.mpg', '.mpeg')


class ReplayError(Exception):
    """A user-facing failure: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser (also used by the docs and tests)."""
    p = argparse.ArgumentParser(
        prog='lingbot-ros-replay',
        description='Run LingBot-Map streaming inference over images; write outputs.')
    model = p.add_mutually_exclusive_group()
    model.add_argument('--model-config', metavar='CONFIG.json',
                       help='model structure (ours or a parity fixture config.json)')
    model.add_argument('--preset', default=None, help="named structure: 'tiny' or 'release'")
    p.add_argument('--checkpoint', metavar='WEIGHTS',
                   help='.safetensors/.pt file or hf://<owner>/<repo>[@<revision>]/<file> '
                   '(default: random)')
    p.add_argument('--images', metavar='INPUT', required=True,
                   help='.npy [S,3,H,W] in [0,1], a folder of images, a video file, or a ROS '
                   '2 bag folder (sqlite3 or mcap; its header stamps are kept)')
    p.add_argument('--topic', default=None,
                   help='image topic of the bag (needed when it has several)')
    p.add_argument('--out', metavar='OUT.npz', help='write the fixture-format arrays here')
    p.add_argument('--trajectory', metavar='FILE.tum',
                   help='write camera-to-world poses in TUM format')
    p.add_argument('--kv-stats', metavar='FILE.json', help='write per-call cache statistics')
    p.add_argument('--save-state', metavar='FILE',
                   help="after the last frame, write the stream's state (caches, window, "
                   'trajectory; with --odometry or --depth-images the metric scale) for '
                   '--resume')
    p.add_argument('--resume', metavar='FILE',
                   help='start from a state written by --save-state (or the node): the same '
                   "map, frame and scale, frame index and (without the input's own stamps) "
                   'time base; the outputs hold the new frames only; a state of another '
                   'model, weights, dtype, grid or settings is refused; a saved metric scale '
                   'of the same source goes on')
    map_defaults = MapCloudConfig()
    p.add_argument('--ply', metavar='FILE.ply',
                   help='write the accumulated map (keyframe points per voxel) as binary PLY')
    p.add_argument('--colmap', metavar='DIR',
                   help='write a COLMAP model: DIR/images (keyframes at the model grid) and '
                   'DIR/sparse/0 (cameras, images, the map as points3D)')
    p.add_argument('--colmap-max-keyframes', type=int, default=COLMAP_MAX_KEYFRAMES,
                   help='keyframe images kept for --colmap, the latest first (JPEG in memory; '
                   f'default {COLMAP_MAX_KEYFRAMES})')
    p.add_argument('--map-voxel-size', type=float, default=map_defaults.voxel_size,
                   help=f"voxel edge of the map in the outputs' units (model units; metres "
                   f'with a metric scale; default {map_defaults.voxel_size})')
    p.add_argument('--map-max-points', type=int, default=map_defaults.max_points,
                   help=f'voxels kept; the least recently observed go first (default '
                   f'{map_defaults.max_points})')
    p.add_argument('--scale-frames', type=int)
    p.add_argument('--sliding-window', type=int)
    p.add_argument('--keyframe-interval', type=int)
    p.add_argument('--keyframe-mode', choices=('interval', 'flow'))
    p.add_argument('--flow-threshold', type=float, help='pixels (flow keyframe mode)')
    p.add_argument('--max-window-frames', type=int, help='frames per window (0: model limit)')
    p.add_argument('--camera-iterations', type=int)
    p.add_argument('--image-size', type=int, default=518,
                   help='model-grid width for folders and videos (default 518)')
    p.add_argument('--fps', type=float, default=10.0,
                   help='video sampling rate and trajectory time base (default 10; a bag '
                   'has its own stamps)')
    p.add_argument('--device', default='auto', help="'auto', 'cpu', 'cuda' or 'cuda:N'")
    p.add_argument('--dtype', choices=DTYPES, default='float32')
    p.add_argument('--attention-backend', choices=BACKENDS, default='auto')
    p.add_argument('--seed', type=int, default=0, help='seed of random weights')
    p.add_argument('--quiet', action='store_true', help='no progress bar')
    replay_metric.add_arguments(p)
    return p


def inference_settings(config_path: Optional[str]) -> dict:
    """
    Read StreamConfig fields from a model config's ``inference`` block, if any.

    Understands the fixtures' form (``inference.args`` in the reference's terms plus
    ``constructor_args``) and our own (``inference.stream``: StreamConfig fields).
    """
    if config_path is None:
        return {}
    try:
        data = json.loads(Path(config_path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ReplayError(f'model config {config_path}: {exc}') from exc
    block = data.get('inference') or {}
    if 'stream' in block:
        return dict(block['stream'])
    args, ctor = block.get('args') or {}, data.get('constructor_args') or {}
    out = {}
    method = block.get('method', 'inference_streaming')
    if block and method != 'inference_streaming':
        raise ReplayError(f'model config {config_path}: inference method {method!r} is not '
                          "supported: expected 'inference_streaming'")
    if 'num_scale_frames' in args:
        out['scale_frames'] = int(args['num_scale_frames'])
    elif 'kv_cache_scale_frames' in ctor:
        out['scale_frames'] = int(ctor['kv_cache_scale_frames'])
    if 'kv_cache_sliding_window' in ctor:
        out['sliding_window'] = int(ctor['kv_cache_sliding_window'])
    if 'keyframe_interval' in args:
        out['keyframe_interval'] = max(1, int(args['keyframe_interval']))
    if float(args.get('flow_threshold') or 0) > 0:
        out['keyframe_mode'] = KeyframeMode.FLOW
        out['flow_threshold_px'] = float(args['flow_threshold'])
    if 'max_non_keyframe_gap' in args:
        out['max_keyframe_gap'] = int(args['max_non_keyframe_gap'])
    if 'camera_num_iterations' in ctor:
        out['camera_iterations'] = int(ctor['camera_num_iterations'])
    return out


def stream_config(args: argparse.Namespace) -> StreamConfig:
    """Config block first, then the flags that were given."""
    fields = inference_settings(args.model_config)
    flags = {'scale_frames': args.scale_frames, 'sliding_window': args.sliding_window,
             'keyframe_interval': args.keyframe_interval, 'keyframe_mode': args.keyframe_mode,
             'flow_threshold_px': args.flow_threshold,
             'max_window_frames': args.max_window_frames,
             'camera_iterations': args.camera_iterations, 'image_size': args.image_size}
    fields.update({k: v for k, v in flags.items() if v is not None})
    if getattr(args, 'ply', None) or getattr(args, 'colmap', None) \
            or getattr(args, 'depth_images', None):
        fields['with_depth'] = True  # the map is made of depth, and so is a depth scale
    return StreamConfig.from_dict(fields)


def map_config(args: argparse.Namespace) -> MapCloudConfig:
    """Voxel size and bound from the flags; the rest as the node's ``~/points`` defaults."""
    try:
        return MapCloudConfig(voxel_size=args.map_voxel_size, max_points=args.map_max_points)
    except ConfigError as exc:
        raise ConfigError(f'{exc} (flags --map-voxel-size, --map-max-points)') from exc


def load_input(path: str, image_size: int, patch_size: int, fps: float,
               topic: Optional[str] = None) -> tuple:
    """
    Return (``float32 [S, 3, H, W]`` in [0, 1], stamps in ns or None) of the input.

    A .npy is used as is; a folder of images, a video or a ROS 2 bag is preprocessed as
    the reference does. Only a bag has stamps of its own (its images' header stamps).
    """
    import torch

    from lingbot_ros.streaming import preprocess
    from lingbot_ros.tools import bag
    src = Path(path)
    if not src.exists():
        raise ReplayError(f'{src}: no such file or folder')
    if src.suffix.lower() == '.npy':
        try:
            arr = np.load(src, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ReplayError(f'{src}: not a readable .npy array ({exc})') from exc
        if arr.ndim != 4 or arr.shape[1] != 3 or arr.shape[0] < 1:
            raise ReplayError(f'{src}: shape {arr.shape} is invalid: expected [S, 3, H, W]')
        if not np.issubdtype(arr.dtype, np.floating):
            raise ReplayError(f'{src}: dtype {arr.dtype} is invalid: expected floats in [0, 1]')
        return torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32)), None
    try:
        if bag.bag_folder(src) is not None:
            return _load_bag(src, topic, image_size, patch_size)
        if src.is_dir():
            files = preprocess.list_images(src)
            return preprocess.load_images(files, image_size, patch_size), None
        if src.suffix.lower() in VIDEO_SUFFIXES:
            return preprocess.load_video(src, fps, image_size, patch_size), None
        return preprocess.load_images([src], image_size, patch_size), None
    except (OSError, ValueError) as exc:  # BagError is a ValueError
        raise ReplayError(str(exc)) from exc


def _load_bag(src: Path, topic: Optional[str], image_size: int, patch_size: int) -> tuple:
    """Preprocess a bag's images as a video's frames are; keep their header stamps."""
    import torch

    from lingbot_ros.streaming.preprocess import preprocess_frame, ResizeMethod
    from lingbot_ros.tools import bag
    images, stamps = [], []
    for frame in bag.frames(src, topic, skipped=lambda why: print(
            f'lingbot-ros-replay: skipping {why}', file=sys.stderr)):
        image = preprocess_frame(frame.rgb, 'cpu', image_size, patch_size,
                                 method=ResizeMethod.PIL)[0]
        if images and image.shape != images[0].shape:
            raise ReplayError(f'{src}: the image at stamp {frame.stamp_ns} is '
                              f'{frame.rgb.shape[1]}x{frame.rgb.shape[0]}, the first was '
                              'another size: replay one camera size at a time')
        images.append(image)
        stamps.append(frame.stamp_ns)
    if not images:
        raise ReplayError(f'{src}: no usable image in the bag')
    return torch.stack(images), stamps


def run(args: argparse.Namespace) -> dict:
    """Load, run and write; return a short summary (frames, keyframes, windows)."""
    from lingbot_ros.streaming.atomic import atomic_file
    from lingbot_ros.streaming.colmap import KeyframeStore, write_colmap
    from lingbot_ros.streaming.engine import Engine, EngineError
    from lingbot_ros.streaming.ply import write_ply
    from lingbot_ros.streaming.trajectory import write_npz, write_tum

    try:
        scale_inputs = replay_metric.MetricInputs.from_args(args)
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
    try:
        stream_cfg = stream_config(args)
        cloud = MapCloud(map_config(args)) if args.ply or args.colmap else None
        if args.colmap_max_keyframes < 1:
            raise ConfigError(f'--colmap-max-keyframes={args.colmap_max_keyframes} is '
                              'invalid: expected an integer >= 1')
        store = KeyframeStore(args.colmap_max_keyframes) if args.colmap else None
        engine_cfg = EngineConfig(
            checkpoint=args.checkpoint, preset=args.preset or 'tiny',
            model_config=args.model_config, device=args.device, dtype=args.dtype,
            attention_backend=args.attention_backend, seed=args.seed).validate()
        engine = Engine.load(engine_cfg)
    except (ConfigError, EngineError) as exc:
        raise ReplayError(str(exc)) from exc
    images, stamps = load_input(args.images, stream_cfg.image_size,
                                engine.model_config.patch_size, args.fps, args.topic)
    try:
        stamps = replay_metric.frame_stamps(args, images.shape[0], stamps)
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
    session = engine.new_session('replay', stream_cfg)
    saved_scale = None
    if args.resume:  # the stamps go on first: the scale's inputs are paired with them
        stamps = _resume(session, engine, args, tuple(images.shape[-2:]), stamps)
        saved_scale = _saved_scale(args.resume) if scale_inputs is not None else None
    first_index = session.frames_seen
    try:
        scale_input = None if scale_inputs is None else scale_inputs.prepare(
            args.images, stamps, tuple(images.shape[-2:]), engine.model_config.patch_size)
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
    bar = _progress(images.shape[0], args.quiet)
    try:
        out = session.run(images, stamps, progress=bar.update_to if bar else None,
                          resume=bool(args.resume))
    except ValueError as exc:
        raise ReplayError(str(exc)) from exc
    finally:
        if bar:
            bar.close()
    results, arrays, scale = out.results, out.arrays, None
    if scale_input is not None:
        try:
            scale = scale_input.fit(results, first_index, saved_scale)
            if args.resume and saved_scale is None:
                scale.resumed = 'not resumed: none in the state file; the scale starts over'
        except ValueError as exc:  # a depth image that cannot be read
            raise ReplayError(str(exc)) from exc
        results, arrays = scale.results(results), scale.arrays(arrays)
    try:
        if args.out:
            write_npz(args.out, arrays)
        if args.trajectory:
            write_tum(args.trajectory, [r.stamp_ns * 1e-9 for r in results],
                      [r.pose_c2w for r in results])
        if args.kv_stats:
            steps = [call.as_record() for call in out.kv_stats]
            with atomic_file(args.kv_stats) as fh:
                fh.write(json.dumps({'steps': steps}, indent=1).encode())
        saved = _save_state(session, engine, args.save_state,
                            None if scale is None else scale.saved()) if args.save_state \
            else None
        restarts = 0
        if cloud is not None:
            restarts = _build_map(results, cloud, store)
            if args.ply:
                write_ply(args.ply, *cloud.snapshot())
            if store is not None:
                colmap = write_colmap(args.colmap, store.images(), cloud.snapshot())
    except OSError as exc:
        raise ReplayError(f'cannot write output: {exc}') from exc
    except ValueError as exc:  # a COLMAP model without a keyframe image
        raise ReplayError(f'cannot write the COLMAP model: {exc}') from exc
    summary = {'frames': len(results), 'keyframes': int(arrays['is_keyframe'].sum()),
               'windows': session.window_index + 1, 'model': engine.description,
               'scale': scale}
    if cloud is not None:
        summary['map'], summary['map_restarts'] = cloud.stats(), restarts
    if store is not None:
        summary['colmap'] = colmap
    if saved is not None:
        summary['state'] = saved
    if session.resume_report is not None:
        summary['resumed'] = session.resume_report.summary()
    return summary


def _resume(session: Any, engine: Any, args: argparse.Namespace, model_hw: tuple,
            stamps: list) -> list:
    """
    Start ``session`` from ``--resume``; return the frames' stamps from there on.

    Stamps the replay made itself (``index / --fps``) go on from the saved stream's frame
    index; an input's own clock (a bag's, ``--stamps``) is kept. A refused state is a
    ReplayError of one line.
    """
    from lingbot_ros.streaming.errors import StateError
    from lingbot_ros.streaming.state import load_into
    from lingbot_ros.tools import bag
    try:
        load_into(session, args.resume, engine.state_identity(), model_hw=model_hw)
    except StateError as exc:
        raise ReplayError(str(exc)) from exc
    if getattr(args, 'stamps', None) or bag.bag_folder(Path(args.images)) is not None:
        return stamps
    return [int(round((session.frames_seen + i) * 1e9 / args.fps)) for i in range(len(stamps))]


def _saved_scale(path: str) -> Any:
    """Read the metric scale a state file holds (None: none); a broken one is a ReplayError."""
    from lingbot_ros.streaming.errors import StateError
    from lingbot_ros.streaming.state import read_scale
    try:
        return read_scale(path)
    except StateError as exc:
        raise ReplayError(str(exc)) from exc


def _save_state(session: Any, engine: Any, path: str, scale: Any) -> Any:
    """Write the stream's state (and its metric scale) after its last frame."""
    from lingbot_ros.streaming.state import save_session
    return save_session(session, path, engine.state_identity(), scale)


def _build_map(results: Sequence[Any], cloud: MapCloud, store: Any) -> int:
    """Merge the keyframes into ``cloud`` (and their images into ``store``); return restarts."""
    from lingbot_ros.streaming.colmap import keyframe_image
    from lingbot_ros.streaming.map_cloud import AddOutcome
    restarts = 0
    for result in results:
        report = cloud.add(result)
        restarts += report.new_epoch
        if store is not None and report.outcome is AddOutcome.ADDED:
            store.add(keyframe_image(result))
    return restarts


def _progress(total: int, quiet: bool) -> Any:
    if quiet:
        return None
    from tqdm import tqdm

    class _Bar(tqdm):
        def update_to(self, done: int) -> None:
            self.update(done - self.n)

    return _Bar(total=total, desc='replay', unit='frame', disable=None, file=sys.stderr)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point; returns the exit code (0 ok, 2 user error)."""
    args = build_parser().parse_args(argv)
    try:
        summary = run(args)
    except ReplayError as exc:
        print(f'lingbot-ros-replay: error: {exc}', file=sys.stderr)
        return 2
    scale = summary['scale']
    if scale is not None and (not scale.metric or not args.quiet):  # model units: always said
        print(f'lingbot-ros-replay: {scale.message}', file=sys.stderr)
    if scale is not None and scale.resumed is not None and (
            not args.quiet or scale.resumed.startswith('not')):  # a scale not taken: said
        print(f'lingbot-ros-replay: saved scale {scale.resumed}', file=sys.stderr)
    if not args.quiet:
        print(f"{summary['frames']} frames, {summary['keyframes']} keyframes, "
              f"{summary['windows']} window(s); model: {summary['model']}", file=sys.stderr)
        if 'map' in summary:
            m = summary['map']
            restarted = summary['map_restarts']
            note = f'; the map restarted {restarted} time(s): the file holds the last one' \
                if restarted else ''
            dest = ', '.join(d for d in (args.ply, args.colmap) if d)
            print(f'map: {m.points} points from {m.keyframes} keyframes ({m.dropped_points} '
                  f'dropped at the bound{note}) -> {dest}', file=sys.stderr)
        if 'resumed' in summary:
            print(f"resumed: {summary['resumed']}", file=sys.stderr)
        if 'state' in summary:
            saved = summary['state']
            print(f'state: {saved.size_bytes / 1e6:.1f} MB -> {saved.path}', file=sys.stderr)
        if 'colmap' in summary:
            c = summary['colmap']
            unit = 'metres' if scale is not None and scale.metric else "the model's"
            print(f'colmap: {c.images} keyframe images, {c.points} points -> {c.folder} '
                  f'(scale: {unit})', file=sys.stderr)
    return 0


if __name__ == '__main__':
    sys.exit(main())
