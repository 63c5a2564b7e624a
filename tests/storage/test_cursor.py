"""ManagedCursor: individual and cumulative acks, reset, persistence."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from magnetar.storage import ManagedCursor, StorageCorruption
from magnetar.storage.cursor import cursor_name_from_file, cursor_path


def new_cursor(tmp_path: Path, mark_delete: int = -1) -> ManagedCursor:
    return ManagedCursor("sub", tmp_path / "sub.json", mark_delete)


def test_scattered_acks_fill_in_and_mark_delete_advances(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    ids = list(range(1000))
    random.Random(3).shuffle(ids)
    for index, entry_id in enumerate(ids):
        cursor.ack([entry_id])
        acked = set(ids[: index + 1])
        expected_mark = -1
        while expected_mark + 1 in acked:
            expected_mark += 1
        assert cursor.mark_delete == expected_mark
        assert cursor.acked_count_above_mark_delete() == len(acked) - expected_mark - 1
    assert cursor.mark_delete == 999
    assert cursor.individually_acked_ranges() == []


def test_ranges_are_compact(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.ack(range(1, 10_000, 2))  # every other entry, mark_delete stays at -1
    assert cursor.mark_delete == -1
    assert len(cursor.individually_acked_ranges()) == 5000
    cursor.ack(range(2, 10_000, 2))  # fill the holes except entry 0
    assert cursor.individually_acked_ranges() == [(1, 9999)]
    assert cursor.acked_count_above_mark_delete() == 9999
    cursor.ack([0])
    assert cursor.mark_delete == 9999
    assert cursor.individually_acked_ranges() == []


def test_is_acked_and_duplicates(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path, mark_delete=9)
    cursor.ack([12, 12, 5, 13, 20])
    assert cursor.individually_acked_ranges() == [(12, 13), (20, 20)]
    assert cursor.acked_count_above_mark_delete() == 3
    for entry_id in (0, 9, 12, 13, 20):
        assert cursor.is_acked(entry_id)
    for entry_id in (10, 11, 14, 19, 21):
        assert not cursor.is_acked(entry_id)
    cursor.dirty = False
    cursor.ack([3, 12])  # nothing new
    assert not cursor.dirty


def test_cumulative_ack(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.ack([5, 6, 9, 15, 16])
    cursor.ack_cumulative(7)
    assert cursor.mark_delete == 7
    assert cursor.individually_acked_ranges() == [(9, 9), (15, 16)]
    cursor.ack_cumulative(8)  # joins the acked 9
    assert cursor.mark_delete == 9
    assert cursor.individually_acked_ranges() == [(15, 16)]
    cursor.ack_cumulative(15)  # cuts into the range 15..16
    assert cursor.mark_delete == 16
    assert cursor.individually_acked_ranges() == []
    cursor.dirty = False
    cursor.ack_cumulative(3)  # below mark_delete: no-op
    assert cursor.mark_delete == 16
    assert not cursor.dirty


def test_reset_moves_either_way_and_clears_acks(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.ack([0, 1, 2, 7, 8])
    cursor.reset(0)
    assert cursor.mark_delete == 0
    assert cursor.individually_acked_ranges() == []
    assert not cursor.is_acked(1)
    cursor.reset(50)
    assert cursor.mark_delete == 50
    cursor.reset(-10)
    assert cursor.mark_delete == -1
    assert cursor.dirty


def test_persistence_round_trip(tmp_path: Path) -> None:
    cursor = ManagedCursor("my/sub ü", cursor_path(tmp_path, "my/sub ü"), 3, {"a": "1"})
    assert cursor.path.name == "my%2Fsub%20%C3%BC.json"
    assert cursor_name_from_file(cursor.path.name) == "my/sub ü"
    assert cursor_name_from_file("x.json.tmp") is None
    cursor.ack([5, 6, 10, 100])
    cursor.flush()
    assert not cursor.dirty
    assert not list(tmp_path.glob("*.tmp"))
    doc = json.loads(cursor.path.read_bytes())
    assert doc["acked"] == [[5, 6], [10, 10], [100, 100]]

    loaded = ManagedCursor.load(cursor.path)
    assert loaded.name == "my/sub ü"
    assert loaded.mark_delete == 3
    assert loaded.individually_acked_ranges() == [(5, 6), (10, 10), (100, 100)]
    assert loaded.properties == {"a": "1"}
    assert not loaded.dirty
    loaded.ack([4])
    assert loaded.mark_delete == 6


def test_flush_only_when_dirty(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.flush()
    assert not cursor.path.exists()
    cursor.set_properties({"k": "v"})
    cursor.flush()
    assert ManagedCursor.load(cursor.path).properties == {"k": "v"}


def test_damaged_file_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"name": "x"')
    with pytest.raises(StorageCorruption, match=r"bad\.json"):
        ManagedCursor.load(path)
    path.write_text('{"name": 3, "mark_delete": 1}')
    with pytest.raises(StorageCorruption):
        ManagedCursor.load(path)


async def test_a_cursor_past_the_end_of_a_recovered_log_is_rewound(tmp_path: Path) -> None:
    from magnetar.storage import LedgerConfig, ManagedLedger

    ledger = ManagedLedger.open(tmp_path / "l", LedgerConfig())
    for i in range(3):
        ledger.append(b"e%d" % i)
    await ledger.flush()
    cursor = ledger.open_cursor("ahead", -1)
    cursor.ack_cumulative(4)  # as if entries 3 and 4 were read, then lost with the machine
    cursor.ack([6, 7])
    cursor.flush()
    other = ledger.open_cursor("scattered", -1)
    other.ack([1, 5])  # below and past the end
    other.flush()
    within = ledger.open_cursor("within", -1)
    within.ack([0, 2])
    within.flush()
    await ledger.close()
    reopened = ManagedLedger.open(tmp_path / "l", LedgerConfig())
    for name in ("ahead", "scattered", "within"):
        reopened.open_cursor(name, -1)
    assert sorted(reopened.rewind_cursors_past_end()) == ["ahead", "scattered"]
    ahead = reopened.cursors["ahead"]
    assert ahead.mark_delete == 2 and not ahead.is_acked(3) and not ahead.is_acked(6)
    scattered = reopened.cursors["scattered"]
    assert scattered.mark_delete == -1 and not scattered.is_acked(5)
    assert reopened.cursors["within"].is_acked(2)
    await reopened.close()
