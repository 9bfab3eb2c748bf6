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
known depth scale), the weight recipe on its statistics and seeding, ``ours-shipped`` on
being the parameter table's defaults (and following them when they change), and the whole
script end to end with our runs over a handful of synthetic images (no reference, no
network).
"""

import dataclasses
import json
import math
import pathlib
import sys

import numpy as np

import pytest

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'benchmarks'))  # the script and its modules, as it runs
import bf16_drift  # noqa: E402,I100
from drift import comparison, images, layer_trace, ours, runs, weights  # noqa: E402


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
    order = images.ping_pong(48, 140)
    assert order[:48] == list(range(48))
    assert order[48:94] == list(range(46, 0, -1))
    assert order[94:] == list(range(46))
    assert all(a != b for a, b in zip(order, order[1:]))
    assert runs.Settings().evictions == 68
    assert runs.Settings().first_evicting_frame == 72
    assert images.ping_pong(1, 3) == [0, 0, 0]


@pytest.mark.parametrize('deg', [1e-4, 0.157, 10.0, 90.0, 179.0])
def test_rotation_angle_of_a_known_rotation(deg):
    """A rotation by a known angle measures as that angle, itself as zero."""
    axis = [0.3, -0.5, 0.8]
    qa = np.stack([_quat([1, 2, 3], 25.0)])
    qb = np.stack([_quat(axis, deg, scale=0.37)])  # the length of q does not matter
    ra, rb = comparison.quaternion_matrices(qa), comparison.quaternion_matrices(qb)
    rel = comparison.quaternion_matrices(np.stack([_quat(axis, deg)]))
    got = comparison.rotation_angle_deg(ra, ra @ rel)
    assert got[0] == pytest.approx(deg, rel=1e-9, abs=1e-10)
    assert comparison.rotation_angle_deg(rb, rb)[0] == pytest.approx(0.0, abs=1e-12)
    from_identity = comparison.rotation_angle_deg(np.eye(3)[None], rb)[0]
    assert from_identity == pytest.approx(deg, rel=1e-9, abs=1e-10)


def test_compare_is_zero_against_itself_and_exact_on_known_errors():
    """A run against itself has no error; a known shift and depth scale are measured exactly."""
    rng = np.random.default_rng(0)
    run = {'pose_enc': _encodings(rng, 6),
           'depth': rng.uniform(0.5, 3.0, size=(6, 4, 5)).astype(np.float32)}
    same = comparison.compare(run, run, first_evicting=3)['summary']
    for key in ('rotation_mean_deg', 'rotation_max_deg', 'rotation_mean_deg_evicting',
                'translation_mean', 'translation_max', 'depth_median_pct', 'depth_p90_pct',
                'fov_max_rad', 'pose_enc_max_abs'):
        assert same[key] == 0.0, key
    moved = {'pose_enc': run['pose_enc'].copy(), 'depth': run['depth'] * np.float32(1.01)}
    moved['pose_enc'][:, :3] += np.float32([0.0, 0.3, 0.4])  # 0.5 away
    moved['pose_enc'][:, 8] += np.float32(0.01)
    out = comparison.compare(moved, run, first_evicting=3)
    s = out['summary']
    assert s['rotation_max_deg'] == pytest.approx(0.0, abs=1e-12)
    assert s['translation_mean'] == pytest.approx(0.5, abs=1e-6)
    assert s['depth_median_pct'] == pytest.approx(1.0, abs=1e-4)
    assert s['depth_p90_pct'] == pytest.approx(1.0, abs=1e-4)
    assert s['fov_max_rad'] == pytest.approx(0.01, abs=1e-6)
    assert len(out['per_frame']['rotation_deg']) == 6


def test_weight_recipe_is_seeded_and_has_its_statistics():
    """The drawn weights follow the recipe, have our model's keys and repeat for a seed."""
    plan = weights.weight_plan('tiny')
    from lingbot_ros.model.checkpoint import load_model
    from lingbot_ros.model.config import ModelConfig
    model = load_model(ModelConfig.preset('tiny'), None)
    assert [s.key for s in plan] == list(model.state_dict())
    assert {s.key: s.draw for s in plan} == weights.categories(model)
    a, b = weights.draw_weights(plan, 5), weights.draw_weights(plan, 5)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a[plan[0].key], weights.draw_weights(plan, 6)[plan[0].key])

    def pooled(kind):
        vals = torch.cat([a[s.key].flatten() for s in plan
                          if s.draw is kind and not s.key.startswith(weights.POSE_LAST_LAYER)])
        return float(vals.mean()), float(vals.std())
    assert pooled(weights.Draw.NORM) == pytest.approx((1.0, 0.1), abs=0.01)
    assert pooled(weights.Draw.LAYER_SCALE) == pytest.approx((0.1, 0.02), abs=0.003)
    assert pooled(weights.Draw.BIAS) == pytest.approx((0.0, 0.02), abs=0.003)
    assert pooled(weights.Draw.OTHER) == pytest.approx((0.0, 0.5), abs=0.05)
    big = max((s for s in plan if s.draw is weights.Draw.MATRIX), key=lambda s: math.prod(s.shape))
    assert float(a[big.key].std()) == pytest.approx(big.fan_in ** -0.5, rel=0.05)
    bias = a[f'{weights.POSE_LAST_LAYER}.bias']
    assert bias.shape == (9,)
    assert (bias[-3:] - torch.tensor([0.25, 0.3, 0.3])).abs().max() < 0.1
    weight = a[f'{weights.POSE_LAST_LAYER}.weight']
    assert float(weight.std()) == pytest.approx(0.1 * weight.shape[1] ** -0.5, rel=0.2)


def _tiny(tmp_path):
    """Return tiny CPU settings, a weights file of the recipe and seven frames."""
    from safetensors.torch import save_file
    settings = runs.Settings(preset='tiny', frames=7, scale_frames=2, sliding_window=2,
                             camera_iterations=2, image_size=42, device='cpu')
    checkpoint = tmp_path / 'w.safetensors'
    save_file(weights.draw_weights(weights.weight_plan('tiny'), 0), str(checkpoint))
    frames = torch.rand(7, 3, 28, 42, generator=torch.Generator().manual_seed(0))
    return settings, checkpoint, frames


def test_our_runs_on_the_tiny_preset(tmp_path):
    """Our float32 and bf16 runs stream a few frames; bf16 drifts, but not wildly."""
    settings, checkpoint, frames = _tiny(tmp_path)
    fp32, facts = ours.run_ours(runs.RunKind.OURS_FP32, settings, checkpoint, frames)
    assert facts['evictions'] == settings.evictions == 3
    assert fp32['pose_enc'].shape == (7, 9) and fp32['depth'].shape == (7, 28, 42)
    bf16, facts = ours.run_ours(runs.RunKind.OURS_BF16, settings, checkpoint, frames)
    assert facts['dtype'] == 'bfloat16' and facts['backend'] == 'sdpa'
    s = comparison.compare(bf16, fp32, settings.first_evicting_frame)['summary']
    assert 0 < s['rotation_mean_deg'] < 30 and 0 < s['depth_median_pct'] < 30


def _with_defaults(monkeypatch, **defaults):
    """Give the node's parameter table other defaults for one test."""
    from lingbot_ros.streaming import parameters
    specs = tuple(dataclasses.replace(s, default=defaults.get(s.name, s.default))
                  for s in parameters.SPECS)
    assert set(defaults) <= {s.name for s in specs}
    monkeypatch.setattr(parameters, 'SPECS', specs)
    monkeypatch.setattr(parameters, 'SPEC', {s.name: s for s in specs})


@pytest.mark.parametrize('device', ['cpu', 'cuda'])
def test_the_shipped_run_is_the_parameter_tables_defaults(device):
    """ours-shipped: every engine parameter is the table's default, but what the bench sets."""
    from lingbot_ros.streaming import parameters
    settings = runs.Settings(preset='tiny', device=device, seed=3)
    cfg = runs.engine_config(runs.RunKind.OURS_SHIPPED, settings, pathlib.Path('w.safetensors'))
    decided = {'checkpoint': 'w.safetensors', 'preset': 'tiny', 'device': device}
    for spec in parameters.targeted(parameters.Target.ENGINE):
        if spec.name in decided:
            assert getattr(cfg, spec.name) == decided[spec.name]
        elif spec.name == 'dtype':  # 'auto' as the node resolves it on that device
            assert cfg.dtype == parameters.resolved_dtype(spec.default, device, False)
        else:
            want = parameters.check_one(spec.name, spec.default)
            want = None if spec.empty_is_none and want == '' else want
            assert getattr(cfg, spec.name) == want, spec.name
    assert cfg.seed == 3
    assert runs.reduced_precision(runs.RunKind.OURS_SHIPPED, settings) == \
        (cfg.dtype != 'float32')
    assert runs.skip_reason(runs.RunKind.OURS_SHIPPED, settings, None) is None


def test_the_shipped_run_follows_the_table_and_the_named_runs_do_not(tmp_path, monkeypatch):
    """Other defaults make another ours-shipped (and spoil its resume); named runs stay."""
    from drift import children
    from lingbot_ros.streaming.config import HeadDtype, KvCacheDtype
    cuda = runs.Settings(preset='tiny', device='cuda')
    shipped, named = runs.RunKind.OURS_SHIPPED, runs.RunKind.OURS_BF16_HEADS16_COMPILED
    before = runs.engine_config(shipped, cuda, None)
    fixed = runs.engine_config(named, cuda, None)
    facts = tmp_path / 'ours-shipped.json'
    facts.write_text(json.dumps({'engine_config': runs.config_fields(
        runs.engine_config(shipped, cuda, tmp_path / 'weights.safetensors'))}))
    assert children.reusable(shipped, cuda, tmp_path, facts)

    _with_defaults(monkeypatch, head_dtype='compute', torch_compile=not before.torch_compile,
                   cuda_graphs=not before.cuda_graphs, kv_cache_dtype='float8_e4m3')
    after = runs.engine_config(shipped, cuda, None)
    assert after.head_dtype is HeadDtype.COMPUTE and after.kv_cache_dtype is \
        KvCacheDtype.FLOAT8_E4M3
    assert after.torch_compile is not before.torch_compile
    assert after.cuda_graphs is not before.cuda_graphs
    assert runs.engine_config(named, cuda, None) == fixed
    assert not children.reusable(shipped, cuda, tmp_path, facts)
    assert children.reusable(named, cuda, tmp_path, facts)
    cpu = runs.Settings(preset='tiny', device='cpu')
    assert 'CUDA only' in runs.skip_reason(shipped, cpu, None)  # a float8 cache by default

    _with_defaults(monkeypatch, dtype='float32')
    assert runs.engine_config(shipped, cuda, None).dtype == 'float32'
    assert not runs.reduced_precision(shipped, cuda)
    assert runs.reduced_precision(runs.RunKind.OURS_BF16, cuda)


def test_the_shipped_run_on_the_cpu(tmp_path):
    """On a CPU the shipped configuration computes in float32: ours-fp32's numbers."""
    settings, checkpoint, frames = _tiny(tmp_path)
    fp32, _ = ours.run_ours(runs.RunKind.OURS_FP32, settings, checkpoint, frames)
    shipped, facts = ours.run_ours(runs.RunKind.OURS_SHIPPED, settings, checkpoint, frames)
    cfg = runs.shipped_config(settings, checkpoint)
    assert facts['engine_config'] == runs.config_fields(cfg)
    assert facts['dtype'] == cfg.dtype == 'float32' and facts['backend'] == 'sdpa'
    assert facts['head_dtype'] == cfg.head_dtype.value and facts['evictions'] == 3
    s = comparison.compare(shipped, fp32, settings.first_evicting_frame)['summary']
    assert s['pose_enc_max_abs'] < 1e-5 and s['depth_median_pct'] < 1e-3


TINY = ['--preset', 'tiny', '--frames', '6', '--scale-frames', '2', '--sliding-window', '2',
        '--image-size', '42', '--device', 'cpu', '--camera-iterations', '2']


def _frames(tmp_path):
    """Write four small synthetic frames; return their folder."""
    from PIL import Image
    folder = tmp_path / 'frames'
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (36, 64, 3), dtype=np.uint8)).save(
            folder / f'{i:06d}.png')
    return folder


def test_whole_script_with_our_runs(tmp_path):
    """Run main() on synthetic frames: our two CPU runs compared, the others skipped."""
    out = tmp_path / 'out'
    rc = bf16_drift.main(TINY + ['--images', str(_frames(tmp_path)),
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
    names = layer_trace.traced_modules('tiny')
    assert [r['module'] for r in result['trace']] == names
    assert all(0 < r['ours-bf16'] < 1 for r in result['trace'])  # bf16 rounding, no more
    assert 'layer trace' in text and names[-1] in text


def test_whole_script_with_the_shipped_run(tmp_path, capsys):
    """main() with ours-shipped: compared, its configuration in the facts and notes, resumed."""
    out, work = tmp_path / 'out', (tmp_path / 'work').resolve()
    args = TINY + ['--images', str(_frames(tmp_path)), '--runs', 'ours-shipped,ours-fp32',
                   '--work', str(work), '--out', str(out)]
    assert bf16_drift.main(args) == 0
    result = json.loads((out / 'bf16_drift.json').read_text())
    assert [(c['run'], c['against']) for c in result['comparisons']] == \
        [('ours-shipped', 'ours-fp32')]
    settings = runs.Settings(**result['settings'])
    cfg = runs.shipped_config(settings, work / 'weights.safetensors')
    facts = result['runs']['ours-shipped']['facts']
    assert facts['engine_config'] == runs.config_fields(cfg) and facts['dtype'] == 'float32'
    assert result['comparisons'][0]['summary']['pose_enc_max_abs'] < 1e-5
    note = [n for n in result['notes'] if n.startswith('ours-shipped: ')]
    assert len(note) == 1 and f'head_dtype {cfg.head_dtype.value}' in note[0]
    text = (out / 'bf16_drift.txt').read_text()
    assert 'ours-shipped         ours-fp32' in text and note[0] in text
    capsys.readouterr()
    assert bf16_drift.main(args + ['--resume']) == 0
    again = json.loads((out / 'bf16_drift.json').read_text())
    assert again['runs']['ours-shipped']['resumed'] and again['runs']['ours-fp32']['resumed']
    assert '[ours-shipped] reusing' in capsys.readouterr().out


def test_first_call_trace_keeps_the_first_call_only():
    block = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(block)
    trace = layer_trace.FirstCallTrace(model, ['0', 'missing'])
    first = torch.randn(3, 14, 4)
    model(first)
    model(torch.randn(3, 14, 4))
    kept = trace.close()
    assert trace.missing == ['missing'] and list(kept) == ['trace/0']
    want = block(first).detach().reshape(-1, 4)[::layer_trace.TRACE_STRIDE].numpy()
    np.testing.assert_array_equal(kept['trace/0'], want)
    model(first)
    assert len(trace.outputs) == 1  # the hooks are gone
    assert layer_trace.relative_distance(want, want) == 0
    assert math.isnan(layer_trace.relative_distance(want, want[:1]))
    assert layer_trace.relative_distance(2 * want, want) == pytest.approx(1.0)
