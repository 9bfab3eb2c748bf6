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
``benchmarks/bf16_drift.py`` on the CPU: our side only, the tiny preset, a few frames.

The comparison maths is checked on known cases (a run against itself, a known rotation, a
known depth scale), the weight recipe on its statistics and seeding, and the whole script
end to end with two of our runs over a handful of synthetic images (no reference, no
network).
"""

import importlib.util
import json
import math
import pathlib
import sys

import numpy as np

import pytest

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location('bf16_drift', ROOT / 'benchmarks' / 'bf16_drift.py')
drift = importlib.util.module_from_spec(_spec)
sys.modules['bf16_drift'] = drift  # dataclasses look their module up
_spec.loader.exec_module(drift)


def _quat(axis, deg, scale=1.0):
    axis = np.asarray(axis, np.float64) / np.linalg.norm(axis)
    half = math.radians(deg) / 2
    return scale * np.concatenate([math.sin(half) * axis, [math.cos(half)]])


def _encodings(rng, frames):
    enc = rng.normal(size=(frames, 9))
    enc[:, 6] += 2.0
    enc[:, 7:] = np.abs(enc[:, 7:]) + 0.5
    return enc.astype(np.float32)


def test_ping_pong_order_and_evictions():
    """Ping-pong order 0..47, 46..1, 0..; 140 frames give 68 evictions."""
    order = drift.ping_pong(48, 140)
    assert order[:48] == list(range(48))
    assert order[48:94] == list(range(46, 0, -1))
    assert order[94:] == list(range(46))
    assert all(a != b for a, b in zip(order, order[1:]))
    assert drift.Settings().evictions == 68
    assert drift.Settings().first_evicting_frame == 72
    assert drift.ping_pong(1, 3) == [0, 0, 0]


@pytest.mark.parametrize('deg', [1e-4, 0.157, 10.0, 90.0, 179.0])
def test_rotation_angle_of_a_known_rotation(deg):
    """A rotation by a known angle measures as that angle, itself as zero."""
    axis = [0.3, -0.5, 0.8]
    qa = np.stack([_quat([1, 2, 3], 25.0)])
    qb = np.stack([_quat(axis, deg, scale=0.37)])  # the length of q does not matter
    ra, rb = drift.quaternion_matrices(qa), drift.quaternion_matrices(qb)
    rel = drift.quaternion_matrices(np.stack([_quat(axis, deg)]))
    got = drift.rotation_angle_deg(ra, ra @ rel)
    assert got[0] == pytest.approx(deg, rel=1e-9, abs=1e-10)
    assert drift.rotation_angle_deg(rb, rb)[0] == pytest.approx(0.0, abs=1e-12)
    from_identity = drift.rotation_angle_deg(np.eye(3)[None], rb)[0]
    assert from_identity == pytest.approx(deg, rel=1e-9, abs=1e-10)


def test_compare_is_zero_against_itself_and_exact_on_known_errors():
    """A run against itself has no error; a known shift and depth scale are measured exactly."""
    rng = np.random.default_rng(0)
    run = {'pose_enc': _encodings(rng, 6),
           'depth': rng.uniform(0.5, 3.0, size=(6, 4, 5)).astype(np.float32)}
    same = drift.compare(run, run, first_evicting=3)['summary']
    for key in ('rotation_mean_deg', 'rotation_max_deg', 'rotation_mean_deg_evicting',
                'translation_mean', 'translation_max', 'depth_median_pct', 'depth_p90_pct',
                'fov_max_rad', 'pose_enc_max_abs'):
        assert same[key] == 0.0, key
    moved = {'pose_enc': run['pose_enc'].copy(), 'depth': run['depth'] * np.float32(1.01)}
    moved['pose_enc'][:, :3] += np.float32([0.0, 0.3, 0.4])  # 0.5 away
    moved['pose_enc'][:, 8] += np.float32(0.01)
    out = drift.compare(moved, run, first_evicting=3)
    s = out['summary']
    assert s['rotation_max_deg'] == pytest.approx(0.0, abs=1e-12)
    assert s['translation_mean'] == pytest.approx(0.5, abs=1e-6)
    assert s['depth_median_pct'] == pytest.approx(1.0, abs=1e-4)
    assert s['depth_p90_pct'] == pytest.approx(1.0, abs=1e-4)
    assert s['fov_max_rad'] == pytest.approx(0.01, abs=1e-6)
    assert len(out['per_frame']['rotation_deg']) == 6


def test_weight_recipe_is_seeded_and_has_its_statistics():
    """The drawn weights follow the recipe, have our model's keys and repeat for a seed."""
    plan = drift.weight_plan('tiny')
    from lingbot_ros.model.checkpoint import load_model
    from lingbot_ros.model.config import ModelConfig
    model = load_model(ModelConfig.preset('tiny'), None)
    assert [s.key for s in plan] == list(model.state_dict())
    assert {s.key: s.draw for s in plan} == drift.categories(model)
    a, b = drift.draw_weights(plan, 5), drift.draw_weights(plan, 5)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a[plan[0].key], drift.draw_weights(plan, 6)[plan[0].key])

    def pooled(kind):
        vals = torch.cat([a[s.key].flatten() for s in plan
                          if s.draw is kind and not s.key.startswith(drift.POSE_LAST_LAYER)])
        return float(vals.mean()), float(vals.std())
    assert pooled(drift.Draw.NORM) == pytest.approx((1.0, 0.1), abs=0.01)
    assert pooled(drift.Draw.LAYER_SCALE) == pytest.approx((0.1, 0.02), abs=0.003)
    assert pooled(drift.Draw.BIAS) == pytest.approx((0.0, 0.02), abs=0.003)
    assert pooled(drift.Draw.OTHER) == pytest.approx((0.0, 0.5), abs=0.05)
    big = max((s for s in plan if s.draw is drift.Draw.MATRIX), key=lambda s: math.prod(s.shape))
    assert float(a[big.key].std()) == pytest.approx(big.fan_in ** -0.5, rel=0.05)
    bias = a[f'{drift.POSE_LAST_LAYER}.bias']
    assert bias.shape == (9,)
    assert (bias[-3:] - torch.tensor([0.25, 0.3, 0.3])).abs().max() < 0.1
    weight = a[f'{drift.POSE_LAST_LAYER}.weight']
    assert float(weight.std()) == pytest.approx(0.1 * weight.shape[1] ** -0.5, rel=0.2)


def test_our_runs_on_the_tiny_preset(tmp_path):
    """Our float32 and bf16 runs stream a few frames; bf16 drifts, but not wildly."""
    from safetensors.torch import save_file
    settings = drift.Settings(preset='tiny', frames=7, scale_frames=2, sliding_window=2,
                              camera_iterations=2, image_size=42, device='cpu')
    weights = tmp_path / 'w.safetensors'
    save_file(drift.draw_weights(drift.weight_plan('tiny'), 0), str(weights))
    gen = torch.Generator().manual_seed(0)
    images = torch.rand(7, 3, 28, 42, generator=gen)
    fp32, facts = drift.run_ours(drift.RunKind.OURS_FP32, settings, weights, images)
    assert facts['evictions'] == settings.evictions == 3
    assert fp32['pose_enc'].shape == (7, 9) and fp32['depth'].shape == (7, 28, 42)
    bf16, facts = drift.run_ours(drift.RunKind.OURS_BF16, settings, weights, images)
    assert facts['dtype'] == 'bfloat16' and facts['backend'] == 'sdpa'
    s = drift.compare(bf16, fp32, settings.first_evicting_frame)['summary']
    assert 0 < s['rotation_mean_deg'] < 30 and 0 < s['depth_median_pct'] < 30


def test_whole_script_with_our_runs(tmp_path):
    """Run main() on synthetic frames: our two CPU runs compared, the others skipped."""
    from PIL import Image
    folder = tmp_path / 'frames'
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (36, 64, 3), dtype=np.uint8)).save(
            folder / f'{i:06d}.png')
    out = tmp_path / 'out'
    rc = drift.main(['--preset', 'tiny', '--frames', '6', '--scale-frames', '2',
                     '--sliding-window', '2', '--image-size', '42', '--device', 'cpu',
                     '--camera-iterations', '2', '--images', str(folder),
                     '--runs', 'ours-fp32,ours-bf16,ours-bf16-fp8cache,ref-bf16',
                     '--trace', '--ours-commit', 'abc123', '--out', str(out)])
    assert rc == 0
    result = json.loads((out / 'bf16_drift.json').read_text())
    assert result['images']['model_hw'] == [28, 42]
    assert result['evictions'] == 2 and result['baseline'] == 'ours-fp32'
    assert result['versions']['ours_commit'] == 'abc123'
    assert 'CUDA' in result['runs']['ours-bf16-fp8cache']['skipped']
    assert 'reference' in result['runs']['ref-bf16']['skipped']
    assert [(c['run'], c['against']) for c in result['comparisons']] == \
        [('ours-bf16', 'ours-fp32')]
    text = (out / 'bf16_drift.txt').read_text()
    assert 'ours-bf16' in text and 'skipped' in text
    names = drift.traced_modules('tiny')
    assert [r['module'] for r in result['trace']] == names
    assert all(0 < r['ours-bf16'] < 1 for r in result['trace'])  # bf16 rounding, no more
    assert 'layer trace' in text and names[-1] in text


def test_first_call_trace_keeps_the_first_call_only():
    block = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(block)
    trace = drift.FirstCallTrace(model, ['0', 'missing'])
    first = torch.randn(3, 14, 4)
    model(first)
    model(torch.randn(3, 14, 4))
    kept = trace.close()
    assert trace.missing == ['missing'] and list(kept) == ['trace/0']
    want = block(first).detach().reshape(-1, 4)[::drift.TRACE_STRIDE].numpy()
    np.testing.assert_array_equal(kept['trace/0'], want)
    model(first)
    assert len(trace.outputs) == 1  # the hooks are gone
    assert drift.relative_distance(want, want) == 0
    assert math.isnan(drift.relative_distance(want, want[:1]))
    assert drift.relative_distance(2 * want, want) == pytest.approx(1.0)
