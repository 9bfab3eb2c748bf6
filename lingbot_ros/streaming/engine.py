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
The loaded model plus everything sessions share: device, dtype, cache back end.

One engine serves any number of sessions (one per camera); each session owns its
caches. Loading fails early with the path and the reason. What a configuration will
need on the device is known before anything is allocated:
:func:`lingbot_ros.streaming.memory.estimate` (and :meth:`Engine.memory_estimate` once
loaded).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
import time
from typing import Any, Callable, Dict, Optional, Tuple, Union

from lingbot_ros.cache.backend_choice import AttentionBackend
from lingbot_ros.model.config import ConfigError, ModelConfig
from lingbot_ros.model.graphs import CaptureStreams, GraphedStep, stageable, StagingRefused
from lingbot_ros.model.hub import HubError, resolve_checkpoint, ResolvedCheckpoint
from lingbot_ros.streaming.caches import (CacheFactory, CacheSpec, KeptCaches,
                                          paged_cache_factory)
from lingbot_ros.streaming.config import EngineConfig, StreamConfig
from lingbot_ros.streaming.device_memory import DeviceMemory, read_device_memory
from lingbot_ros.streaming.dtypes import (camera_kv_dtype, dtype_name, DTYPES,
                                          head_storage_dtype, heads_autocast, kv_storage_dtype)
from lingbot_ros.streaming.preprocess import FrameUploads, preprocess_frame
from lingbot_ros.streaming.session import Prepared, Session, SessionContext
from lingbot_ros.streaming.state import identity_of, random_weights_digest, StateIdentity
import numpy as np
import torch

KERNEL_LOAD_S = 10.0   # a warm-up longer than this built kernels (loading built ones takes ~1 s)


def allocator_settings(text: str) -> bool:
    """Apply ``text`` (``PYTORCH_CUDA_ALLOC_CONF`` syntax) to the allocator; False if unable."""
    setter = getattr(torch._C, '_accelerator_setAllocatorSettings', None) or \
        getattr(torch.cuda.memory, '_set_allocator_settings', None)  # before torch 2.9
    if setter is None:
        return False
    setter(text)
    return True


def use_expandable_segments() -> bool:
    """
    Switch PyTorch's CUDA allocator to expandable segments for what is allocated next.

    With fixed segments, memory freed after the scale call stays reserved in half-used
    blocks, and under a per-process cap the CUDA-graph capture then runs out of memory
    though the run as a whole would fit; expandable segments give that memory back.
    Return False where this PyTorch has no such switch (set ``PYTORCH_CUDA_ALLOC_CONF``
    there instead).
    """
    return allocator_settings('expandable_segments:True')


class EngineError(RuntimeError):
    """The engine cannot start: a missing file, a config/checkpoint mismatch, no device."""


@dataclass(frozen=True)
class WarmUpTimes:
    """
    Where a warm-up's seconds went, part by part, in the order they ran.

    A part is one step of a throwaway stream: its scale call (uncompiled: first calls of
    its kernels), its first streaming frame with depth (compiling a streaming frame and the
    depth decoder, capturing the graph), the first without depth (another capture) and the
    frames after each (what a frame costs once all that is done). The first camera's
    stream compiles; the others only allocate and capture.
    """

    parts: Tuple[Tuple[str, float], ...]

    @property
    def total_s(self) -> float:
        return sum(seconds for _, seconds in self.parts)

    def by_part(self) -> Dict[str, float]:
        """Return seconds by part name (parts of one name, over the cameras, summed)."""
        out: Dict[str, float] = {}
        for name, seconds in self.parts:
            out[name] = out.get(name, 0.0) + seconds
        return out

    def text(self) -> str:
        """Say e.g. 'scale call 6.1 s, first frame with depth 3.2 s, ...'."""
        return ', '.join(f'{name} {seconds:.1f} s' for name, seconds in self.by_part().items())


def _resolve_device(name: str) -> torch.device:
    if name == 'auto':
        return torch.device('cuda' if torch.cuda.is_available() else 'cpu')
    device = torch.device(name)
    if device.type == 'cuda' and not torch.cuda.is_available():
        raise EngineError(f'device={name!r} is not available: no CUDA device visible')
    return device


def _resolve_backend(name: Union[AttentionBackend, str], device: torch.device,
                     dtype: torch.dtype, model_cfg: ModelConfig,
                     kv_dtype: Optional[torch.dtype] = None,
                     progress: Callable[[str], None] = lambda _: None) -> tuple:
    """
    Return (backend, reason) for the aggregator cache, as the cache layer decides it.

    FlashInfer compiles its kernel here (configure time) rather than on the first
    frame, for the cache's storage dtype ``kv_dtype`` (default ``dtype``); if that
    fails, ``auto`` falls back to SDPA and says why. A machine that never built them
    compiles them now (a minute or two, once): ``progress`` is told before and after.
    """
    from lingbot_ros.cache.backends import (flashinfer_kernel_dir, flashinfer_kernels_built,
                                            resolve_backend, warm_up_flashinfer)
    agg = model_cfg.aggregator
    kv_dtype = kv_dtype or dtype
    try:
        requested = AttentionBackend.of(name)
        backend, reason = resolve_backend(requested, device, dtype=kv_dtype,
                                          head_dim=agg.head_dim)
    except (ValueError, RuntimeError) as exc:
        shown = getattr(name, 'value', name)  # the name, as the parameter gave it
        raise EngineError(f'attention_backend={shown!r}: {exc}') from exc
    if backend is AttentionBackend.FLASHINFER:
        before, t0 = flashinfer_kernels_built(), time.monotonic()
        if not before:
            progress(f'building FlashInfer attention kernels (the first start on this machine '
                     f'compiles them once, a minute or two; cached in '
                     f'{flashinfer_kernel_dir()}; lingbot-ros-prepare builds them ahead)')
        try:
            warm_up_flashinfer(device, agg.num_heads, agg.head_dim, dtype, kv_dtype)
            seconds = time.monotonic() - t0
            # new files, or a rebuild of stale ones (FlashInfer reinstalled): both take long
            if flashinfer_kernels_built() > before or seconds > KERNEL_LOAD_S:
                progress(f'FlashInfer attention kernels built in {seconds:.1f} s (once per '
                         f'machine; cached in {flashinfer_kernel_dir()})')
        except Exception as exc:  # noqa: BLE001 - any kernel build failure
            if requested is AttentionBackend.FLASHINFER:
                raise EngineError(f'attention_backend=flashinfer: the kernel failed to build '
                                  f'or run ({type(exc).__name__}: {exc})') from exc
            return (AttentionBackend.SDPA,
                    f'auto: FlashInfer failed its warm-up ({type(exc).__name__}) -> SDPA')
    return backend, reason


def prepare_kernels(cfg: EngineConfig,
                    progress: Callable[[str], None] = lambda _: None) -> tuple:
    """
    Build (or load) the attention kernels ``cfg`` will use, without loading any weights.

    What ``lingbot-ros-prepare`` runs on a robot image, so the node's first start does not
    compile for a minute and a half. Returns (backend, reason, seconds).
    """
    cfg = cfg.validate()
    try:
        model_cfg = _model_config(cfg)
    except ConfigError as exc:
        raise EngineError(str(exc)) from exc
    t0 = time.monotonic()
    backend, reason = _resolve_backend(cfg.attention_backend, _resolve_device(cfg.device),
                                       DTYPES[cfg.dtype], model_cfg, kv_storage_dtype(cfg),
                                       progress)
    return backend, reason, time.monotonic() - t0


def _model_config(cfg: EngineConfig) -> ModelConfig:
    if cfg.model_config is None:
        return ModelConfig.preset(cfg.preset)
    path = Path(cfg.model_config)
    if not path.is_file():
        raise EngineError(f'model config {path}: no such file')
    return ModelConfig.load(path)


def default_cache_factory(backend: AttentionBackend) -> CacheFactory:
    """Pick the paged cache (the bounded one); the dense cache stays the tests' yardstick."""
    return paged_cache_factory


class Engine:
    """A loaded model; ``Engine.load(cfg)`` then ``engine.new_session(name, stream_cfg)``."""

    def __init__(self, model: Any, model_config: ModelConfig, device: torch.device,
                 dtype: torch.dtype, backend: Union[AttentionBackend, str], description: str,
                 cache_factory: Optional[CacheFactory] = None, cuda_graphs: bool = False,
                 checkpoint: Optional[ResolvedCheckpoint] = None,
                 kv_dtype: Optional[torch.dtype] = None,
                 config: Optional[EngineConfig] = None,
                 camera_kv_dtype: torch.dtype = torch.float32) -> None:
        self.model = model
        self.kv_dtype = kv_dtype or dtype  # the aggregator cache's storage dtype
        self.camera_kv_dtype = camera_kv_dtype  # the camera head cache's
        self.config = config  # what it was loaded from (None: built by hand)
        # the weights' file, its sha256 and the spec it came from; None: random weights
        self.checkpoint = checkpoint
        self.model_config = model_config
        self.device = device
        self.dtype = dtype
        self.backend = AttentionBackend.of(backend)
        self.description = description
        self.cache_factory = KeptCaches(cache_factory or default_cache_factory(self.backend))
        self.backend_reason = 'given'
        self.load_phases: dict = {}  # Engine.load: seconds by step
        self.compiled_blocks = 0  # torch_compile: blocks whose pieces are compiled (0: off)
        self.compile_status = 'off'  # the same, said for a person (diagnostics, bench)
        streams = CaptureStreams()  # every capture of this engine: one per device
        self.runner = _Runner(model, cuda_graphs and device.type == 'cuda', streams)
        # how frames reach the device; live frames' resize graphed when the frames are
        self.uploads = FrameUploads(graphed=self.runner.cuda_graphs, streams=streams)
        self._sessions: dict = {}

    @property
    def graph_status(self) -> str:
        """Whether streaming frames (and live frames' resize) replay as CUDA graphs."""
        resize = self.uploads.resize_status()
        return f'{self.runner.graph_status}; frame resize {resize}' if resize \
            else self.runner.graph_status

    @classmethod
    def load(cls, cfg: EngineConfig,
             progress: Callable[[str], None] = lambda _: None) -> 'Engine':
        """
        Build the model from ``cfg``; raise :class:`EngineError` naming path and reason.

        ``dtype`` other than float32 keeps the aggregator's weights in that dtype and runs
        it under autocast (heads in float32), as the reference; ``weights_dtype='compute'``
        keeps the heads' weights in that dtype too (still computing in float32);
        ``head_dtype`` 'compute' or 'float16' runs the heads under autocast as well. Each
        weight reaches the device once, in its final dtype. An ``hf://`` checkpoint is
        resolved through the Hugging Face cache first; the file read and its sha256
        (computed on a thread of its own, ``engine.checkpoint.digest``) end up in
        ``engine.checkpoint``. ``progress`` hears of long steps (a kernel build) as they
        start; ``engine.load_phases`` says where the time went (seconds by step).
        """
        from lingbot_ros.model.checkpoint import CheckpointError, load_model
        cfg = cfg.validate()
        try:
            model_cfg = _model_config(cfg)
        except ConfigError as exc:
            raise EngineError(str(exc)) from exc
        device = _resolve_device(cfg.device)
        if device.type == 'cuda' and cfg.expandable_segments:
            use_expandable_segments()  # before the first weight is allocated
        dtype = DTYPES[cfg.dtype]
        kv_dtype = kv_storage_dtype(cfg)
        phases, t = {}, time.monotonic()
        backend, backend_reason = _resolve_backend(cfg.attention_backend, device, dtype,
                                                   model_cfg, kv_dtype, progress)
        phases['attention kernels'], t = time.monotonic() - t, time.monotonic()
        resolved = None
        if cfg.checkpoint is not None:
            try:  # the digest is computed on its own thread, beside the weight load
                resolved = resolve_checkpoint(cfg.checkpoint)
            except HubError as exc:
                raise EngineError(str(exc)) from exc
        try:
            model = load_model(model_cfg, None if resolved is None else resolved.path,
                               device=device, dtype=torch.float32,
                               seed=cfg.seed,
                               autocast_dtype=None if dtype == torch.float32 else dtype,
                               head_dtype=head_storage_dtype(cfg),
                               head_autocast=heads_autocast(cfg))
        except CheckpointError as exc:
            raise EngineError(str(exc)) from exc
        phases['checkpoint and weights'] = time.monotonic() - t
        if cfg.depth_chunk_frames:
            model.depth_head.chunk = cfg.depth_chunk_frames
        blocks, compile_status = 0, 'off'
        if cfg.torch_compile:
            if device.type == 'cuda':
                from lingbot_ros.model.compiled import (compile_blocks, compile_depth_decoder,
                                                        keep_traces, kernel_cache_dir)
                kept = 'kernels and traces' if keep_traces() else 'kernels'
                blocks = compile_blocks(model)
                decoder = ' and the depth decoder' if compile_depth_decoder(model) else ''
                compile_status = (f'on ({blocks} blocks{decoder}; each shape compiles at its '
                                  f'first call; {kept} kept in {kernel_cache_dir()})')
            else:
                compile_status = f'off: needs CUDA (device {device})'
        if cfg.checkpoint is None:
            description = f'random weights (preset {cfg.preset}, seed {cfg.seed})' \
                if cfg.model_config is None else \
                f'random weights (model config {cfg.model_config}, seed {cfg.seed})'
        else:
            description = str(cfg.checkpoint)
        engine = cls(model, model_cfg, device, dtype, backend, description,
                     cuda_graphs=cfg.cuda_graphs, checkpoint=resolved, kv_dtype=kv_dtype,
                     config=cfg, camera_kv_dtype=camera_kv_dtype(cfg))
        engine.backend_reason = backend_reason
        engine.load_phases = phases
        engine.compiled_blocks, engine.compile_status = blocks, compile_status
        return engine

    def context(self) -> SessionContext:
        """Bundle what sessions of this engine share."""
        return SessionContext(model=self.runner, model_config=self.model_config,
                              device=self.device, dtype=self.dtype, backend=self.backend,
                              cache_factory=self.cache_factory, prepare=self._prepare,
                              upload=self.uploads.upload,
                              kv_dtype=self.kv_dtype, camera_kv_dtype=self.camera_kv_dtype,
                              kv_splits=self.config.attention_kv_splits if self.config else 0)

    def memory_estimate(self, stream_cfg: StreamConfig, input_hw: tuple, cameras: int = 1):
        """
        Return the :class:`~lingbot_ros.streaming.memory.MemoryEstimate` of this engine.

        Same formulas as :func:`~lingbot_ros.streaming.memory.estimate` before loading,
        with the back end this engine actually chose (FlashInfer's warm-up may have
        fallen back to SDPA) and whether its CUDA graphs are still on.
        """
        from lingbot_ros.streaming.memory import estimate
        cfg = self.config or EngineConfig(device=str(self.device),
                                          dtype=dtype_name(self.dtype))
        cfg = cfg.replace(cuda_graphs=self.runner.cuda_graphs)
        return estimate(cfg, stream_cfg, input_hw, cameras, model_config=self.model_config,
                        backend=self.backend, device_type=self.device.type)

    @property
    def hardware_id(self) -> str:
        """Name the device and, for CUDA, its model (``/diagnostics``' hardware_id)."""
        if self.device.type != 'cuda':
            return str(self.device)
        try:
            return f'{self.device} {torch.cuda.get_device_name(self.device)}'
        except Exception:  # noqa: BLE001 (a name is a nicety)
            return str(self.device)

    def device_memory(self) -> Optional[DeviceMemory]:
        """Return the device's memory now (None on a CPU)."""
        return read_device_memory(self.device)

    def state_identity(self) -> StateIdentity:
        """
        Return what a saved stream of this engine belongs to (waits for the weights' sha256).

        The checkpoint file's sha256, or for seeded random weights the sha256 of the
        structure and the seed; an engine built by hand from neither has no identity.
        """
        if self.checkpoint is not None:
            weights = f'sha256:{self.checkpoint.sha256}'
        elif self.config is not None:
            weights = f'random:{random_weights_digest(self.model_config, self.config.seed)}'
        else:
            raise EngineError('this engine was built by hand (no checkpoint, no config): its '
                              'weights have no identity to save a state under')
        return identity_of(self.model_config, weights, self.dtype, self.kv_dtype,
                           self.camera_kv_dtype)

    def new_session(self, name: str, cfg: StreamConfig) -> Session:
        """Open a new stream over this engine's model, with its own caches."""
        return Session(self.context(), name, cfg)

    def warm_up(self, cfg: StreamConfig, input_hw: tuple, streaming_frames: int = 2,
                cameras: int = 1) -> WarmUpTimes:
        """
        Run throwaway streams of synthetic ``input_hw`` frames; return where the time went.

        What a model compiles at its first call of a shape (``torch_compile``: a streaming
        frame at that input size; a scale call runs uncompiled) then happens here, before a camera
        is waiting on it, instead of in its first frames: ``streaming_frames`` with depth
        (the depth decoder too: depth can be switched on at runtime, and the frames that
        seed a new window always make it), as many without. One stream per camera: each
        leaves its caches, and the graphs captured over them, for a camera's session of
        the same size (:class:`~lingbot_ros.streaming.caches.KeptCaches`), so the cameras'
        first frames neither allocate nor capture. A camera of another size compiles and
        captures at its own first frames. What was traced is saved for the next start
        (:func:`~lingbot_ros.model.compiled.keep_traces`).
        """
        texture = np.random.default_rng(0).integers(0, 256, (*input_hw, 3), dtype=np.uint8)
        frames = iter(range(1, 1 << 30))
        parts: list = []

        def timed(name: str, session: Session, image: np.ndarray) -> None:
            t = time.monotonic()
            session.step(image, next(frames))  # lands the frame: the device is done with it
            parts.append((name, time.monotonic() - t))
        for n in range(max(1, cameras)):
            later = '' if n == 0 else 'cameras after the first: '
            made: list = []

            def allocate(spec: CacheSpec) -> tuple:
                pair = self.cache_factory.factory(spec)  # never a pair kept for a camera
                made.append((spec, pair))
                return pair
            session = Session(replace(self.context(), cache_factory=allocate), f'warm-up {n}',
                              cfg.replace(with_depth=True))
            for i in range(cfg.scale_frames + streaming_frames):
                k = i - cfg.scale_frames  # streaming frame k; the scale call lands at k = -1
                name = ('scale call' if k < 0 else 'first frame with depth' if k == 0
                        else 'later frames with depth')
                timed(later + name, session, np.roll(texture, 7 * i, axis=1))
            session.update(session.config.replace(with_depth=False))
            for i in range(streaming_frames):
                name = 'first frame without depth' if i == 0 else 'later frames without depth'
                timed(later + name, session, np.roll(texture, -7 * i, axis=1))
            del session
            if made:
                self.cache_factory.keep(*made[-1])
        if self.compiled_blocks:
            from lingbot_ros.model.compiled import save_traces
            try:
                save_traces()  # the next start loads what this one traced
            except Exception as exc:  # noqa: BLE001 (the next start traces again: slower only)
                self.compile_status += f'; traces not saved ({type(exc).__name__}: {exc})'
        if self.device.type == 'cuda':
            torch.cuda.empty_cache()  # the streams' activations go back before the cameras'
        return WarmUpTimes(tuple(parts))

    def _prepare(self, image_rgb: np.ndarray, cfg: StreamConfig) -> Prepared:
        """Resize/crop a live frame on the model's device, as the reference's crop mode."""
        tensor, plan = preprocess_frame(image_rgb, self.device, cfg.image_size,
                                        self.model_config.patch_size, uploads=self.uploads)
        return Prepared(image=tensor, model_to_input=model_to_input_matrix(plan),
                        input_hw=tuple(image_rgb.shape[:2]))


def model_to_input_matrix(plan: Any) -> np.ndarray:
    """
    Return the 3x3 map from model-grid pixel coordinates to input pixels.

    ``plan`` is a preprocess ``FrameTransform``: model = input * scale - offset, so
    ``K_input = M @ K_model`` for any model-grid pinhole ``K_model``.
    """
    (sx, sy), (ox, oy) = plan.scale_xy, plan.offset_xy
    return np.array([[1.0 / sx, 0.0, ox / sx], [0.0, 1.0 / sy, oy / sy], [0.0, 0.0, 1.0]])


class _Runner:
    """
    Calls the model without autograd; on CUDA replays streaming frames as graphs.

    A streaming frame (one frame, not the first, not a scale frame) on a CUDA device
    goes through a :class:`~lingbot_ros.model.graphs.GraphedStep` captured once per
    (size, depth on/off, camera iterations, caches); everything else runs eagerly. The
    whole frame is one graph, bound to its paged caches: new caches (a new size or
    window) mean a new capture, and the steps of caches that are gone are dropped. A
    call the caches cannot stage runs eagerly. If a capture fails the runner says why in
    ``graph_status`` and stays eager. All captures share one graph pool (they never run
    at the same time): a second capture reuses the first one's intermediate memory
    instead of reserving a pool of its own.

    A scale call runs its blocks uncompiled (``torch_compile`` or not): its kernels span
    all the scale frames, so the launches that compiling saves are few against their
    work, while tracing its shapes would double the graphs every start traces and loads.
    """

    MAX_GRAPHS = 8  # distinct (size, options) captures kept; each holds one frame's buffers

    def __init__(self, model: Any, cuda_graphs: bool, streams: CaptureStreams) -> None:
        self.model = model
        self.cuda_graphs = cuda_graphs
        self._streams = streams
        self.graph_status = 'off' if not cuda_graphs else 'waiting for the first frame'
        self._graphs: dict = {}
        self._pool: Optional[tuple] = None  # the captures' shared graph pool
        self.eager_frames = 0  # streaming frames the caches refused to stage (run eagerly)

    def __call__(self, images: torch.Tensor, camera_iterations: int = 0, **kwargs: Any) -> Any:
        iterations = camera_iterations or None
        with torch.no_grad():
            step = self._graph_for(images, iterations, kwargs)
            if step is not None:
                try:
                    return step(images, kwargs['time_index'], kwargs['global_cache'],
                                kwargs['camera_cache'])
                except StagingRefused:
                    self.eager_frames += 1
            if kwargs.get('scale_frames'):
                with torch.compiler.set_stance('force_eager'):
                    return self.model(images, camera_iterations=iterations, **kwargs)
            return self.model(images, camera_iterations=iterations, **kwargs)

    def _graph_for(self, images: torch.Tensor, iterations: Optional[int], kwargs: dict):
        if not (self.cuda_graphs and images.is_cuda and images.shape[0] == 1
                and not kwargs.get('first_frame') and not kwargs.get('scale_frames')):
            return None
        caches = (kwargs.get('global_cache'), kwargs.get('camera_cache'))
        if not all(stageable(c) for c in caches):
            return None
        key = (tuple(images.shape[-2:]), bool(kwargs.get('with_depth', True)), iterations,
               tuple(id(c) for c in caches))
        step = self._graphs.get(key)
        if step is not None and not step.serves(*caches):  # an id reused by new caches
            del self._graphs[key]
            step = None
        if step is None:
            for old in [k for k, s in self._graphs.items() if not s.alive()]:
                del self._graphs[old]   # bound to caches that are gone: never replayed again
            if len(self._graphs) >= self.MAX_GRAPHS:
                self._graphs.pop(next(iter(self._graphs)))
            if self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            try:
                step = GraphedStep(self.model, *key[0], with_depth=key[1],
                                   camera_iterations=iterations, pool=self._pool,
                                   caches=caches, streams=self._streams)
                self._graphs[key] = step
                self.graph_status = f'on ({len(self._graphs)} captured, one graph per frame)'
            except StagingRefused:
                return None   # this call only; the next one tries again
            except RuntimeError as exc:  # capture refused (out of memory too): stay eager
                self.cuda_graphs = False
                self._graphs.clear()
                self._pool = None
                self.graph_status = f'off: capture failed ({exc})'
                return None
        return step
