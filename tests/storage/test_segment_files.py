"""Sealed segments share a bound on open files: closed when idle, reopened on read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from magnetar.storage import LedgerConfig, ManagedLedger, Store
from magnetar.storage.segment_files import SegmentFiles

from .helpers import payload, segment_files

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")

TOPICS = 50
ENTRIES = 40  # ten entries of 92 bytes per 1000-byte segment: three sealed, one active


def open_segment_files(root: Path) -> list[Path]:
    """The segment files under ``root`` this process holds a descriptor of."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:
            continue  # the descriptor of the listing itself, gone by now
        if target.suffix == ".seg" and root in target.parents:
            found.append(target)
    return found


def sealed_open(root: Path, ledgers: list[ManagedLedger]) -> list[Path]:
    active = {segment_files(ledger.directory)[-1] for ledger in ledgers}
    return [path for path in open_segment_files(root) if path not in active]


def config(budget: int) -> LedgerConfig:
    return LedgerConfig(segment_max_bytes=1000, max_open_segment_files=budget,
                        inline_sync_max_entries=0, cache_max_bytes=0)


async def fill(store: Store) -> list[ManagedLedger]:
    ledgers = [store.open_ledger(f"persistent://t/ns/topic-{n}") for n in range(TOPICS)]
    for ledger in ledgers:
        for entry_id in range(ENTRIES):
            ledger.append(payload(entry_id, size=92))
    for ledger in ledgers:
        await ledger.flush()
        assert len(segment_files(ledger.directory)) == 4
    return ledgers


def read_everything(ledgers: list[ManagedLedger]) -> None:
    expected = [payload(i, size=92) for i in range(ENTRIES)]
    for ledger in ledgers:
        assert [ledger.read(i) for i in range(ENTRIES)] == expected
    for ledger in ledgers:
        assert ledger.read_range(0, ENTRIES, max_bytes=1 << 20) == expected


async def test_fifty_ledgers_hold_at_most_the_budget_of_sealed_files(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = Store(root, config(20))
    ledgers = await fill(store)  # every roll seals a segment whose descriptor joins
    try:
        assert len(sealed_open(root, ledgers)) <= 20
        assert len(store.segment_files) == 20
        read_everything(ledgers)
        assert len(sealed_open(root, ledgers)) <= 20
        assert store.segment_files.opens > 0 and store.segment_files.closes > 0
        # Active segments keep their descriptor, whatever the budget.
        assert len(open_segment_files(root)) == len(sealed_open(root, ledgers)) + TOPICS
    finally:
        for ledger in ledgers:
            await ledger.close()
    assert open_segment_files(root) == []
    assert len(store.segment_files) == 0


async def test_reopened_ledgers_open_sealed_segments_only_to_read(tmp_path: Path) -> None:
    root = tmp_path / "data"
    ledgers = await fill(Store(root, config(512)))
    for ledger in ledgers:
        await ledger.close()
    store = Store(root, config(20))
    ledgers = [store.open_ledger(f"persistent://t/ns/topic-{n}") for n in range(TOPICS)]
    try:
        assert sealed_open(root, ledgers) == []  # recovery leaves them closed
        read_everything(ledgers)
        assert 0 < len(sealed_open(root, ledgers)) <= 20
        # Trimming closes what it removes, open or not.
        for ledger in ledgers:
            assert ledger.trim(30) == 30
        assert sealed_open(root, ledgers) == []
        assert len(store.segment_files) == 0
        assert [ledger.read(35) for ledger in ledgers] == [payload(35, size=92)] * TOPICS
    finally:
        for ledger in ledgers:
            await ledger.close()


async def test_a_lone_ledger_has_a_budget_of_its_own(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path / "one", config(1))
    try:
        for entry_id in range(ENTRIES):
            ledger.append(payload(entry_id, size=92))
        await ledger.flush()
        read_everything([ledger])
        assert len(sealed_open(tmp_path, [ledger])) == 1
    finally:
        await ledger.close()


def test_stores_can_share_the_bound(tmp_path: Path) -> None:
    first = Store(tmp_path / "a", config(7))
    second = Store(tmp_path / "b", config(99), segment_files=first.segment_files)
    assert second.segment_files is first.segment_files
    assert first.segment_files.max_open == 7


def test_validation() -> None:
    with pytest.raises(ValueError):
        SegmentFiles(0)
    with pytest.raises(ValueError):
        LedgerConfig(max_open_segment_files=0)
