"""Opening a topic whose directory the open itself makes skips the reads a new topic
does not need (no listing, no synced-offset record, cursors, metadata file); a
directory that already exists, however little of it a crash left, is recovered in
full. Each test here would fail if the short way were taken for such a directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from magnetar.storage import LedgerConfig, LedgerExists, ManagedLedger
from magnetar.storage.store import METADATA_FILE, Store
from magnetar.storage.synced_offset import SyncedOffsetWriter, read_synced_offset

TOPIC = "persistent://public/default/new-topic"


async def test_a_new_directory_opens_fresh_and_reopens_with_its_entries(
        tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b" / "topic"  # parents made too
    ledger = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert ledger.fresh and ledger.created
        # The synced-offset record is made by the first sync (owed_syncs.py).
        assert [p.name for p in (directory / "ledger").iterdir()] == [
            "00000000000000000000.seg"]
        ledger.append(b"one")
        ledger.append(b"two")
        await ledger.flush()
        assert (directory / "ledger" / "synced").exists()
    finally:
        await ledger.close()
    reopened = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert not reopened.fresh and not reopened.created
        assert [reopened.read(0), reopened.read(1)] == [b"one", b"two"]
        assert read_synced_offset(directory / "ledger") is not None
    finally:
        await reopened.close()


async def test_a_directory_a_crash_left_with_a_segment_is_recovered(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    ledger = ManagedLedger.open(directory, LedgerConfig())
    ledger.append(b"kept")
    await ledger.flush()
    ledger.abort()  # as a crash would leave it: no clean close, no owed write settled
    reopened = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert not reopened.fresh and not reopened.created
        assert reopened.next_entry_id == 1 and reopened.read(0) == b"kept"
    finally:
        await reopened.close()


async def test_an_empty_directory_a_crash_left_gets_its_ledger_the_long_way(
        tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    (directory / "ledger").mkdir(parents=True)  # made before the crash, nothing in it
    ledger = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert not ledger.fresh and ledger.created  # a new ledger, owed its fsyncs
        assert ledger.owed_syncs.owed
        ledger.append(b"x")
        await ledger.flush()
        assert ledger.read(0) == b"x"
    finally:
        await ledger.close()


async def test_an_existing_directorys_synced_record_is_read_before_it_is_written(
        tmp_path: Path) -> None:
    # A crash left ledger/ with a record (of a sequence number above 1) and no segment:
    # its next write must outrank it, or the stale slot would win on the next load.
    segments = tmp_path / "topic" / "ledger"
    segments.mkdir(parents=True)
    stale = SyncedOffsetWriter(segments)
    for _ in range(5):
        stale.write(7, 100)
    stale.close()
    ledger = ManagedLedger.open(tmp_path / "topic", LedgerConfig())
    try:
        assert not ledger.fresh
        ledger.append(b"x")
        await ledger.flush()
    finally:
        await ledger.close()  # writes the record
    record = read_synced_offset(segments)
    assert record is not None and record.segment_first_entry_id == 0 and record.seq > 5


async def test_an_existing_directorys_cursors_are_listed(tmp_path: Path) -> None:
    directory = tmp_path / "topic"
    ledger = ManagedLedger.open(directory, LedgerConfig())
    ledger.open_cursor("sub", -1)
    ledger.abort()
    reopened = ManagedLedger.open(directory, LedgerConfig())
    try:
        assert reopened.persisted_cursor_names() == ["sub"]
        reopened.open_persisted_cursors()
        assert list(reopened.cursors) == ["sub"]
    finally:
        await reopened.close()


async def test_a_fresh_ledgers_first_cursor_is_listed_afterwards(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path / "topic", LedgerConfig())
    try:
        assert ledger.fresh and ledger.persisted_cursor_names() == []
        ledger.open_cursor("sub", -1)
        assert ledger.persisted_cursor_names() == ["sub"]
    finally:
        await ledger.close()


async def test_store_reads_the_metadata_of_an_existing_directory_only(
        tmp_path: Path) -> None:
    store = Store(tmp_path, LedgerConfig())
    directory = store.topic_dir(TOPIC)
    assert directory == tmp_path / "persistent" / "public" / "default" / "new-topic"
    # A directory left with a metadata file and no ledger (a crash between the two).
    directory.mkdir(parents=True)
    (directory / METADATA_FILE).write_text(json.dumps({"ledger_id": 41, "topic_epoch": 3}))
    ledger = store.open_ledger(TOPIC)
    try:
        metadata = store.ledger_metadata(ledger)
        assert not ledger.fresh and (metadata.ledger_id, metadata.topic_epoch) == (41, 3)
    finally:
        await ledger.close()
    fresh_topic = TOPIC + "-2"
    fresh = store.open_ledger(fresh_topic)
    try:
        metadata = store.ledger_metadata(fresh)
        assert fresh.fresh and metadata.ledger_id == 0
        assert metadata.path == store.topic_dir(fresh_topic) / METADATA_FILE
    finally:
        await fresh.close()


async def test_a_topic_left_before_its_first_sync_loads_and_makes_its_record(
        tmp_path: Path) -> None:
    # Killed before anything settled: a segment, no synced-offset record yet.
    directory = tmp_path / "topic"
    ManagedLedger.open(directory, LedgerConfig()).abort()
    assert not (directory / "ledger" / "synced").exists()
    reopened = ManagedLedger.open(directory, LedgerConfig(synced_record_interval=0))
    try:
        assert not reopened.fresh and not reopened.created
        reopened.append(b"x")
        await reopened.flush()
    finally:
        await reopened.close()  # its record writer makes the file
    record = read_synced_offset(directory / "ledger")
    assert record is not None and record.segment_first_entry_id == 0 and record.offset > 0


def test_only_new_opens_nothing_where_the_directory_exists(tmp_path: Path) -> None:
    """``only_new`` (the loader's open of a new topic on the event loop): a ledger
    whose directory exists raises LedgerExists with nothing opened or locked, so the
    usual open (its recovery) can follow at once; a new one opens fresh."""
    fresh = ManagedLedger.open(tmp_path / "new", LedgerConfig(), only_new=True)
    try:
        assert fresh.fresh and fresh.created
    finally:
        fresh.abort()
    with pytest.raises(LedgerExists):
        ManagedLedger.open(tmp_path / "new", LedgerConfig(), only_new=True)
    again = ManagedLedger.open(tmp_path / "new", LedgerConfig())  # not left locked
    try:
        assert not again.fresh
    finally:
        again.abort()
