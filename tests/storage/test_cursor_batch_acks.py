"""Partly acked batches kept with a cursor (PIP-54 batch-index acks): Pulsar's ack_set
convention, intersection of acks, persistence with the position, and cursor files
written before they were kept."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.storage import ManagedCursor
from magnetar.storage.batch_ack_sets import (
    MAX_PERSISTED,
    BatchAckSets,
    bits_from_words,
    words_from_bits,
)
from magnetar.storage.errors import StorageCorruption


def new_cursor(tmp_path: Path, mark_delete: int = -1) -> ManagedCursor:
    return ManagedCursor("sub", tmp_path / "sub.json", mark_delete)


def test_words_are_java_bitset_longs() -> None:
    # BitSet.toLongArray: word 0 holds bits 0..63; a word with bit 63 set is negative.
    assert words_from_bits(0b11010) == [26]
    assert words_from_bits(1 << 63) == [-(1 << 63)]
    assert words_from_bits((1 << 64) | 1) == [1, 1]
    assert words_from_bits(0) == []
    for bits in (26, 1 << 63, (1 << 130) - 1, (1 << 64) | 5):
        assert bits_from_words(words_from_bits(bits)) == bits
    assert bits_from_words([-1]) == (1 << 64) - 1  # a signed long: all 64 bits


def test_acks_intersect_and_an_empty_set_means_the_entry_is_acked() -> None:
    sets = BatchAckSets()
    assert not sets.merge(4, 0b11110)  # message 0 acked: 1..4 left
    assert sets.get(4) == 0b11110
    version = sets.version
    assert not sets.merge(4, 0b11111)  # an older ack (nothing new): no change
    assert sets.version == version
    # A client that ignores what the broker sent says 0 and 2 are left; the broker
    # knows 0 is acked: only 2 is.
    assert not sets.merge(4, 0b00101)
    assert sets.get(4) == 0b00100
    assert sets.acked_messages(4, 5) == 4
    assert sets.merge(4, 0b11011)  # the last one: the entry is acked as a whole
    assert 4 not in sets and sets.get(4) is None
    assert sets.merge(9, 0)  # an empty set at once
    assert 9 not in sets
    assert sets.acked_messages(9, 5) == 0


def test_discards() -> None:
    sets = BatchAckSets()
    for entry_id in range(5):
        sets.merge(entry_id, 0b10)
    version = sets.version
    sets.discard(42)
    sets.discard_through(-1)
    assert sets.version == version
    sets.discard(1)
    sets.discard_through(2)
    assert list(sets) == [3, 4]
    sets.clear()
    assert not sets and sets.version > version


def test_partial_acks_make_the_cursor_dirty_and_are_persisted(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.dirty = True
    cursor.flush()
    cursor.batch_acks.merge(3, 0b1010)
    cursor.batch_acks.merge(70, 1 << 99)  # a batch of 100: only its last left
    assert cursor.dirty
    cursor.flush()
    assert not cursor.dirty
    doc = json.loads(cursor.path.read_bytes())
    assert doc["batch_acks"] == [[3, "a"], [70, format(1 << 99, "x")]]
    loaded = ManagedCursor.load(cursor.path)
    assert loaded.batch_acks.get(3) == 0b1010
    assert loaded.batch_acks.get(70) == 1 << 99
    assert not loaded.dirty


def test_sets_of_acked_entries_are_dropped_on_load(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    for entry_id in (2, 5, 8):
        cursor.batch_acks.merge(entry_id, 0b10)
    # Written by hand the way a crash between two flushes could leave it: the
    # entries were acked as a whole after their sets were written.
    cursor.dirty = True
    cursor.flush()
    doc = json.loads(cursor.path.read_bytes())
    doc["mark_delete"] = 2
    doc["acked"] = [[5, 5]]
    cursor.path.write_text(json.dumps(doc))
    loaded = ManagedCursor.load(cursor.path)
    assert list(loaded.batch_acks) == [8]
    assert not loaded.dirty


def test_reset_forgets_the_partial_acks(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.batch_acks.merge(3, 0b10)
    cursor.reset(-1)
    assert not cursor.batch_acks
    cursor.flush()
    assert json.loads(cursor.path.read_bytes())["batch_acks"] == []


def test_a_file_written_before_batch_acks_were_kept_loads_with_none(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps({
        "version": 1, "name": "old", "mark_delete": 4, "acked": [[7, 9]],
        "properties": {"p": "1"}, "redelivery_counts": [[6, 2]],
    }))
    cursor = ManagedCursor.load(path)
    assert (cursor.mark_delete, cursor.individually_acked_ranges()) == (4, [(7, 9)])
    assert cursor.redelivery_counts.items() == [(6, 2)]
    assert not cursor.batch_acks and not cursor.dirty
    # The oldest format too (no redelivery counts either).
    path.write_text(json.dumps({"version": 1, "name": "old", "mark_delete": 4}))
    assert not ManagedCursor.load(path).batch_acks


@pytest.mark.parametrize("bad", [[[3]], [["x", "a"]], [[3, 5]], [[3, "zz"]], 7])
def test_a_damaged_batch_ack_list_is_corruption(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"version": 1, "name": "bad", "mark_delete": -1,
                                "batch_acks": bad}))
    with pytest.raises(StorageCorruption):
        ManagedCursor.load(path)


def test_persisted_sets_are_bounded_oldest_first(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    total = MAX_PERSISTED + 5
    for entry_id in range(total, 0, -1):  # kept in any order, persisted lowest first
        cursor.batch_acks.merge(entry_id, 0b10)
    cursor.flush()
    loaded = ManagedCursor.load(cursor.path)
    assert len(loaded.batch_acks) == MAX_PERSISTED
    assert min(loaded.batch_acks) == 1 and max(loaded.batch_acks) == MAX_PERSISTED
    assert len(cursor.batch_acks) == total  # memory keeps them all, as Pulsar does
