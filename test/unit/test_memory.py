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

"""The memory estimate against what the CPU really allocates, and the 8 GB profile."""

import dataclasses
from pathlib import Path
import weakref

from lingbot_ros.model.checkpoint import compute_in_float32, load_model, matmul_parameters
from lingbot_ros.model.config import ModelConfig
from lingbot_ros.streaming import memory
from lingbot_ros.streaming.config import EngineConfig, KvCacheDtype, StreamConfig
from lingbot_ros.streaming.engine import Engine
from lingbot_ros.streaming.memory import (call_activation_bytes, estimate, fitting_window,
                                          MemoryEstimate)
from lingbot_ros.streaming.parameters import parse
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
import yaml

ROOT = Path(__file__).resolve().parents[2]
GIB = 1024 ** 3
TINY = ModelConfig.preset('tiny')
# A structure big enough for the per-token terms to matter, small enough for a CPU.
MID = ModelConfig.from_dict({
    'name': 'mid', 'patch_embed': {'embed_dim': 128, 'depth': 2, 'num_heads': 2},
    'aggregator': {'embed_dim': 128, 'depth': 4, 'num_heads': 2,
                   'selected_layers': [0, 1, 2, 3], 'rope3d_split': [20, 22, 22]},
    'camera_head': {'trunk_depth': 1, 'num_heads': 4},
    'depth_head': {'features': 32, 'out_channels': [16, 32, 64, 64]}})


class LiveBytes(TorchDispatchMode):
    """Count the bytes of storages that ops create while active; keep the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._refs: dict = {}

    def _drop(self, key: int) -> None:
        nbytes, count = self._refs[key]
        if count == 1:
            del self._refs[key]
            self.live -= nbytes
        else:
            self._refs[key] = (nbytes, count - 1)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == 'meta':
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in self._refs:
                nbytes, count = self._refs[key]
                self._refs[key] = (nbytes, count + 1)
            elif storage.nbytes():
                self._refs[key] = (storage.nbytes(), 1)
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            else:
                continue
            weakref.finalize(t, self._drop, key)
        return out


def _engine(**kw) -> Engine:
    return Engine.load(EngineConfig(preset='tiny', device='cpu', cuda_graphs=False, **kw))


def _frames(n, hw=(48, 64)):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for _ in range(n)]


def _cache_bytes(cache) -> int:
    pool, table = cache.pool, cache.table
    tensors = [pool.k, pool.v, pool.page_ids, table.kv_indices, table.kv_indptr,
               table.qo_indptr, table.last_page_len]
    return sum(t.numel() * t.element_size() for t in tensors)


# --- exact parts ---------------------------------------------------------------------


@pytest.mark.parametrize('options', [
    {}, {'dtype': 'bfloat16'}, {'dtype': 'bfloat16', 'weights_dtype': 'compute'},
    {'dtype': 'float16', 'weights_dtype': 'compute'},
    {'dtype': 'bfloat16', 'head_dtype': 'compute'},
    {'dtype': 'bfloat16', 'head_dtype': 'compute', 'weights_dtype': 'compute'}])
def test_weights_part_is_the_bytes_the_model_holds(options):
    engine = _engine(**options)
    held = sum(t.numel() * t.element_size() for t in
               list(engine.model.parameters()) + list(engine.model.buffers()))
    est = engine.memory_estimate(StreamConfig(image_size=84), (48, 64))
    assert est.weights == held
    before = estimate(EngineConfig(preset='tiny', device='cpu', **options),
                      StreamConfig(image_size=84), (48, 64))
    assert before.weights == held


@pytest.mark.parametrize('kv', ['auto', 'float8_e4m3'])
@pytest.mark.parametrize('window,limit', [(3, 0), (5, 12)])
def test_kv_part_is_the_bytes_the_paged_caches_allocate(kv, window, limit):
    engine = _engine(kv_cache_dtype=kv)
    cfg = StreamConfig(scale_frames=2, sliding_window=window, image_size=84,
                       max_window_frames=limit)
    sessions = [engine.new_session(name, cfg) for name in ('a', 'b')]
    for session in sessions:
        for i, frame in enumerate(_frames(4)):
            session.step(frame, i)
    held = sum(_cache_bytes(s._windows.current.agg) + _cache_bytes(s._windows.current.camera)
               for s in sessions)
    assert engine.memory_estimate(cfg, (48, 64), cameras=2).kv_pools == held
    if kv != 'auto':
        assert sessions[0]._windows.current.agg.pool.dtype == torch.float8_e4m3fn


def test_kv_part_counts_the_camera_pool_in_the_heads_dtype():
    engine = _engine(dtype='bfloat16', head_dtype='compute')
    cfg = StreamConfig(scale_frames=2, sliding_window=3, image_size=84, max_window_frames=12)
    session = engine.new_session('a', cfg)
    for i, frame in enumerate(_frames(4)):
        session.step(frame, i)
    assert session._windows.current.camera.pool.dtype == torch.bfloat16
    window = session._windows.current
    held = _cache_bytes(window.agg) + _cache_bytes(window.camera)
    assert engine.memory_estimate(cfg, (48, 64)).kv_pools == held
    float_heads = estimate(EngineConfig(preset='tiny', device='cpu', dtype='bfloat16'), cfg,
                           (48, 64))
    assert float_heads.kv_pools > held  # the camera pool in float32 takes twice the bytes


def test_fp8_pools_take_half_of_bf16():
    cfg = StreamConfig(scale_frames=2, sliding_window=4, image_size=84)
    release = ModelConfig.preset('release')

    def pools(dtype: torch.dtype) -> int:  # aggregator (dtype) + camera head (fp32 always)
        return memory.kv_pool_bytes(release, cfg, (56, 84), dtype)
    fp32, bf16, fp8 = pools(torch.float32), pools(torch.bfloat16), pools(torch.float8_e4m3fn)
    assert fp32 - bf16 == 2 * (bf16 - fp8) > 0  # aggregator: 4, 2, 1 bytes a value


# --- activations -------------------------------------------------------------------------


def _measured_call(cfg: ModelConfig, frames: int, hw, chunk: int) -> int:
    model = load_model(cfg, None, seed=0)
    model.depth_head.chunk = chunk
    images = torch.rand(frames, 3, *hw, generator=torch.Generator().manual_seed(0))
    mode = LiveBytes()
    with torch.no_grad(), mode:
        out = model(images, time_index=0, first_frame=True, scale_frames=True,
                    global_cache=None, camera_cache=None)
        del out
    return mode.peak


@pytest.mark.parametrize('cfg', [TINY, MID], ids=['tiny', 'mid'])
@pytest.mark.parametrize('frames,hw,chunk', [(1, (56, 98), 8), (4, (56, 98), 8),
                                             (4, (56, 98), 1), (2, (112, 196), 8)])
def test_activation_formula_is_near_the_measured_cpu_peak(cfg, frames, hw, chunk):
    measured = _measured_call(cfg, frames, hw, chunk)
    est = call_activation_bytes(cfg, hw, frames, torch.float32, chunk)
    # On the CPU in fp32, for these small structures, within 25 % (docs/memory.md gives the
    # GPU's figures).
    assert 0.75 * measured <= est <= 1.25 * measured, (est, measured)


def test_depth_chunks_scale_the_head_phase_linearly():
    mc = ModelConfig.preset('release')
    hw = (294, 518)
    per_frame = memory._depth_frame_bytes(mc, hw)
    one = call_activation_bytes(mc, hw, 8, torch.bfloat16, 1)
    eight = call_activation_bytes(mc, hw, 8, torch.bfloat16, 8)
    assert eight - one == 7 * per_frame
    assert 150e6 < per_frame < 200e6  # the full-resolution decoder of one release frame
    bigger = call_activation_bytes(mc, (378, 504), 8, torch.bfloat16, 8)
    assert bigger > eight
    assert call_activation_bytes(mc, hw, 16, torch.bfloat16, 1) > one


# --- the estimate as a whole -------------------------------------------------------------


def test_release_profile_parts_by_arithmetic():
    ecfg = EngineConfig(preset='release', device='cuda', dtype='bfloat16',
                        weights_dtype='compute', depth_chunk_frames=1)
    scfg = StreamConfig(sliding_window=48, max_window_frames=256)
    est = estimate(ecfg, scfg, (720, 1280), backend='flashinfer', device_type='cuda')
    assert est.model_hw == (294, 518)
    # every weight in bf16 but the aggregator's 1,878,016 norm, scale, token and table
    # values and the heads' 70,740 others (norms, tokens, their last layers) in float32,
    # and two fp32 buffers
    assert est.weights == 1_157_943_540 * 2 + (1_878_016 + 70_740) * 2 + 24
    page = 21 * 37 * 24 * 2 * 1024 * 2  # one cached frame, all layers, K and V, bf16
    assert est.kv_pools // page == 8 + 48 + 1 + 2  # + 2 pages of special tokens (256 x 6)
    assert est.total < 8 * GIB < estimate(ecfg.replace(weights_dtype='auto',
                                                       depth_chunk_frames=0),
                                          scfg, (720, 1280), backend='flashinfer',
                                          device_type='cuda').total
    fp8 = estimate(ecfg.replace(kv_cache_dtype='float8_e4m3'), scfg, (720, 1280),
                   backend='flashinfer', device_type='cuda')
    assert fp8.kv_pools < est.kv_pools * 0.52
    assert est.peak_allocated <= est.total
    assert '294x518' in est.describe()


def test_fitting_window_is_the_largest_that_fits():
    ecfg = EngineConfig(preset='release', device='cuda', dtype='bfloat16',
                        weights_dtype='compute', depth_chunk_frames=1)
    scfg = StreamConfig(sliding_window=256, max_window_frames=256)
    kw = {'backend': 'flashinfer', 'device_type': 'cuda'}
    window = fitting_window(ecfg, scfg, (720, 1280), 8 * GIB, **kw)
    assert 48 <= window < 256
    assert estimate(ecfg, scfg.replace(sliding_window=window), (720, 1280), **kw).total \
        <= 8 * GIB < estimate(ecfg, scfg.replace(sliding_window=window + 1), (720, 1280),
                              **kw).total
    assert fitting_window(ecfg, scfg, (720, 1280), GIB, **kw) == 0


def test_estimate_refuses_nonsense_naming_it():
    with pytest.raises(ValueError, match='cameras=0'):
        estimate(EngineConfig(), StreamConfig(), (48, 64), cameras=0)
    with pytest.raises(ValueError, match='input_hw'):
        estimate(EngineConfig(), StreamConfig(), (0, 64))
    with pytest.raises(ValueError, match='weights=-1'):
        MemoryEstimate(weights=-1, kv_pools=0, workspace=0, activations=0, graph_pools=0,
                       graph_static=0, peak_allocated=0, model_hw=(14, 14), cameras=1)


# --- loading ----------------------------------------------------------------------------


def test_loading_never_holds_a_float32_copy_of_low_precision_weights():
    mode = LiveBytes()
    with mode:
        model = load_model(TINY, None, seed=3, autocast_dtype=torch.bfloat16,
                           head_dtype=torch.bfloat16)
    final = sum(t.numel() * t.element_size() for t in model.parameters())
    largest = max(t.numel() for t in model.parameters()) * 4
    assert mode.peak <= final + largest + 1024
    matmul = matmul_parameters(model)
    for name, p in model.named_parameters():  # norms, scales, tokens, last layers: fp32
        assert p.dtype == (torch.bfloat16 if name in matmul else torch.float32), name
    assert model.depth_head.scratch.output_conv2[2].weight.dtype == torch.float32


def test_low_precision_heads_draw_the_same_weights_rounded():
    full = load_model(TINY, None, seed=3)
    low = load_model(TINY, None, seed=3, autocast_dtype=torch.bfloat16,
                     head_dtype=torch.bfloat16)
    for (name, a), (_, b) in zip(full.named_parameters(), low.named_parameters()):
        assert torch.equal(a.to(b.dtype), b), name


def test_heads_kept_in_bf16_compute_exactly_as_float32_with_rounded_weights():
    low = load_model(TINY, None, seed=4, head_dtype=torch.bfloat16)
    ref = load_model(TINY, None, seed=4)
    with torch.no_grad():
        for (name, r), (_, w) in zip(ref.named_parameters(), low.named_parameters()):
            r.copy_(w.float())
    images = torch.rand(3, 3, 28, 42, generator=torch.Generator().manual_seed(2))
    kw = {'time_index': 0, 'first_frame': True, 'scale_frames': True, 'global_cache': None,
          'camera_cache': None}
    with torch.no_grad():
        a, b = low(images, **kw), ref(images, **kw)
    assert torch.equal(a.pose_enc, b.pose_enc) and torch.equal(a.depth, b.depth)
    assert low.camera_head.embed_pose.weight.dtype == torch.bfloat16  # put back after use
    assert low.camera_head.trunk_norm.weight.dtype == torch.float32  # not a matmul weight
    assert compute_in_float32(low.camera_head) is low.camera_head  # idempotent


# --- the 8 GB profile ----------------------------------------------------------------


def _yaml(name: str) -> dict:
    return yaml.safe_load((ROOT / 'config' / name).read_text())['/**']['ros__parameters']


def test_8gb_profile_is_an_overlay_of_changed_values_alone_or_after_the_main_file():
    main, small = _yaml('lingbot.yaml'), _yaml('lingbot_8gb.yaml')
    defaults = parse({})
    assert all(getattr(parse(small), k) != getattr(defaults, k) for k in small), small
    alone, after = parse(small), parse({**main, **small})  # the node's two ways to load it
    assert alone == after and alone.sliding_window == 64 and alone.image_size == 518
    assert EngineConfig.from_parameters(alone, cuda_available=True).dtype == 'bfloat16'


def test_8gb_profile_fits_8_gib_at_294x518_by_estimate():
    from lingbot_ros.ros.params import stream_config
    params = parse(_yaml('lingbot_8gb.yaml'))  # exactly what the node builds from the file
    ecfg = EngineConfig.from_parameters(params, cuda_available=True)
    scfg = stream_config(params)
    assert ecfg.expandable_segments and scfg.max_window_frames == 256
    est = estimate(ecfg, scfg, (720, 1280), backend='flashinfer', device_type='cuda')
    assert est.model_hw == (294, 518)
    assert est.total <= 7.5 * GIB, est.describe()  # room for the CUDA context on a real card
    assert dataclasses.replace(est, activations=0).total < est.total
    # the float8 cache is what lets the window be the default 64 there; in bf16 it is 48
    assert ecfg.kv_cache_dtype == KvCacheDtype.FLOAT8_E4M3 and scfg.sliding_window == 64
    bf16 = ecfg.replace(kv_cache_dtype=KvCacheDtype.AUTO)
    assert estimate(bf16, scfg, (720, 1280), backend='flashinfer',
                    device_type='cuda').total > 8 * GIB
    assert estimate(bf16, scfg.replace(sliding_window=48), (720, 1280), backend='flashinfer',
                    device_type='cuda').total <= 7.5 * GIB
    # without FlashInfer (a PyTorch attention path) the float8 profile still fits
    sdpa = estimate(ecfg, scfg, (720, 1280), backend='sdpa', device_type='cuda')
    assert sdpa.total <= 7.5 * GIB, sdpa.describe()


def test_float8_cache_read_by_pytorch_attention_costs_one_layer_upcast():
    # SDPA converts the visible float8 keys and values of one layer to the compute dtype;
    # FlashInfer reads them as stored. The release grid 294x518 has 777 patches per frame.
    ecfg = EngineConfig(preset='release', device='cuda', dtype='bfloat16',
                        kv_cache_dtype=KvCacheDtype.FLOAT8_E4M3)
    scfg = StreamConfig(scale_frames=8, sliding_window=64, image_size=518,
                        max_window_frames=256)
    upcast = memory.fp8_upcast_bytes(ModelConfig.preset('release'), scfg, (294, 518),
                                     torch.bfloat16)
    assert upcast == 2 * ((8 + 64 + 1) * 777 + 256 * 6) * 16 * 64 * 2
    fi = estimate(ecfg, scfg, (720, 1280), backend='flashinfer', device_type='cuda')
    sd = estimate(ecfg, scfg, (720, 1280), backend='sdpa', device_type='cuda')
    # it adds to the peak inside a block: the depth head may still peak higher in a call
    assert 0 <= sd.activations - fi.activations <= upcast
    assert 0 < sd.graph_pools - fi.graph_pools <= upcast
    bf = estimate(ecfg.replace(kv_cache_dtype=KvCacheDtype.AUTO), scfg, (720, 1280),
                  backend='sdpa', device_type='cuda')
    assert bf.activations == fi.activations  # a bf16 cache is read as it is by both
