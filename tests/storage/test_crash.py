"""SIGKILL a process that is appending, then check that everything it was told is durable is."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from magnetar.storage import LedgerConfig, ManagedLedger

from .helpers import payload

CHILD = r"""
import asyncio, os, sys
from pathlib import Path
from magnetar.storage import LedgerConfig, ManagedLedger

def payload(entry_id):
    return f"entry-{entry_id}:".encode() * (1 + entry_id % 7)

async def main():
    config = LedgerConfig(segment_max_bytes=int(sys.argv[2]), sync_policy="always")
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


def run_and_kill(directory: Path, segment_max_bytes: int, wanted: int) -> list[int]:
    """Start the child, SIGKILL it once it has printed ``wanted`` ids; return all printed ids."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(directory), str(segment_max_bytes)],
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

        ledger = ManagedLedger.open(directory, LedgerConfig(segment_max_bytes=segment_max_bytes))
        try:
            assert ledger.last_confirmed_entry_id >= confirmed[-1]
            for entry_id in confirmed:
                assert ledger.read(entry_id) == payload(entry_id)
            confirmed = list(range(ledger.next_entry_id))  # all recovered entries are confirmed
        finally:
            asyncio.run(ledger.close())
