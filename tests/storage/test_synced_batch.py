"""The synced-offset record writes of ledgers due in one loop turn share a worker job."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import magnetar.storage.synced_batch as batch_module
from magnetar.storage import LedgerConfig, Store
from magnetar.storage.synced_offset import read_synced_offset


async def test_the_ledgers_record_writes_go_through_the_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs: list[int] = []
    real = batch_module._write_all

    def counting(writes: list[batch_module.Write]) -> list[BaseException | None]:
        jobs.append(len(writes))
        return real(writes)

    monkeypatch.setattr(batch_module, "_write_all", counting)
    store = Store(tmp_path, LedgerConfig(synced_record_interval=0.0))
    ledgers = [store.open_ledger(f"persistent://public/default/t{i}") for i in range(3)]
    try:
        for ledger in ledgers:
            ledger.make_durable()
            ledger.append(b"entry")
        await asyncio.gather(*(ledger.flush() for ledger in ledgers))
        segment_dirs = [ledger.directory / "ledger" for ledger in ledgers]
        for _ in range(2000):
            if all(read_synced_offset(d) is not None for d in segment_dirs):
                break
            await asyncio.sleep(0.001)
        assert all(read_synced_offset(d) is not None for d in segment_dirs)
        # Every record went through the batch (the syncs may complete in one loop
        # turn or several: each turn's writes are one job).
        assert jobs and sum(jobs) == 3
    finally:
        for ledger in ledgers:
            await ledger.close()


async def test_writes_submitted_in_one_turn_run_in_one_job_and_report_each_outcome(
        monkeypatch: pytest.MonkeyPatch) -> None:
    jobs: list[int] = []
    real = batch_module._write_all

    def counting(writes: list[batch_module.Write]) -> list[BaseException | None]:
        jobs.append(len(writes))
        return real(writes)

    monkeypatch.setattr(batch_module, "_write_all", counting)
    batch = batch_module.record_batch(asyncio.get_running_loop(), None)
    done: list[int] = []

    def broken() -> None:
        raise OSError(5, "Input/output error")

    futures = [batch.submit(lambda i=i: done.append(i)) for i in range(4)]
    futures.append(batch.submit(broken))
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert jobs == [5] and done == [0, 1, 2, 3]
    assert outcomes[:4] == [None] * 4 and isinstance(outcomes[4], OSError)
