"""Torn tail or corruption: the synced-offset record, sealed-segment indexes, and the
explicit repair ``truncate_at_corruption``."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import magnetar.storage.recovery as recovery_module
from magnetar.storage import (
    CorruptLedger,
    LedgerConfig,
    ManagedLedger,
    StorageCorruption,
    StorageError,
    Store,
    truncate_at_corruption,
)
from magnetar.storage.record import HEADER_SIZE
from magnetar.storage.synced_offset import SyncedOffsetWriter, read_synced_offset

from .conftest import LedgerFactory
from .helpers import payload, segment_files


def record_offset(entry_id: int, first: int = 0) -> int:
    """Offset of ``entry_id``'s record in a segment starting at ``first`` (payload sizes)."""
    return sum(HEADER_SIZE + len(payload(i)) for i in range(first, entry_id))


def flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


@pytest.fixture
def scanned() -> Iterator[list[Path]]:
    """The segment files load CRC-scans, in order."""
    paths: list[Path] = []
    recovery_module.on_scan = paths.append
    yield paths
    recovery_module.on_scan = None


async def write_entries(make_ledger: LedgerFactory, count: int, **config: object) -> None:
    ledger = make_ledger(**config)
    for entry_id in range(count):
        ledger.append(payload(entry_id))
    await ledger.close()


def open_ledger(directory: Path, **config: object) -> ManagedLedger:
    return ManagedLedger.open(directory, LedgerConfig(**config))  # type: ignore[arg-type]


# ------------------------------------------------------------ the synced offset

async def test_a_bit_flip_below_the_synced_offset_is_refused(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    await write_entries(make_ledger, 10)  # fsynced and receipted: close records all of it
    [segment] = segment_files(tmp_path / "ledger")
    bad = record_offset(4)
    flip(segment, bad + HEADER_SIZE + 2)  # a payload byte of entry 4
    damaged = segment.read_bytes()

    with pytest.raises(CorruptLedger) as info:
        open_ledger(tmp_path / "ledger")
    error = info.value
    assert isinstance(error, StorageCorruption)
    assert (error.path, error.offset, error.reason) == (segment, bad, "CRC mismatch")
    message = str(error)
    assert str(segment) in message and f"offset {bad}" in message
    assert "truncate_at_corruption" in message
    # Nothing was cut, and the directory is not left locked: it is refused again.
    assert segment.read_bytes() == damaged
    with pytest.raises(CorruptLedger):
        open_ledger(tmp_path / "ledger")


# Damage to the last segment of a ledger closed cleanly (everything is synced), and
# whether load must refuse it (below the synced offset) or cut it (above).
DAMAGE = {
    "cut mid-data": (lambda path: _cut(path, 3), True),
    "zeros over the last record": (lambda path: _zero_tail(path, 5), True),
    "half a record appended": (lambda path: _append(path, b"\x00\x00\x00\x20\x12\x34part"),
                               False),
    "garbage appended": (lambda path: _append(path, b"\x01\x02"), False),
}


def _cut(path: Path, nbytes: int) -> None:
    with open(path, "r+b") as file:
        file.truncate(path.stat().st_size - nbytes)


def _zero_tail(path: Path, nbytes: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[-nbytes:] = bytes(nbytes)
    path.write_bytes(bytes(raw))


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as file:
        file.write(data)


@pytest.mark.parametrize("case", list(DAMAGE))
async def test_damage_below_the_synced_offset_is_refused_and_above_it_cut(
        make_ledger: LedgerFactory, tmp_path: Path, case: str) -> None:
    damage, refused = DAMAGE[case]
    await write_entries(make_ledger, 10)
    [segment] = segment_files(tmp_path / "ledger")
    damage(segment)
    if refused:
        with pytest.raises(CorruptLedger, match=f"offset {record_offset(9)}"):
            open_ledger(tmp_path / "ledger")
        return
    ledger = make_ledger()
    assert ledger.next_entry_id == 10
    assert segment.stat().st_size == record_offset(10)
    assert [ledger.read(i) for i in range(10)] == [payload(i) for i in range(10)]


async def test_a_segment_that_ends_cleanly_below_the_synced_offset_loads_with_an_error(
        make_ledger: LedgerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Whole records lost at the end: nothing after them to save, so no refusal, but
    the loss of acknowledged entries is logged as an error."""
    await write_entries(make_ledger, 10)
    [segment] = segment_files(tmp_path / "ledger")
    _cut(segment, segment.stat().st_size - record_offset(7))
    with caplog.at_level(logging.ERROR, logger="magnetar.storage"):
        ledger = make_ledger()
    assert "acknowledged entries from 7 on are lost" in caplog.text
    assert ledger.next_entry_id == 7


async def test_the_record_follows_the_syncs_at_most_every_interval(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    segment_dir = tmp_path / "ledger" / "ledger"
    ledger = make_ledger(synced_record_interval=3600.0)
    assert read_synced_offset(segment_dir) is None
    ledger.append(payload(0))
    await ledger.flush()
    while read_synced_offset(segment_dir) is None:  # written off the commit path
        await asyncio.sleep(0.001)
    first = read_synced_offset(segment_dir)
    assert first is not None
    assert (first.segment_first_entry_id, first.offset) == (0, record_offset(1))
    for entry_id in range(1, 5):
        ledger.append(payload(entry_id))
        await ledger.flush()
    await asyncio.sleep(0.01)
    lagging = read_synced_offset(segment_dir)
    assert lagging == first  # a lower bound, not rewritten within the interval
    await ledger.close()
    final = read_synced_offset(segment_dir)
    assert final is not None and final.offset == record_offset(5)  # close brings it up


async def test_writing_the_record_never_holds_up_a_commit(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    started = threading.Event()
    real = SyncedOffsetWriter.write

    def stuck_write(self: SyncedOffsetWriter, first: int, offset: int) -> None:
        started.set()
        release.wait(5)
        real(self, first, offset)

    monkeypatch.setattr(SyncedOffsetWriter, "write", stuck_write)
    ledger = make_ledger(synced_record_interval=0.0)
    fired: list[int] = []
    ledger.append(b"first", fired.append)
    await ledger.flush()
    while not started.is_set():  # the record of the first sync is being written
        await asyncio.sleep(0.001)
    for entry_id in range(1, 50):
        ledger.append(payload(entry_id), fired.append)
        await ledger.flush()
    assert fired == list(range(50))  # every commit completed meanwhile
    release.set()
    await ledger.close()


async def test_a_failing_record_write_does_not_fail_the_ledger(
        make_ledger: LedgerFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def broken(self: SyncedOffsetWriter, first: int, offset: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(SyncedOffsetWriter, "write", broken)
    ledger = make_ledger(synced_record_interval=0.0)
    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        for entry_id in range(5):
            ledger.append(payload(entry_id))
            await ledger.flush()
        await ledger.close()
    assert not ledger.failed
    assert "cannot write the synced-offset record" in caplog.text
    # Without a record the ledger loads as before records existed.
    assert read_synced_offset(tmp_path / "ledger" / "ledger") is None
    monkeypatch.undo()
    assert make_ledger().next_entry_id == 5


async def test_a_torn_record_slot_leaves_the_previous_value(tmp_path: Path) -> None:
    writer = SyncedOffsetWriter(tmp_path)
    writer.write(0, 100)
    writer.write(0, 200)
    writer.close()
    record = tmp_path / "synced"
    raw = bytearray(record.read_bytes())
    newest = read_synced_offset(tmp_path)
    assert newest is not None and newest.offset == 200
    slot = (newest.seq % 2) * 4096
    raw[slot + 20] ^= 0xFF  # tear the slot written last
    record.write_bytes(bytes(raw))
    previous = read_synced_offset(tmp_path)
    assert previous is not None and previous.offset == 100
    # A new writer continues after the highest sequence number, not at 1.
    writer = SyncedOffsetWriter(tmp_path)
    writer.write(0, 300)
    writer.close()
    latest = read_synced_offset(tmp_path)
    assert latest is not None and latest.offset == 300


# -------------------------------------------------------------- sealed segments

async def test_sealed_segments_are_trusted_through_their_index_and_not_scanned(
        make_ledger: LedgerFactory, tmp_path: Path, scanned: list[Path]) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    assert len(files) > 3
    assert sorted(p.stem for p in (tmp_path / "ledger" / "ledger").glob("*.idx")) == \
        [p.stem for p in files[:-1]]
    # A payload byte of the second record of a sealed segment rots.
    victim = files[1]
    first = int(victim.stem)
    bad = record_offset(first + 1, first)
    flip(victim, bad + HEADER_SIZE + 1)

    ledger = make_ledger(segment_max_bytes=200)
    assert scanned == [files[-1]]  # only the last segment was CRC-scanned
    assert ledger.next_entry_id == 50
    assert ledger.read(first) == payload(first)
    assert ledger.read(first + 2) == payload(first + 2)
    with pytest.raises(CorruptLedger) as info:
        ledger.read(first + 1)
    assert (info.value.path, info.value.offset) == (victim, bad)
    assert victim.name in str(info.value) and f"offset {bad}" in str(info.value)
    with pytest.raises(CorruptLedger):
        ledger.read_range(first, 10, max_bytes=1 << 20)
    assert ledger.read_range(0, first, max_bytes=1 << 20) == [payload(i) for i in range(first)]


async def test_a_sealed_segment_without_an_index_is_scanned_once(
        make_ledger: LedgerFactory, tmp_path: Path, scanned: list[Path]) -> None:
    """A ledger from before indexes existed: load scans, then writes the indexes."""
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    for index in (tmp_path / "ledger" / "ledger").glob("*.idx"):
        index.unlink()
    files = segment_files(tmp_path / "ledger")
    ledger = make_ledger(segment_max_bytes=200)
    assert scanned == list(reversed(files))
    assert ledger.read_range(0, 100, max_bytes=1 << 20) == [payload(i) for i in range(50)]
    await ledger.close()
    scanned.clear()
    make_ledger(segment_max_bytes=200)
    assert scanned == [files[-1]]


@pytest.mark.parametrize("damage", ["index bit flip", "index cut", "segment grown"])
async def test_an_index_that_does_not_hold_is_ignored(
        make_ledger: LedgerFactory, tmp_path: Path, scanned: list[Path], damage: str,
        caplog: pytest.LogCaptureFixture) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    index = files[1].with_suffix(".idx")
    if damage == "index bit flip":
        flip(index, index.stat().st_size - 3)
    elif damage == "index cut":
        _cut(index, 8)
    else:
        _append(files[1], b"\x00\x00\x00\x05\x00\x00\x00\x00hello")
    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        if damage == "segment grown":  # the scan finds the record no roll wrote
            with pytest.raises(CorruptLedger, match=files[1].name):
                make_ledger(segment_max_bytes=200)
            return
        ledger = make_ledger(segment_max_bytes=200)
    assert files[1] in scanned and files[0] not in scanned
    assert "scanning it" in caplog.text
    assert ledger.read_range(0, 100, max_bytes=1 << 20) == [payload(i) for i in range(50)]


async def test_a_roll_cut_short_after_the_index_leaves_a_trusted_last_segment(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    """A crash after the sealed segment's index, before its successor: the index's
    size counts as synced, and the stale index goes once the segment grows again."""
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    (tmp_path / "ledger" / "ledger" / "synced").unlink()
    files[-1].unlink()  # as if the successor had never been created
    sealed = files[-2]
    first = int(sealed.stem)
    flip(sealed, record_offset(first + 1, first) + HEADER_SIZE)
    with pytest.raises(CorruptLedger, match="below the synced offset"):
        make_ledger(segment_max_bytes=200)
    flip(sealed, record_offset(first + 1, first) + HEADER_SIZE)  # heal it
    ledger = make_ledger(segment_max_bytes=200)
    assert not sealed.with_suffix(".idx").exists()
    assert ledger.append(b"more") == int(files[-1].stem)


async def test_trim_and_recovery_leave_no_stray_index(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger(segment_max_bytes=200)
    for entry_id in range(50):
        ledger.append(payload(entry_id))
    await ledger.flush()
    ledger.trim(20)
    segment_dir = tmp_path / "ledger" / "ledger"
    stems = {p.stem for p in segment_files(tmp_path / "ledger")}
    assert {p.stem for p in segment_dir.glob("*.idx")} <= stems
    await ledger.close()
    (segment_dir / f"{1:020d}.idx").write_bytes(b"orphan")
    (segment_dir / f"{int(max(stems)):020d}.idx.tmp").write_bytes(b"half")
    make_ledger(segment_max_bytes=200)
    assert {p.stem for p in segment_dir.glob("*.idx")} <= stems
    assert not list(segment_dir.glob("*.tmp"))


# ------------------------------------------------------------------- the repair

async def test_truncate_at_corruption_keeps_everything_before_the_bad_record(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    await write_entries(make_ledger, 10)
    [segment] = segment_files(tmp_path / "ledger")
    bad = record_offset(6)
    flip(segment, bad + HEADER_SIZE)
    with pytest.raises(CorruptLedger):
        open_ledger(tmp_path / "ledger")

    preview = truncate_at_corruption(tmp_path / "ledger", dry_run=True)
    assert preview is not None
    assert (preview.path, preview.offset, preview.first_lost_entry_id) == (segment, bad, 6)
    assert preview.removed_segments == []
    with pytest.raises(CorruptLedger):  # a dry run changes nothing
        open_ledger(tmp_path / "ledger")

    done = truncate_at_corruption(tmp_path / "ledger")
    assert done == preview
    ledger = make_ledger()
    assert ledger.next_entry_id == 6
    assert [ledger.read(i) for i in range(6)] == [payload(i) for i in range(6)]
    assert ledger.append(b"after the repair") == 6
    await ledger.close()
    reopened = make_ledger()  # and the new synced record is in force again
    assert reopened.read(6) == b"after the repair"


async def test_truncate_at_corruption_in_a_sealed_segment_drops_the_later_ones(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    victim = files[1]
    first = int(victim.stem)
    flip(victim, record_offset(first + 1, first) + HEADER_SIZE)
    cut = truncate_at_corruption(tmp_path / "ledger")
    assert cut is not None
    assert (cut.path, cut.first_lost_entry_id) == (victim, first + 1)
    assert cut.removed_segments == files[2:]
    assert segment_files(tmp_path / "ledger") == files[:2]
    ledger = make_ledger(segment_max_bytes=200)
    assert ledger.next_entry_id == first + 1
    assert ledger.read_range(0, 100, max_bytes=1 << 20) == [payload(i) for i in range(first + 1)]


async def test_truncate_at_corruption_refuses_an_open_ledger(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger()
    ledger.append(b"x")
    await ledger.flush()
    with pytest.raises(StorageError, match="already open"):
        truncate_at_corruption(tmp_path / "ledger")
    with pytest.raises(FileNotFoundError, match="not a ledger directory"):
        truncate_at_corruption(tmp_path / "nothing-here")
    await ledger.close()
    assert truncate_at_corruption(tmp_path / "ledger") is None  # nothing bad


async def test_the_store_repairs_a_topic_by_name(tmp_path: Path) -> None:
    store = Store(tmp_path, LedgerConfig())
    topic = "persistent://public/default/rotten"
    ledger = store.open_ledger(topic)
    for entry_id in range(5):
        ledger.append(payload(entry_id))
    await ledger.close()
    [segment] = segment_files(store.topic_dir(topic))
    flip(segment, record_offset(2) + HEADER_SIZE)
    with pytest.raises(CorruptLedger):
        store.open_ledger(topic)
    cut = store.truncate_at_corruption(topic)
    assert cut is not None and cut.first_lost_entry_id == 2
    ledger = store.open_ledger(topic)
    assert ledger.next_entry_id == 2
    await ledger.close()
