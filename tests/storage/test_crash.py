"""SIGKILL a process that is appending, then check that everything it was told is durable is.

Also with the damage a power loss could add on top: a torn, unsynced tail is cut, but a
bit flip in an acknowledged record below the synced offset is refused until repaired.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from magnetar.storage import CorruptLedger, LedgerConfig, ManagedLedger, truncate_at_corruption
from magnetar.storage.record import HEADER_SIZE
from magnetar.storage.segment import scan_file, segment_path
from magnetar.storage.synced_offset import read_synced_offset

from .helpers import payload, segment_files

CHILD = r"""
import asyncio, os, sys
from pathlib import Path
from magnetar.storage import LedgerConfig, ManagedLedger

def payload(entry_id):
    return f"entry-{entry_id}:".encode() * (1 + entry_id % 7)

async def main():
    config = LedgerConfig(segment_max_bytes=int(sys.argv[2]), sync_policy="always",
                          synced_record_interval=float(sys.argv[3]))
    ledger = ManagedLedger.open(Path(sys.argv[1]), config)

    def durable(entry_id):
        os.write(1, b"%d\n" % entry_id)  # unbuffered: printed means on_durable ran

    while True:
        for _ in range(25):
            ledger.append(payload(ledger.next_entry_id), durable)
        await asyncio.sleep(0)
        while ledger.next_entry_id - ledger.last_confirmed_entry_id > 500:
            await asyncio.sleep(0.0005)

asyncio.run(main())
"""


def run_and_kill(directory: Path, segment_max_bytes: int, wanted: int,
                 synced_record_interval: float = 0.001) -> list[int]:
    """Start the child, SIGKILL it once it has printed ``wanted`` ids; return all printed ids."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(segment_max_bytes),
         str(synced_record_interval)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    printed: list[int] = []
    deadline = time.monotonic() + 30
    try:
        while len(printed) < wanted and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            printed.append(int(line))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        # Read through the buffered pipe objects: readline() may have read ahead.
        rest = proc.stdout.read()
        assert proc.stderr is not None
        err = proc.stderr.read()
        proc.wait(timeout=10)
    assert len(printed) >= wanted, err.decode()
    # Only complete lines count: a line cut by the kill was never fully printed.
    printed += [int(line) for line in rest.split(b"\n")[:-1]]
    return printed


def test_entries_acknowledged_before_sigkill_survive(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    segment_max_bytes = 16 * 1024  # small, so the kill may land around a roll too
    confirmed: list[int] = []
    for _round in range(3):  # each round recovers what the previous kill left behind
        start = confirmed[-1] + 1 if confirmed else 0
        printed = run_and_kill(directory, segment_max_bytes, wanted=2000)
        # on_durable ran in append order, continuing after the recovered entries.
        assert printed[0] >= start
        assert printed == list(range(printed[0], printed[0] + len(printed)))
        confirmed += printed
        # The synced-offset record never claims an entry that was not acknowledged
        # (the pipeline records a sync after its callbacks ran).
        assert highest_recorded_entry(directory) <= confirmed[-1]

        ledger = ManagedLedger.open(directory, LedgerConfig(segment_max_bytes=segment_max_bytes))
        try:
            assert ledger.last_confirmed_entry_id >= confirmed[-1]
            for entry_id in confirmed:
                assert ledger.read(entry_id) == payload(entry_id)
            confirmed = list(range(ledger.next_entry_id))  # all recovered entries are confirmed
        finally:
            asyncio.run(ledger.close())


def highest_recorded_entry(directory: Path) -> int:
    """The highest entry id the synced-offset record says is durable (-1: none)."""
    record = read_synced_offset(directory / "ledger")
    if record is None:
        return -1
    first = record.segment_first_entry_id
    offsets = scan_file(segment_path(directory / "ledger", first)).offsets
    return first + sum(1 for offset in offsets if offset < record.offset) - 1


def acknowledged_end(directory: Path, last_acknowledged: int) -> tuple[Path, int]:
    """The last segment, and the offset where the record after ``last_acknowledged`` starts."""
    segment = segment_files(directory)[-1]
    first = int(segment.stem)
    offsets = scan_file(segment).offsets
    index = last_acknowledged + 1 - first
    return segment, offsets[index] if index < len(offsets) else segment.stat().st_size


def test_a_torn_unsynced_tail_after_sigkill_is_cut(tmp_path: Path) -> None:
    """A power loss right after the kill: whatever was not acknowledged may be lost or
    garbage, here half a record written over it; the record covers only what was
    acknowledged, so load cuts the tail and keeps every acknowledged entry."""
    directory = tmp_path / "ledger"
    printed = run_and_kill(directory, 1 << 20, wanted=1500)
    segment, end = acknowledged_end(directory, printed[-1])
    with open(segment, "r+b") as file:
        file.truncate(end)
        file.seek(end)
        file.write(b"\x00\x00\x01\x00\xde\xad\xbe\xefhalf a rec")
    ledger = ManagedLedger.open(directory, LedgerConfig(segment_max_bytes=1 << 20))
    try:
        assert ledger.next_entry_id == printed[-1] + 1
        assert [ledger.read(i) for i in printed] == [payload(i) for i in printed]
    finally:
        asyncio.run(ledger.close())


def test_a_bit_flip_in_an_acknowledged_record_after_sigkill_is_refused(tmp_path: Path) -> None:
    directory = tmp_path / "ledger"
    printed = run_and_kill(directory, 1 << 20, wanted=1500)
    recorded = highest_recorded_entry(directory)
    assert 0 < recorded <= printed[-1]
    victim = recorded // 2
    [segment] = segment_files(directory)
    offset = scan_file(segment).offsets[victim]
    raw = bytearray(segment.read_bytes())
    raw[offset + HEADER_SIZE + 3] ^= 0x10
    segment.write_bytes(bytes(raw))

    with pytest.raises(CorruptLedger) as info:
        ManagedLedger.open(directory, LedgerConfig(segment_max_bytes=1 << 20))
    assert (info.value.path, info.value.offset) == (segment, offset)
    assert f"{segment}: CRC mismatch at offset {offset}" in str(info.value)

    cut = truncate_at_corruption(directory)
    assert cut is not None and cut.first_lost_entry_id == victim
    ledger = ManagedLedger.open(directory, LedgerConfig(segment_max_bytes=1 << 20))
    try:
        assert ledger.next_entry_id == victim
        assert [ledger.read(i) for i in range(victim)] == [payload(i) for i in range(victim)]
    finally:
        asyncio.run(ledger.close())
