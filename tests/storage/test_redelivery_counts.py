"""Redelivery counts kept with a cursor: bounded, persisted with the position, dropped
when their entries are acknowledged, and read from files written before they were kept."""

from __future__ import annotations

import json
from pathlib import Path

from magnetar.storage import ManagedCursor
from magnetar.storage.cursor import DEFAULT_MAX_REDELIVERY_COUNTS, RedeliveryCounts


def new_cursor(tmp_path: Path, mark_delete: int = -1) -> ManagedCursor:
    return ManagedCursor("sub", tmp_path / "sub.json", mark_delete)


def test_counts_grow_and_the_least_recently_counted_is_evicted() -> None:
    counts = RedeliveryCounts(limit=3)
    assert [counts.increment(7) for _ in range(3)] == [1, 2, 3]
    counts.increment(8)
    counts.increment(9)
    counts.increment(7)  # 7 counted again: now the most recent
    counts.increment(10)  # over the bound: 8, the least recently counted, goes
    assert counts.items() == [(9, 1), (7, 4), (10, 1)]
    assert counts.get(8) == 0 and 8 not in counts
    assert len(counts) == 3


def test_discards_and_a_lower_bound() -> None:
    counts = RedeliveryCounts()
    assert counts.limit == DEFAULT_MAX_REDELIVERY_COUNTS
    for entry_id in range(10):
        counts.increment(entry_id)
    version = counts.version
    counts.discard(42)  # nothing to drop: no change
    counts.discard_through(-1)
    assert counts.version == version
    counts.discard(3)
    counts.discard_through(4)
    assert [e for e, _ in counts.items()] == [5, 6, 7, 8, 9]
    counts.set_limit(2)
    assert counts.items() == [(8, 1), (9, 1)]
    counts.clear()
    assert len(counts) == 0 and counts.version > version


def test_counts_make_the_cursor_dirty_and_are_persisted(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.dirty = True
    cursor.flush()
    assert not cursor.dirty
    for _ in range(3):
        cursor.redelivery_counts.increment(5)
    cursor.redelivery_counts.increment(2)
    assert cursor.dirty
    cursor.flush()
    assert not cursor.dirty
    loaded = ManagedCursor.load(cursor.path)
    assert loaded.redelivery_counts.items() == [(5, 3), (2, 1)]  # order kept
    assert not loaded.dirty


def test_a_count_taken_during_a_write_stays_dirty(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.redelivery_counts.increment(1)
    snapshot = cursor.snapshot()
    cursor.redelivery_counts.increment(1)  # meanwhile, on the loop
    cursor.write(snapshot)  # the worker's write of the older state
    assert cursor.dirty
    cursor.flush()
    assert ManagedCursor.load(cursor.path).redelivery_counts.get(1) == 2


def test_counts_of_acknowledged_entries_are_not_loaded(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    for entry_id in (1, 4, 6, 9):
        cursor.redelivery_counts.increment(entry_id)
    cursor.ack([0, 1, 2, 6])  # mark_delete 2, 6 acked individually
    cursor.flush()
    assert ManagedCursor.load(cursor.path).redelivery_counts.items() == [(4, 1), (9, 1)]


def test_a_reset_forgets_the_counts(tmp_path: Path) -> None:
    cursor = new_cursor(tmp_path)
    cursor.redelivery_counts.increment(3)
    cursor.reset(0)
    cursor.flush()
    assert len(ManagedCursor.load(cursor.path).redelivery_counts) == 0


def test_a_file_written_before_counts_were_kept_loads(tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    # Exactly what the previous version wrote: no redelivery_counts key.
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "name": "old",
                "mark_delete": 4,
                "acked": [[7, 8]],
                "properties": {"p": "v"},
            },
            separators=(",", ":"),
        )
    )
    cursor = ManagedCursor.load(path)
    assert (cursor.name, cursor.mark_delete, cursor.properties) == ("old", 4, {"p": "v"})
    assert cursor.individually_acked_ranges() == [(7, 8)]
    assert len(cursor.redelivery_counts) == 0
    assert not cursor.dirty
    cursor.redelivery_counts.increment(5)
    cursor.flush()
    doc = json.loads(path.read_text())
    assert doc["redelivery_counts"] == [[5, 1]]
    assert doc["acked"] == [[7, 8]] and doc["mark_delete"] == 4


def test_a_full_bound_is_a_small_file(tmp_path: Path) -> None:
    """The documented cost: the default bound of counts takes a few hundred KB at most."""
    cursor = new_cursor(tmp_path)
    for entry_id in range(10**9, 10**9 + DEFAULT_MAX_REDELIVERY_COUNTS + 500):
        cursor.redelivery_counts.increment(entry_id)
    cursor.flush()
    loaded = ManagedCursor.load(cursor.path)
    assert len(loaded.redelivery_counts) == DEFAULT_MAX_REDELIVERY_COUNTS
    assert loaded.redelivery_counts.items()[0] == (10**9 + 500, 1)  # the oldest went
    assert cursor.path.stat().st_size < 300_000
