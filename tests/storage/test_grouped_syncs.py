"""The syncs of many ledgers due in one loop turn go to the disk-job threads a group
at a time, each ledger with its own outcome (storage/grouped_syncs.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import magnetar.storage.ledger as ledger_module
from magnetar.storage import LedgerConfig
from magnetar.storage.fsutil import fdatasync as real_fdatasync
from magnetar.storage.grouped_syncs import GROUP_MAX, SyncGroups
from magnetar.storage.job_threads import JobThreads
from magnetar.storage.store import Store

T = TypeVar("T")


class CountingThreads(JobThreads):
    """Real disk-job threads that count the jobs handed to them."""

    def __init__(self) -> None:
        super().__init__(max_threads=4, name="test-disk")
        self.jobs = 0

    def run(self, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], *args: Any
            ) -> asyncio.Future[T]:
        self.jobs += 1
        return super().run(loop, fn, *args)


async def test_the_jobs_of_one_turn_share_worker_jobs_and_keep_their_own_outcomes() -> None:
    threads = CountingThreads()
    groups = SyncGroups(asyncio.get_running_loop(), threads, group_max=4)
    ran_on: list[int] = []

    def job(n: int) -> int:
        ran_on.append(threading.get_ident())
        if n == 5:
            raise OSError(5, "Input/output error")
        return n * 10

    futures = [groups.run(job, n) for n in range(10)]  # one turn: groups of 4, 4 and 2
    outcomes = await asyncio.gather(*futures, return_exceptions=True)
    assert threads.jobs == 3
    assert outcomes[:5] == [0, 10, 20, 30, 40] and outcomes[6:] == [60, 70, 80, 90]
    assert isinstance(outcomes[5], OSError)  # only its own future fails
    assert threading.get_ident() not in ran_on
    # A later turn makes groups of its own.
    assert await groups.run(job, 1) == 10
    assert threads.jobs == 4


async def test_ledgers_syncing_in_one_turn_take_a_thread_per_group_not_one_each(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    syncs: list[int] = []  # the thread of each segment fdatasync

    def slow_fdatasync(fd: int) -> None:
        syncs.append(threading.get_ident())
        time.sleep(0.002)  # side by side, one job each would take as many threads as free
        real_fdatasync(fd)

    # Syncs count as fast however busy the machine is (grouping stops on a slow disk).
    store = Store(tmp_path, LedgerConfig(inline_sync_max_seconds=3600.0))
    count = GROUP_MAX + 2
    ledgers = [store.open_ledger(f"persistent://public/default/t{i}") for i in range(count)]
    try:
        for ledger in ledgers:  # their first syncs (and the fsyncs the new topics owe)
            ledger.append(b"first")
        await asyncio.gather(*(ledger.flush() for ledger in ledgers))
        monkeypatch.setattr(ledger_module, "fdatasync", slow_fdatasync)
        confirmed: list[int] = []
        for ledger in ledgers:  # one turn: every ledger has a write due, none syncs inline
            ledger.append(b"second", confirmed.append)
        await asyncio.gather(*(ledger.flush() for ledger in ledgers))
        assert confirmed == [1] * count
        assert len(syncs) == count
        # Two groups, each synced in turn by one job (maybe both by one thread); with a
        # job each, they took as many threads as the pool had.
        assert len(set(syncs)) <= 2
    finally:
        for ledger in ledgers:
            await ledger.close()
