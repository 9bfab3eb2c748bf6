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

"""The voxel map's key table against a dict, batch by batch (hypothesis)."""

from hypothesis import given, settings, strategies as st
from lingbot_ros.streaming.key_table import EMPTY, KeyTable, TOMBSTONE
import numpy as np

# few keys in a tiny table: collisions, long clusters, wrap-around and tombstone reuse
KEYS = st.integers(0, 60)


def _refilled(bits: int, held: dict) -> KeyTable:
    """Return a new table of ``bits`` holding ``held`` (as the map rebuilds its table)."""
    table = KeyTable(bits)
    keys = np.array(sorted(held), np.int64)
    slots = table.insert(keys)
    table.set_values(slots, np.array([held[k] for k in keys.tolist()], np.int64))
    return table


def test_a_table_for_many_keys_starts_at_the_target_load():
    assert KeyTable.for_keys(10).bits == 12  # never below the smallest table
    table = KeyTable.for_keys(100_000)
    assert 0.125 < 100_000 / (1 << table.bits) <= 0.25
    assert not table.full(100_000, 0) and table.full(100_000, (1 << table.bits) // 2)


@settings(max_examples=100, deadline=None)
@given(batches=st.lists(st.tuples(st.lists(KEYS, max_size=12), st.lists(KEYS, max_size=8)),
                        min_size=1, max_size=16))
def test_lookups_inserts_and_drops_agree_with_a_dict(batches):
    table, held = KeyTable(bits=3), {}
    position = 0
    for added, dropped in batches:
        fresh = np.array(sorted(set(added) - set(held)), np.int64)
        while table.full(len(held), len(fresh)):  # a larger table, refilled
            table = _refilled(table.bits + 1, held)
        assert np.all(table.lookup(fresh) == -1)
        slots = table.insert(fresh)
        assert len(set(slots.tolist())) == len(slots)
        positions = np.arange(position, position + len(fresh))
        table.set_values(slots, positions)
        held.update(zip(fresh.tolist(), positions.tolist()))
        position += len(fresh)
        gone = np.array(sorted(set(dropped) & set(held)), np.int64)
        table.drop(table.lookup(gone))
        for k in gone.tolist():
            del held[k]
        probe = np.arange(0, 61, dtype=np.int64)
        found = table.lookup(probe)
        for key, slot in zip(probe.tolist(), found.tolist()):
            if key in held:
                assert slot >= 0 and table.keys[slot] == key
                assert table.values(np.array([slot]))[0] == held[key]
            else:
                assert slot == -1
        assert table.tombstones == int(np.count_nonzero(table.keys == TOMBSTONE))
        assert int(np.count_nonzero(table.keys >= 0)) == len(held)
        assert not np.any((table.keys < 0) & (table.keys != EMPTY) & (table.keys != TOMBSTONE))
