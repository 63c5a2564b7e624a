"""Opening a ledger after a crash: torn tails are cut, real damage is refused.

What is a torn tail and what is damage depends on the synced-offset record (how far
the last segment is known durable) and on the index files of sealed segments; the
tests for those, and for the explicit repair, are in test_corruption.py.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from magnetar.storage import LedgerConfig, ManagedLedger, StorageCorruption
from magnetar.storage.record import HEADER_SIZE

from .conftest import LedgerFactory
from .helpers import payload, segment_files


async def write_entries(make_ledger: LedgerFactory, count: int, **config: object) -> None:
    ledger = make_ledger(**config)
    for entry_id in range(count):
        ledger.append(payload(entry_id))
    await ledger.close()


async def write_entries_record_lagging(make_ledger: LedgerFactory, tmp_path: Path,
                                       count: int, synced: int, **config: object) -> None:
    """``count`` entries whose synced-offset record only covers the first ``synced``:
    what a crash leaves when the last entries were written but not (known) synced."""
    await write_entries(make_ledger, synced, **config)
    record = tmp_path / "ledger" / "ledger" / "synced"
    lagging = record.read_bytes()
    ledger = make_ledger(**config)
    for entry_id in range(synced, count):
        ledger.append(payload(entry_id))
    await ledger.close()
    record.write_bytes(lagging)


def cut(nbytes: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        os.truncate(path, path.stat().st_size - nbytes)
    return damage


def append_bytes(data: bytes) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "ab") as file:
            file.write(data)
    return damage


def flip_last_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))


# Each case: damage applied to the last segment, number of entries (of 10) that survive.
CASES = {
    "cut mid-data": (cut(3), 9),
    "cut mid-header": (cut(len(payload(9)) + 3), 9),
    "garbage appended": (append_bytes(b"\x00\x00\x10\x00garbage"), 10),
    "short garbage": (append_bytes(b"\x01\x02"), 10),
    "torn record in reserved space": (
        append_bytes(b"\x00\x00\x00\x20\x12\x34\x56\x78part" + bytes(4096)), 10
    ),
    "flipped byte in the last record": (flip_last_byte, 9),
}


async def test_reserved_space_left_by_a_crash_is_released_quietly(
        make_ledger: LedgerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ledger = make_ledger()
    for entry_id in range(10):
        ledger.append(payload(entry_id))
    await ledger.flush()
    [segment] = segment_files(tmp_path / "ledger")
    good_size = sum(HEADER_SIZE + len(payload(i)) for i in range(10))
    assert segment.stat().st_size > good_size  # zeros reserved ahead of the writes
    # What a kill -9 leaves: the files as they are now, reserve included.
    crashed = tmp_path / "crashed"
    shutil.copytree(tmp_path / "ledger", crashed, ignore=shutil.ignore_patterns("lock"))
    await ledger.close()

    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        recovered = make_ledger(crashed)
    assert caplog.text == ""
    [copy] = segment_files(crashed)
    assert copy.stat().st_size == good_size
    assert [recovered.read(i) for i in range(10)] == [payload(i) for i in range(10)]
    assert recovered.append(b"new") == 10
    await recovered.close()


@pytest.mark.parametrize("record", ["lagging", "absent"])
@pytest.mark.parametrize("case", list(CASES))
async def test_torn_tail_of_the_last_segment_is_truncated(
        make_ledger: LedgerFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        case: str, record: str) -> None:
    """Damage beyond the synced offset (the record covers entries 0..8 only), or in
    a ledger without a synced-offset record (as written before it existed)."""
    damage, survivors = CASES[case]
    await write_entries_record_lagging(make_ledger, tmp_path, 10, synced=9)
    if record == "absent":
        (tmp_path / "ledger" / "ledger" / "synced").unlink()
    [segment] = segment_files(tmp_path / "ledger")
    good_size = sum(HEADER_SIZE + len(payload(i)) for i in range(survivors))
    damage(segment)
    dropped = segment.stat().st_size - good_size

    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        ledger = make_ledger()
    assert f"dropped {dropped} bytes" in caplog.text
    assert segment.stat().st_size == good_size
    assert ledger.next_entry_id == survivors
    assert ledger.last_confirmed_entry_id == survivors - 1
    assert [ledger.read(i) for i in range(survivors)] == [payload(i) for i in range(survivors)]
    # Appends continue with the right ids, right after the last good record.
    assert ledger.append(b"new") == survivors
    await ledger.close()
    reopened = make_ledger()
    assert reopened.read(survivors) == b"new"
    assert reopened.next_entry_id == survivors + 1


async def test_torn_tail_with_several_segments(make_ledger: LedgerFactory,
                                               tmp_path: Path) -> None:
    await write_entries_record_lagging(make_ledger, tmp_path, 50, synced=48,
                                       segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    assert len(files) > 3
    cut(2)(files[-1])
    ledger = make_ledger(segment_max_bytes=200)
    assert ledger.next_entry_id == 49
    assert ledger.read_range(0, 100, max_bytes=1 << 20) == [payload(i) for i in range(49)]


async def test_corruption_in_an_earlier_segment_without_an_index_is_refused(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    """A sealed segment without an index (written before indexes existed) is scanned."""
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    for index in (tmp_path / "ledger" / "ledger").glob("*.idx"):
        index.unlink()
    files = segment_files(tmp_path / "ledger")
    victim = files[1]
    raw = bytearray(victim.read_bytes())
    first_len = int.from_bytes(raw[:4], "big")
    offset = HEADER_SIZE + first_len  # the second record of the segment
    raw[offset + HEADER_SIZE] ^= 0x01
    victim.write_bytes(bytes(raw))
    with pytest.raises(StorageCorruption) as info:
        ManagedLedger.open(tmp_path / "ledger", LedgerConfig(segment_max_bytes=200))
    message = str(info.value)
    assert victim.name in message
    assert f"offset {offset}" in message
    # Nothing was changed on disk, and the directory is not left locked.
    assert victim.read_bytes() == bytes(raw)
    with pytest.raises(StorageCorruption):
        ManagedLedger.open(tmp_path / "ledger", LedgerConfig(segment_max_bytes=200))


async def test_truncated_earlier_segment_is_refused(make_ledger: LedgerFactory,
                                                    tmp_path: Path) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    cut(1)(files[0])
    with pytest.raises(StorageCorruption, match=files[0].name):
        ManagedLedger.open(tmp_path / "ledger", LedgerConfig())


async def test_empty_last_segment_after_a_roll(make_ledger: LedgerFactory,
                                               tmp_path: Path) -> None:
    await write_entries(make_ledger, 10)
    # A crash right after a roll leaves the new segment empty.
    (tmp_path / "ledger" / "ledger" / f"{10:020d}.seg").touch()
    ledger = make_ledger()
    assert (ledger.first_entry_id, ledger.next_entry_id) == (0, 10)
    assert ledger.append(b"x") == 10
    await ledger.flush()
    assert ledger.read(10) == b"x"


async def test_gap_left_by_an_interrupted_trim(make_ledger: LedgerFactory, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    files[2].unlink()  # the trim's later unlinks survived, the earlier ones did not
    with caplog.at_level(logging.WARNING, logger="magnetar.storage"):
        ledger = make_ledger(segment_max_bytes=200)
    assert "interrupted trim" in caplog.text
    assert not files[0].exists() and not files[1].exists()
    first = int(files[3].stem)
    assert ledger.first_entry_id == first
    assert ledger.read(first) == payload(first)


async def test_overlapping_segments_are_refused(make_ledger: LedgerFactory,
                                                tmp_path: Path) -> None:
    await write_entries(make_ledger, 50, segment_max_bytes=200)
    files = segment_files(tmp_path / "ledger")
    first = int(files[2].stem)
    files[2].rename(files[2].with_name(f"{first + 1:020d}.seg"))
    with pytest.raises(StorageCorruption, match="overlap"):
        ManagedLedger.open(tmp_path / "ledger", LedgerConfig())


async def test_other_files_in_the_segment_directory_are_ignored(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    await write_entries(make_ledger, 5)
    (tmp_path / "ledger" / "ledger" / "notes.txt").write_text("hello")
    (tmp_path / "ledger" / "ledger" / "123.seg").write_text("not a segment name")
    ledger = make_ledger()
    assert ledger.next_entry_id == 5
