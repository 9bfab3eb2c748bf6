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
``benchmarks/side_by_side.py`` without a GPU.

The reference's printed summary is parsed from a sample written here; the command lines of
both settings are pinned; a folder that is not a checkout is refused with a clear message; and
the whole run is driven end to end with a stand-in profiler and a stand-in bench, once working
and once with the profiler failing on a missing module (recorded, ours still runs).
"""

import argparse
import json
from pathlib import Path
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / 'benchmarks'))  # the script and its modules, as it runs
import commits  # noqa: E402,I100
import side_by_side as sbs  # noqa: E402
from sidebyside import processes, report, runs, settings  # noqa: E402
from sidebyside import reference as theirs  # noqa: E402

# A summary in the reference profiler's printed layout; the figures are made up.
SAMPLE = textwrap.dedent("""\
    ========================================================================
    GCTStream FPS profiling  |  378\u00d7504  |  300 frames  |  sw=64  |  kf_int=2
      backends=['flashinfer']  dtypes=['bf16']
    ========================================================================
    Generating 300 synthetic images on CUDA...
      Warmup eager (scale + 10 streaming)...
      Compiling hot modules...
      Phase 1: 212.5 ms for 8 scale frames

      [flashinfer_bf16]  (300 total frames: 8 scale + 292 streaming)
        \u2500\u2500 Global FPS \u2500\u2500\u2500\u2500
          total time: 15.26 s  (212.5 ms phase1 + 15047.5 ms phase2)
          per frame :  50.87 ms  \u2192   19.66 FPS
        \u2500\u2500 Windowed FPS (\u00b130 streaming frames) \u2500\u2500
          frame    37 (10%):  47.25 ms  \u2192   21.16 FPS
          frame   154 (50%):  52.50 ms  \u2192   19.05 FPS
          frame   271 (90%):  53.10 ms  \u2192   18.83 FPS
        \u2500\u2500 FPS trace (every 100 global frames) \u2500\u2500
          frame   100:  19.20 FPS  (52.08 ms)
          frame   200:  18.90 FPS  (52.91 ms)

      Saved to /tmp/profile_results_378x504_300f_bf16.json
    """)

OURS_JSON = {'bfloat16': {'frames': 300, 'ms_per_frame_overall': 35.0, 'scale_call_ms': 90.0,
                          'stream_ms_median': 36.0, 'steady_ms_median': 42.0,
                          'steady_ms_p90': 44.0, 'steady_fps': 23.8, 'gpu': 'NVIDIA H200',
                          'backend': 'flashinfer', 'cuda_graphs': 'on',
                          'stats': {'ignored': 1}}}


def test_reference_summary_is_parsed():
    parsed = theirs.parse_reference_output(SAMPLE)
    assert parsed['header'] == {'height': 378, 'width': 504, 'frames': 300,
                                'sliding_window': 64, 'keyframe_interval': 2}
    run = parsed['runs']['flashinfer_bf16']
    assert run['ms_per_frame_overall'] == 50.87
    assert run['fps_overall'] == 19.66
    assert (run['total_frames'], run['scale_frames'], run['streaming_frames']) == (300, 8, 292)
    assert run['phase1_ms'] == 212.5 and run['phase2_ms'] == 15047.5
    assert (run['ms_at_10pct'], run['ms_at_50pct'], run['ms_at_90pct']) == (47.25, 52.5, 53.1)
    assert run['frame_at_50pct'] == 154


def test_two_runs_are_kept_apart_and_a_crash_parses_to_nothing():
    second = SAMPLE.split('\n  [flashinfer_bf16]')[1].replace('50.87', '99.50')
    both = SAMPLE + '\n  [sdpa_bf16]' + second
    runs = theirs.parse_reference_output(both)['runs']
    assert runs['flashinfer_bf16']['ms_per_frame_overall'] == 50.87
    assert runs['sdpa_bf16']['ms_per_frame_overall'] == 99.5
    crash = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'einops'\n"
    assert theirs.parse_reference_output(crash) == {'header': {}, 'runs': {}}


def test_command_lines_for_both_settings(tmp_path):
    common = ['--backend', 'flashinfer', '--dtype', 'bf16', '--img_h', '378', '--img_w', '504',
              '--num_frames', '300', '--sliding_window', '64']
    assert theirs.reference_command('py', 'default', 300) == (
        ['py', 'gct_profile.py'] + common
        + ['--camera_num_iterations', '4', '--keyframe_interval', '1'])
    assert theirs.reference_command('py', 'kf2_it1', 300, fa3=True) == (
        ['py', 'gct_profile.py'] + common
        + ['--camera_num_iterations', '1', '--keyframe_interval', '2', '--fa3'])
    out = tmp_path / 'o.json'
    ours = ['py', '-m', 'lingbot_ros.tools.bench', '--preset', 'release', '--device', 'cuda',
            '--dtype', 'bfloat16', '--backend', 'auto', '--frames', '150', '--height', '378',
            '--width', '504', '--scale-frames', '8', '--sliding-window', '64']
    assert runs.ours_command('py', 'default', 150, out) == (
        ours + ['--keyframe-interval', '1', '--camera-iterations', '4', '--out', str(out)])
    assert runs.ours_command('py', 'kf2_it1', 150, out) == (
        ours + ['--keyframe-interval', '2', '--camera-iterations', '1', '--out', str(out)])


def test_ours_command_is_accepted_by_our_bench_parser():
    from lingbot_ros.tools import bench
    for setting in settings.SETTINGS:
        cmd = runs.ours_command('py', setting, 300, Path('x.json'))
        args = bench._parser().parse_args(cmd[3:])
        assert args.keyframe_interval == settings.SETTINGS[setting]['keyframe_interval']
        assert args.camera_iterations == settings.SETTINGS[setting]['camera_iterations']
        assert (args.frames, args.height, args.width) == (300, 378, 504)
        assert not args.compile
        compiled = runs.ours_command('py', setting, 300, Path('x.json'), compile_blocks=True)
        assert bench._parser().parse_args(compiled[3:]).compile
        for heads in ('compute', 'float16'):
            low = runs.ours_command('py', setting, 300, Path('x.json'), head_dtype=heads)
            assert bench._parser().parse_args(low[3:]).head_dtype == heads


def fake_reference(root: Path, body: str = '') -> Path:
    """Write a stand-in checkout: the files the check looks for and a tiny profiler."""
    for f in theirs.REFERENCE_FILES[1:]:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text('# stand-in\n')
    flags = ''.join(f"p.add_argument('{f}')\n" for f in theirs.PROFILER_FLAGS)
    (root / 'gct_profile.py').write_text(
        '# stand-in for the GCTStream profiler\nimport argparse, sys\n'
        'p = argparse.ArgumentParser()\n' + flags
        + "p.add_argument('--fa3', action='store_true')\nargs = p.parse_args()\n" + body)
    return root


def test_not_a_checkout_is_refused_clearly(tmp_path):
    with pytest.raises(theirs.NotAReferenceCheckout, match='no such folder'):
        theirs.check_reference(tmp_path / 'nowhere')
    with pytest.raises(theirs.NotAReferenceCheckout, match='lacks gct_profile.py'):
        theirs.check_reference(tmp_path)
    bare = tmp_path / 'bare.git'
    subprocess.run(['git', 'init', '-q', '--bare', str(bare)], check=True)
    with pytest.raises(theirs.NotAReferenceCheckout, match='git directory without files'):
        theirs.check_reference(bare)
    ref = fake_reference(tmp_path / 'ref')
    assert theirs.check_reference(ref) == ref.resolve()
    text = (ref / 'gct_profile.py').read_text()
    (ref / 'gct_profile.py').write_text(text.replace("'--keyframe_interval'", "'--kf'"))
    with pytest.raises(theirs.NotAReferenceCheckout, match='--keyframe_interval'):
        theirs.check_reference(ref)
    rc = sbs.main(['--reference', str(tmp_path), '--out', str(tmp_path / 'out')])
    assert rc == 2 and not (tmp_path / 'out').exists()


def test_reference_commit_comes_from_a_commit_file_not_from_an_enclosing_repo(tmp_path):
    ref = fake_reference(tmp_path / 'ref')
    assert commits.reference_commit(ref) == 'unknown'
    (ref / 'COMMIT').write_text('4cd986009b9adeded8a4e740919221940dedeffe\n')
    assert commits.reference_commit(ref) == '4cd986009b9adeded8a4e740919221940dedeffe'
    assert commits.reference_commit(ref, 'abc') == 'abc'


def test_ratio_json_and_text(tmp_path):
    reference = dict(theirs.parse_reference_output(SAMPLE)['runs']['flashinfer_bf16'], ok=True)
    ours = dict(runs.parse_ours_json(OURS_JSON), ok=True)
    env = {'python': '3.12.3', 'torch': '2.11.0+cu130', 'cuda': '13.0',
           'flashinfer': '0.6.18.post1', 'gpu': 'NVIDIA H200'}
    commits = {'ours': {'commit': 'a' * 40, 'dirty': False}, 'reference': 'b' * 40}
    r = report.combine('kf2_it1', 300, reference, ours, env, commits, '2026-12-01T12:00:00+00:00')
    assert r['ratio_reference_over_ours'] == round(50.87 / 35.0, 4)
    assert r['ratio_mid_reference_over_ours_steady'] == round(52.5 / 42.0, 4)
    assert r['settings']['shortened'] is False
    assert r['settings']['keyframe_interval'] == 2 and r['settings']['camera_iterations'] == 1
    path = report.write_result(tmp_path, r)
    data = json.loads(path.read_text())
    assert path.name == 'side_by_side_kf2_it1.json'
    assert data['gpu'] == 'NVIDIA H200' and data['date'].startswith('2026-12-01')
    assert data['versions'] == {'python': '3.12.3', 'torch': '2.11.0+cu130', 'cuda': '13.0',
                                'flashinfer': '0.6.18.post1', 'nvidia_smi': None,
                                'ours': 'a' * 40, 'ours_dirty': False, 'reference': 'b' * 40}
    assert 'stats' not in data['ours']
    text = path.with_suffix('.txt').read_text()
    assert 'NVIDIA H200' in text and '50.87' in text and '35.00' in text and '1.453' in text
    assert 'FAILED' not in text and 'shortened' not in text
    missing = {'ok': False, 'error': 'missing Python module: x', 'tail': ['boom']}
    failed = report.combine('default', 120, missing, ours, env, commits, 'today')
    assert failed['ratio_reference_over_ours'] is None and failed['settings']['shortened']
    text = report.render_text(failed)
    assert 'reference FAILED: missing Python module: x' in text and '  | boom' in text
    assert '120 frames instead of 300' in text


def test_time_kept_for_ours():
    assert runs.plan_timeouts(570, 'reference', 2, 300, 150) == 270
    assert runs.plan_timeouts(100, 'reference', 1, 300, 150) == -50
    assert runs.plan_timeouts(100, 'ours', 0, 300, 150) == 100
    # a skipped run says what was left for it and why
    args = argparse.Namespace(python='py', frames=300, reference_backend='sdpa', fa3=False)
    ref = runs.run_reference(args, 'default', Path('.'), Path('x'), 15.0)
    assert not ref['ok'] and ref['error'].startswith('not run: 15 s of --budget-s left')


def test_a_hanging_program_is_killed_and_its_output_kept(tmp_path):
    log = tmp_path / 'x.log'
    t0 = time.monotonic()
    code = 'import time; print(42, flush=True); time.sleep(60)'
    res = processes.run_logged([sys.executable, '-c', code], tmp_path, processes.child_env(), log,
                               'hang', timeout=2)
    assert res['timed_out'] and res['returncode'] is None and time.monotonic() - t0 < 30
    assert '42' in res['output'] and 'timeout' in log.read_text()


FAKE_BENCH = textwrap.dedent("""\
    import json, sys
    a = sys.argv
    frames = int(a[a.index('--frames') + 1])
    row = {'frames': frames, 'ms_per_frame_overall': 40.0, 'steady_ms_median': 44.0,
           'gpu': 'Fake GPU', 'backend': 'flashinfer'}
    open(a[a.index('--out') + 1], 'w').write(json.dumps({'bfloat16': row}))
    print('fake bench done')
    """)


def _stand_ins(tmp_path: Path, profiler_body: str):
    ref = fake_reference(tmp_path / 'ref', profiler_body)
    (ref / 'COMMIT').write_text('c' * 40 + '\n')
    bench = tmp_path / 'fake_bench.py'
    bench.write_text(FAKE_BENCH)
    py = tmp_path / 'python'
    py.write_text(f'#!/bin/sh\ncase " $* " in *" lingbot_ros.tools.bench "*) '
                  f'exec {sys.executable} {bench} "$@";; esac\nexec {sys.executable} "$@"\n')
    py.chmod(0o755)
    return ref, py


def test_end_to_end_with_stand_ins(tmp_path):
    body = f'sys.stdout.write({SAMPLE!r})\n'
    ref, py = _stand_ins(tmp_path, body)
    out = tmp_path / 'out'
    rc = sbs.main(['--reference', str(ref), '--out', str(out), '--python', str(py),
                   '--frames', '300'])
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == [
        f'side_by_side_{s}.{e}' for s in ('default', 'kf2_it1') for e in ('json', 'log', 'txt')]
    r = json.loads((out / 'side_by_side_default.json').read_text())
    assert r['reference']['ok'] and r['ours']['ok']
    assert r['reference_ms_per_frame'] == 50.87 and r['ours_ms_per_frame'] == 40.0
    assert r['ratio_reference_over_ours'] == round(50.87 / 40.0, 4)
    assert r['versions']['reference'] == 'c' * 40
    assert r['reference']['command'].endswith(
        '--camera_num_iterations 4 --keyframe_interval 1')
    assert '--keyframe-interval 2 --camera-iterations 1' in json.loads(
        (out / 'side_by_side_kf2_it1.json').read_text())['ours']['command']
    log = (out / 'side_by_side_default.log').read_text()
    assert '===== reference default' in log and '===== ours default' in log
    assert 'per frame :  50.87 ms' in log and 'fake bench done' in log


def test_reference_failure_is_recorded_and_ours_still_runs(tmp_path):
    body = ("print('Generating images')\n"
            "raise ModuleNotFoundError(\"No module named 'flashinfer'\")\n")
    ref, py = _stand_ins(tmp_path, body)
    out = tmp_path / 'out'
    rc = sbs.main(['--reference', str(ref), '--out', str(out), '--python', str(py),
                   '--setting', 'kf2_it1', '--frames', '120'])
    assert rc == 1
    r = json.loads((out / 'side_by_side_kf2_it1.json').read_text())
    assert not r['reference']['ok'] and r['reference']['returncode'] == 1
    assert r['reference']['error'] == 'missing Python module: flashinfer'
    assert any('Generating images' in ln for ln in r['reference']['tail'])
    assert r['ours']['ok'] and r['ours']['ms_per_frame_overall'] == 40.0
    assert r['ratio_reference_over_ours'] is None and r['settings']['frames'] == 120
    assert 'reference FAILED' in (out / 'side_by_side_kf2_it1.txt').read_text()


def test_dry_run_prints_both_commands(tmp_path, capsys):
    ref = fake_reference(tmp_path / 'ref')
    assert sbs.main(['--reference', str(ref), '--out', str(tmp_path / 'o'), '--dry-run']) == 0
    text = capsys.readouterr().out
    assert 'gct_profile.py --backend flashinfer' in text and 'lingbot_ros.tools.bench' in text
    assert not (tmp_path / 'o').exists()
    assert sbs.main(['--reference', str(ref), '--out', str(tmp_path / 'o'), '--dry-run',
                     '--ours-compile', '--ours-head-dtype', 'float16']) == 0
    assert '--compile --head-dtype float16' in capsys.readouterr().out


def test_ours_killed_after_writing_its_results_says_so(tmp_path, monkeypatch):
    def finished_then_hung(cmd, cwd, env, log, label, timeout):
        out = Path(cmd[cmd.index('--out') + 1])
        out.write_text(json.dumps(OURS_JSON))
        return {'returncode': None, 'timed_out': True, 'seconds': timeout, 'output': 'done\n'}

    monkeypatch.setattr(runs, 'run_logged', finished_then_hung)
    args = argparse.Namespace(python=sys.executable, frames=300, ours_backend='auto',
                              ours_compile=True, ours_head_dtype=None)
    rec = runs.run_ours(args, 'default', tmp_path / 'x.log', timeout=60)
    assert not rec['ok'] and rec['steady_ms_median'] == 42.0
    assert rec['error'] == 'timed out after 60 s after it had written its results'


def test_record_puts_each_setting_in_the_results_file(tmp_path):
    ref, py = _stand_ins(tmp_path, f'sys.stdout.write({SAMPLE!r})\n')
    results = tmp_path / 'side_by_side.json'
    args = ['--reference', str(ref), '--out', str(tmp_path / 'out'), '--python', str(py),
            '--frames', '300', '--record', '--config', 'shipped', '--results', str(results)]
    assert sbs.main(args) == 0
    runs = json.loads(results.read_text())['runs']
    assert [(r['setting'], r['config']) for r in runs] == [('default', 'shipped'),
                                                           ('kf2_it1', 'shipped')]
    assert runs[0]['reference_ms_overall'] == 50.87 and runs[0]['ours_ms_steady'] == 44.0
    with pytest.raises(SystemExit):
        sbs.main(args[:-4] + ['--record'])  # without --config: refused before anything runs
