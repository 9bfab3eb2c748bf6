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
``lingbot-ros-bench --profile`` on the CPU with the tiny model.

The profile has two parts: the whole run, and the frames after the window is full (what the
steady wall time is compared with). On the CPU there are no kernels, so the ops the
profiler saw stand in for them: the steady part must have started where the window fills
and seen the streamed frames' ops.
"""

import json
from pathlib import Path

from lingbot_ros.tools import bench


def test_profile_has_a_steady_part_from_where_the_window_fills(tmp_path, capsys):
    out = tmp_path / 'bench.json'
    assert bench.main(['--preset', 'tiny', '--device', 'cpu', '--dtype', 'float32',
                       '--frames', '12', '--scale-frames', '3', '--sliding-window', '4',
                       '--height', '28', '--width', '42', '--profile', '--out', str(out)]) == 0
    prof = json.loads(out.read_text())['float32']['profile']
    assert prof['steady_frames'] == 12 - (3 + 4)
    linear = {r['name']: r['calls_per_frame'] for r in prof['steady_top']}.get('aten::linear')
    assert linear is not None and linear > 0
    assert 'steady (frames 7-12, window full)' in capsys.readouterr().out


def test_kernels_sum_into_families_by_name_with_the_rest_as_other():
    rows = [  # names as a steady H100 frame's profile gives them: (name, ms, launches)
        ('void flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop<', 14.7, 23),
        ('_merge_kernel', 0.1, 23),
        ('cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64', 0.7, 46),
        ('nvjet_sm90_tst_128x64_64x8_1x2_h_bz_bias_TNT', 1.3, 69),
        ('sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc', 0.1, 5),
        ('triton_per_fused__to_copy_native_layer_norm_0', 0.25, 69),
        ('void at::native::index_elementwise_kernel<128, 4, at::native::index_copy', 0.2, 77),
        ('void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor', 0.01, 2),
    ]
    families = bench.kernel_families(rows)
    assert list(families)[0] == 'attention over the cache'
    assert families['attention over the cache']['launches'] == 46
    assert abs(families['attention over the cache']['device_ms'] - 14.8) < 1e-9
    assert families['attention within a frame']['launches'] == 46
    assert families['matrix products and convolutions']['launches'] == 74
    assert families['compiled norms and elementwise']['launches'] == 69
    assert families['copies and indexing']['launches'] == 77
    assert families['other'] == {'device_ms': 0.01, 'launches': 2}
    assert sum(f['launches'] for f in families.values()) == sum(n for *_, n in rows)


def test_run_once_reports_frames_as_they_land():
    from lingbot_ros.streaming.config import EngineConfig, StreamConfig
    from lingbot_ros.streaming.engine import Engine
    engine = Engine.load(EngineConfig(preset='tiny', device='cpu', dtype='float32'))
    stream = StreamConfig(scale_frames=2, sliding_window=3, max_window_frames=8)
    seen = []
    bench.run_once(engine, stream, bench.synthetic_stack(6, 28, 42), on_progress=seen.append)
    assert seen == sorted(seen) and seen[-1] == 6 and 2 in seen  # the scale call lands as one


def test_the_bench_runs_the_parameters_with_the_release_structure_where_they_say_auto():
    from lingbot_ros.streaming.config import HeadDtype
    shipped = Path(__file__).resolve().parents[2] / 'config' / 'lingbot.yaml'
    args = bench._parser().parse_args(['--params-file', str(shipped)])
    cfg = bench.engine_settings(args)
    assert cfg.preset == 'release'  # 'auto' without a checkpoint would be tiny
    assert cfg.torch_compile and cfg.head_dtype is HeadDtype.FLOAT16  # as shipped
    args = bench._parser().parse_args(['--params-file', str(shipped), '--preset', 'tiny',
                                       '--no-compile', '--head-dtype', 'float32'])
    cfg = bench.engine_settings(args)
    assert cfg.preset == 'tiny' and not cfg.torch_compile
    assert cfg.head_dtype is HeadDtype.FLOAT32
