"""The compacted ledger file (written once, read by position) and the log snapshot a
worker thread reads a ledger's entries through, on real files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from magnetar.storage import StorageCorruption
from magnetar.storage.compacted_ledger import (
    CompactedLedger,
    CompactedLedgerWriter,
    compacted_dir,
    new_file_name,
    open_in_force,
)
from magnetar.storage.errors import CorruptLedger

from .conftest import LedgerFactory
from .helpers import payload


def write(path: Path, entries: dict[int, bytes], horizon: int,
          masks: dict[int, int] | None = None) -> CompactedLedger:
    writer = CompactedLedgerWriter(path)
    for position in sorted(entries):
        writer.add(position, entries[position], (masks or {}).get(position))
    return writer.finish(horizon)


# ------------------------------------------------------------ the file


def test_round_trip_by_position(tmp_path: Path) -> None:
    entries = {3: b"three", 7: b"seven" * 1000, 8: b"eight", 20: b"twenty"}
    path = tmp_path / "c" / new_file_name(1)
    ledger = write(path, entries, horizon=25, masks={7: 0b101})
    try:
        assert not path.with_name(path.name + ".tmp").exists()
        assert ledger.horizon == 25
        assert ledger.count == 4
        assert ledger.first_position == 3
        for position, data in entries.items():
            assert ledger.read(position) == data
            assert ledger.contains(position)
        assert not ledger.contains(4)
        with pytest.raises(KeyError):
            ledger.read(4)
        assert [ledger.next_at_or_after(p) for p in (0, 3, 4, 8, 9, 20, 21)] == [
            3, 3, 7, 8, 20, 20, None,
        ]
        assert ledger.retained(7) == 0b101
        assert ledger.retained(8) is None
        assert list(ledger.entries()) == sorted(entries.items())
    finally:
        ledger.close()
    reopened = CompactedLedger.open(path)  # as a restart finds it
    try:
        assert list(reopened.entries()) == sorted(entries.items())
        assert (reopened.horizon, reopened.retained(7)) == (25, 0b101)
    finally:
        reopened.close()


def test_an_empty_compaction_is_a_valid_file(tmp_path: Path) -> None:
    """Every key deleted: nothing kept, yet the horizon says what was compacted."""
    ledger = write(tmp_path / new_file_name(2), {}, horizon=99)
    try:
        assert (ledger.count, ledger.first_position, ledger.horizon) == (0, None, 99)
        assert ledger.next_at_or_after(0) is None
        assert list(ledger.entries()) == []
    finally:
        ledger.close()


def test_entries_walks_many_chunks(tmp_path: Path) -> None:
    entries = {i * 2: payload(i, 300_000) for i in range(12)}  # several 1 MB preads
    ledger = write(tmp_path / new_file_name(1), entries, horizon=30)
    try:
        assert list(ledger.entries()) == sorted(entries.items())
    finally:
        ledger.close()


def test_positions_must_ascend(tmp_path: Path) -> None:
    writer = CompactedLedgerWriter(tmp_path / new_file_name(1))
    writer.add(5, b"x")
    with pytest.raises(ValueError):
        writer.add(5, b"y")
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_record_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / new_file_name(1)
    write(path, {1: b"a" * 100, 2: b"b" * 100}, horizon=2).close()
    raw = bytearray(path.read_bytes())
    raw[8 + 8 + 100 + 8 + 50] ^= 0xFF  # inside the second record's data
    path.write_bytes(bytes(raw))
    ledger = CompactedLedger.open(path)
    try:
        assert ledger.read(1) == b"a" * 100
        with pytest.raises(StorageCorruption):
            ledger.read(2)
    finally:
        ledger.close()


@pytest.mark.parametrize("cut", ["trailer", "index", "magic"])
def test_a_damaged_file_does_not_open(tmp_path: Path, cut: str) -> None:
    path = tmp_path / new_file_name(1)
    write(path, {1: b"a" * 100, 2: b"b" * 100}, horizon=2).close()
    raw = bytearray(path.read_bytes())
    if cut == "trailer":
        raw = raw[:-3]
    elif cut == "index":
        raw[-40] ^= 0xFF
    else:
        raw[0] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(StorageCorruption):
        CompactedLedger.open(path)


def test_open_in_force_keeps_only_the_file_the_metadata_names(tmp_path: Path) -> None:
    directory = compacted_dir(tmp_path)
    current = new_file_name(2)
    write(directory / new_file_name(1), {1: b"old"}, horizon=1).close()  # replaced
    write(directory / current, {1: b"new"}, horizon=3).close()
    (directory / (new_file_name(3) + ".tmp")).write_bytes(b"unfinished")  # a crash
    ledger = open_in_force(tmp_path, current)
    assert ledger is not None
    try:
        assert ledger.read(1) == b"new"
        assert [p.name for p in directory.iterdir()] == [current]
    finally:
        ledger.close()
    assert open_in_force(tmp_path / "never-compacted", None) is None


def test_open_in_force_survives_a_damaged_file(tmp_path: Path) -> None:
    """The topic stays available: its compacted readers read the log itself."""
    directory = compacted_dir(tmp_path)
    name = new_file_name(1)
    directory.mkdir()
    (directory / name).write_bytes(b"not a compacted ledger at all, nor long enough")
    assert open_in_force(tmp_path, name) is None
    assert open_in_force(tmp_path / "gone", "missing.cled") is None


def test_names_never_repeat() -> None:
    assert len({new_file_name(1) for _ in range(1000)}) == 1000


# ------------------------------------------------------------ the log snapshot


async def test_snapshot_reads_what_the_ledger_holds_from_another_thread(
    make_ledger: LedgerFactory, tmp_path: Path
) -> None:
    ledger = make_ledger(segment_max_bytes=4096)  # many segments
    for i in range(300):
        ledger.append(payload(i))
    await ledger.flush()
    assert len(list((tmp_path / "ledger" / "ledger").glob("*.seg"))) >= 3
    snapshot = ledger.log_snapshot(10, 250)
    assert snapshot.count == 241
    found: list[tuple[int, bytes]] = []
    worker = threading.Thread(target=lambda: found.extend(snapshot.entries()))
    worker.start()
    worker.join(30)
    assert found == [(i, payload(i)) for i in range(10, 251)]


async def test_snapshot_stops_at_what_is_durable(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    for i in range(5):
        ledger.append(payload(i))
    await ledger.flush()
    snapshot = ledger.log_snapshot(0, 1000)
    assert [p for p, _ in snapshot.entries()] == [0, 1, 2, 3, 4]
    assert ledger.log_snapshot(5, 1000).count == 0


async def test_snapshot_checks_every_record(make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger()
    for _ in range(3):
        ledger.append(b"x" * 64)
    await ledger.flush()
    snapshot = ledger.log_snapshot(0, 2)
    (segment,) = (tmp_path / "ledger" / "ledger").glob("*.seg")
    fd = os.open(segment, os.O_RDWR)
    try:
        os.pwrite(fd, b"\xff", 8 + 64 + 8 + 10)  # the second record's data
    finally:
        os.close(fd)
    with pytest.raises(CorruptLedger):
        list(snapshot.entries())


async def test_snapshot_of_trimmed_segments_fails_rather_than_lies(
    make_ledger: LedgerFactory,
) -> None:
    ledger = make_ledger(segment_max_bytes=2048)
    for i in range(100):
        ledger.append(payload(i))
    await ledger.flush()
    snapshot = ledger.log_snapshot(0, 99)
    assert ledger.trim(60) > 0
    with pytest.raises(FileNotFoundError):
        list(snapshot.entries())
