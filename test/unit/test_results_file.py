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

"""benchmarks/results_file.py: one entry per run, checked against the schema, written whole."""

import dataclasses
import importlib.util
import json
import os
from pathlib import Path
import sys

from hypothesis import given, settings, strategies as st
import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location('results_file',
                                               ROOT / 'benchmarks' / 'results_file.py')
rf = importlib.util.module_from_spec(_spec)
sys.modules['results_file'] = rf  # dataclasses look their module up
_spec.loader.exec_module(rf)

SHA = 'b633498ccb26e8d0f5155f74d8e707ac093f46ac'


def _cam(**kw):
    base = {'counter_received': 450, 'node_received': 450, 'processed': 440,
            'e2e_ms_p50': 38.0, 'e2e_ms_p99': 55.0, 'step_ms_p50': 30.0}
    return rf.CameraFigures(**{**base, **kw})


def _live(name='15hz', **kw):
    base = {'name': name, 'config': 'shipped', 'gpu': 'NVIDIA H100 80GB HBM3', 'commit': SHA,
            'date': '2026-12-06', 'cameras': 1, 'rate_hz': 15.0, 'per_camera': (_cam(),)}
    return rf.LiveRun(**{**base, **kw})


def _sbs(setting=rf.Setting.DEFAULT, config='shipped', **kw):
    base = {'setting': setting, 'config': config, 'gpu': 'NVIDIA H100 80GB HBM3', 'commit': SHA,
            'date': '2026-12-06', 'reference_ms_mid': 54.4, 'reference_ms_overall': 60.8,
            'ours_ms_steady': 22.0, 'ours_ms_overall': 20.5}
    return rf.SideBySideRun(**{**base, **kw})


def test_a_run_is_written_in_the_schema_and_read_back(tmp_path):
    path = tmp_path / 'live.json'
    rf.record(path, _live())
    data = json.loads(path.read_text())
    assert list(data) == ['runs']
    assert list(data['runs'][0]) == ['name', 'config', 'gpu', 'commit', 'date', 'cameras',
                                     'rate_hz', 'per_camera']
    assert list(data['runs'][0]['per_camera'][0]) == [
        'counter_received', 'node_received', 'processed', 'e2e_ms_p50', 'e2e_ms_p99',
        'step_ms_p50']
    assert rf.load(path, rf.LiveRun) == [_live()]


def test_a_rerun_replaces_its_entry_in_place_and_others_stay(tmp_path):
    path = tmp_path / 'live.json'
    rf.record(path, _live('15hz'))
    rf.record(path, _live('30hz', rate_hz=30.0))
    rf.record(path, _live('15hz', per_camera=(_cam(processed=450),)))
    runs = rf.load(path, rf.LiveRun)
    assert [r.name for r in runs] == ['15hz', '30hz']
    assert runs[0].per_camera[0].processed == 450


def test_side_by_side_key_is_setting_and_config(tmp_path):
    path = tmp_path / 'side_by_side.json'
    rf.record(path, _sbs(rf.Setting.DEFAULT, 'shipped'))
    rf.record(path, _sbs(rf.Setting.DEFAULT, 'compile+fp16_heads'))
    rf.record(path, _sbs(rf.Setting.KF2_IT1, 'shipped'))
    rf.record(path, _sbs(rf.Setting.DEFAULT, 'shipped', ours_ms_steady=21.0))
    runs = rf.load(path, rf.SideBySideRun)
    assert [r.key for r in runs] == [('default', 'shipped'), ('default', 'compile+fp16_heads'),
                                     ('kf2_it1', 'shipped')]
    assert runs[0].ours_ms_steady == 21.0
    assert json.loads(path.read_text())['runs'][0]['setting'] == 'default'


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(['15hz', '30hz', '2cam_15hz']),
                          st.integers(0, 1000)), max_size=12))
def test_any_sequence_of_records_keeps_the_last_of_each_name(tmp_path_factory, seq):
    path = tmp_path_factory.mktemp('r') / 'live.json'
    expected = {}  # the reference: a dict keeps first-insertion order and the last value
    for name, processed in seq:
        rf.record(path, _live(name, per_camera=(_cam(processed=processed),)))
        expected[name] = processed
    got = [(r.name, r.per_camera[0].processed) for r in rf.load(path, rf.LiveRun)]
    assert got == list(expected.items())


@pytest.mark.parametrize('change, words', [
    ({'commit': 'main'}, 'commit'),
    ({'date': '2026-12-06T07:15:39'}, 'date YYYY-MM-DD'),
    ({'config': 'Shipped Config'}, 'config name'),
    ({'gpu': ''}, 'non-empty string'),
    ({'cameras': 2}, 'per_camera has 1'),
    ({'rate_hz': 0.0}, 'rate_hz'),
    ({'per_camera': ()}, 'per_camera'),
    ({'per_camera': (_cam(processed=-1),)}, 'processed=-1'),
    ({'per_camera': (_cam(processed=True),)}, 'whole number'),
    ({'per_camera': (_cam(e2e_ms_p99=float('nan')),)}, 'finite'),
])
def test_a_bad_entry_is_refused_and_the_file_is_left_as_it_was(tmp_path, change, words):
    path = tmp_path / 'live.json'
    rf.record(path, _live())
    before = path.read_bytes()
    with pytest.raises(rf.SchemaError, match=words):
        rf.record(path, dataclasses.replace(_live(), **change))
    assert path.read_bytes() == before


@pytest.mark.parametrize('text, words', [
    ('{"runs": [', 'not JSON'),
    ('[]', 'nothing else'),
    ('{"runs": [], "note": 1}', 'nothing else'),
    ('{"runs": [{"name": "15hz"}]}', 'missing config'),
])
def test_a_file_out_of_schema_is_refused_with_where(tmp_path, text, words):
    path = tmp_path / 'live.json'
    path.write_text(text)
    with pytest.raises(rf.SchemaError, match=words):
        rf.record(path, _live())
    assert path.read_text() == text


def test_unknown_fields_and_twice_the_same_key_are_refused(tmp_path):
    path = tmp_path / 'side_by_side.json'
    entry = rf.to_json(_sbs())
    path.write_text(json.dumps({'runs': [{**entry, 'ratio': 2.5}]}))
    with pytest.raises(rf.SchemaError, match='unknown ratio'):
        rf.load(path, rf.SideBySideRun)
    path.write_text(json.dumps({'runs': [entry, entry]}))
    with pytest.raises(rf.SchemaError, match='more than one entry for default/shipped'):
        rf.load(path, rf.SideBySideRun)
    path.write_text(json.dumps({'runs': [{**entry, 'setting': 'kf3'}]}))
    with pytest.raises(rf.SchemaError, match='one of default, kf2_it1'):
        rf.load(path, rf.SideBySideRun)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / 'live.json'
    rf.record(path, _live())
    before = path.read_bytes()

    def refuse(src, dst):
        raise OSError('disk full')
    monkeypatch.setattr(os, 'replace', refuse)
    with pytest.raises(OSError, match='disk full'):
        rf.record(path, _live('30hz'))
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ['live.json']


def _report(blocks, totals=None):
    t = {'counter_received': 900, 'node_received': 899.0, 'node_processed': 880.0}
    t.update(totals or {})
    return {'date': '2026-12-06 07:15:39 UTC', 'cameras': 1, 'rate_hz': 30.0,
            'cameras_report': {'camera': {'totals': t, 'blocks': blocks}}}


def _block(p50, p99, step):
    return {'pose_ms_p50': p50, 'pose_ms_p99': p99, 'step_ms_p50': step}


def test_live_entry_from_a_report_takes_the_median_block_and_the_worst_tail():
    report = _report([_block(39.0, 50.0, 30.0), _block(41.0, 58.04, 31.0),
                      _block(40.0, 52.0, 30.5)])
    run = rf.live_run(report, '30hz', 'shipped', 'NVIDIA H100 80GB HBM3', SHA)
    assert run.date == '2026-12-06' and run.rate_hz == 30.0 and run.cameras == 1
    assert run.per_camera == (rf.CameraFigures(900, 899, 880, 40.0, 58.0, 30.5),)


def test_live_entry_needs_the_nodes_counts_and_a_block():
    with pytest.raises(rf.SchemaError, match='no block after the warm-up has pose_ms_p50'):
        rf.live_run(_report([]), '30hz', 'shipped', 'gpu', SHA)
    with pytest.raises(rf.SchemaError, match='did not report node_processed'):
        rf.live_run(_report([_block(1, 2, 3)], {'node_processed': None}), 'x', 'shipped',
                    'gpu', SHA)


def _combined(ref_mid=54.39, ours_steady=26.137):
    return {'setting': 'default', 'gpu': 'NVIDIA H100 80GB HBM3',
            'date': '2026-12-06T07:19:42+00:00', 'versions': {'ours': SHA},
            'reference': {'ms_at_50pct': ref_mid, 'ms_per_frame_overall': 60.79},
            'ours': {'steady_ms_median': ours_steady, 'ms_per_frame_overall': 24.347}}


def test_side_by_side_entry_from_a_result():
    run = rf.side_by_side_run(_combined(), 'compile+fp16_heads')
    assert run == _sbs(config='compile+fp16_heads', reference_ms_mid=54.39,
                       reference_ms_overall=60.79, ours_ms_steady=26.14, ours_ms_overall=24.35)


def test_a_side_that_failed_is_not_recorded():
    with pytest.raises(rf.SchemaError, match='no figure for reference_ms_mid'):
        rf.side_by_side_run(_combined(ref_mid=None), 'shipped')


def test_command_line_records_a_report_and_says_why_not(tmp_path, capsys):
    report = tmp_path / 'sbs.json'
    report.write_text(json.dumps(_combined()))
    out = tmp_path / 'side_by_side.json'
    assert rf.main(['side-by-side', str(report), '--config', 'shipped',
                    '--results', str(out)]) == 0
    assert rf.load(out, rf.SideBySideRun)[0].ours_ms_steady == 26.14
    report.write_text(json.dumps(_combined(ours_steady=None)))
    assert rf.main(['side-by-side', str(report), '--config', 'shipped',
                    '--results', str(out)]) == 1
    assert 'no figure for ours_ms_steady' in capsys.readouterr().err


def test_the_committed_results_follow_the_schema():
    assert rf.load(rf.LIVE_FILE, rf.LiveRun)
    assert rf.load(rf.SIDE_BY_SIDE_FILE, rf.SideBySideRun)


def test_live_node_records_its_own_report(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location('live_node',
                                                  ROOT / 'benchmarks' / 'live_node.py')
    live = importlib.util.module_from_spec(spec)
    sys.modules['live_node'] = live
    spec.loader.exec_module(live)
    results = tmp_path / 'live.json'
    args = live.parse_args(['--out', str(tmp_path / 'r'), '--record', '30hz', '--config',
                            'shipped', '--results', str(results), '--commit', SHA,
                            '--gpu', 'NVIDIA H100 80GB HBM3'])
    report = _report([_block(39.0, 50.0, 30.0)])
    assert live.record(args, report) == 0
    assert rf.load(results, rf.LiveRun)[0].per_camera[0].e2e_ms_p50 == 39.0
    assert live.record(args, _report([])) == 1
    assert 'not recorded' in capsys.readouterr().err
    with pytest.raises(SystemExit):
        live.parse_args(['--out', 'x', '--record', '30hz'])  # a name without a config
