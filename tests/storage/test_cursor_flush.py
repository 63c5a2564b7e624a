"""Cursor flushes: the file work runs on a worker thread, and nothing acked is lost."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import threading
from pathlib import Path

import pytest

import magnetar.storage.cursor as cursor_module
from magnetar.storage import ManagedCursor
from magnetar.storage.fsutil import atomic_write

from .conftest import LedgerFactory


def persisted_mark(path: Path) -> int:
    mark = json.loads(path.read_bytes())["mark_delete"]
    assert isinstance(mark, int)
    return mark


class BlockingWrite:
    """Stands in for atomic_write: records the thread and can hold a write back."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.started = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.failures: dict[str, int] = {}  # file stem: how many writes of it fail

    def __call__(self, path: Path, data: bytes) -> None:
        self.threads.append(threading.current_thread())
        self.started.set()
        assert self.release.wait(30)
        if self.failures.get(path.stem):
            self.failures[path.stem] -= 1
            raise OSError(errno.ENOSPC, "No space left on device")
        atomic_write(path, data)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> BlockingWrite:
    hook = BlockingWrite()
    monkeypatch.setattr(cursor_module, "atomic_write", hook)
    return hook


async def test_the_file_work_runs_off_the_loop_thread(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursors = [ledger.open_cursor(name, -1) for name in ("a", "b", "c")]
    writes.threads.clear()
    for position, cursor in enumerate(cursors):
        cursor.ack_cumulative(position)
    assert ledger.has_dirty_cursors()
    await ledger.flush_cursors_async()
    loop_thread = threading.current_thread()
    assert len(writes.threads) == 3
    assert all(thread is not loop_thread for thread in writes.threads)
    assert not ledger.has_dirty_cursors()
    assert [persisted_mark(c.path) for c in cursors] == [0, 1, 2]
    # Nothing dirty: nothing written.
    await ledger.flush_cursors_async()
    assert len(writes.threads) == 3


async def test_an_ack_during_a_flush_keeps_the_cursor_dirty_for_the_next(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(4)
    writes.release.clear()
    writes.started.clear()
    flush = asyncio.ensure_future(ledger.flush_cursors_async())
    await asyncio.get_running_loop().run_in_executor(None, writes.started.wait)
    cursor.ack([5, 7])  # while the worker writes mark_delete 4
    writes.release.set()
    await flush
    assert persisted_mark(cursor.path) == 4
    assert cursor.dirty  # the ack came after the snapshot
    await ledger.flush_cursors_async()
    assert not cursor.dirty
    doc = json.loads(cursor.path.read_bytes())
    assert (doc["mark_delete"], doc["acked"]) == (5, [[7, 7]])


async def test_a_second_flush_waits_for_the_one_in_progress(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(1)
    writes.release.clear()
    writes.started.clear()
    first = asyncio.ensure_future(ledger.flush_cursors_async())
    await asyncio.get_running_loop().run_in_executor(None, writes.started.wait)
    cursor.ack_cumulative(2)
    second = asyncio.ensure_future(ledger.flush_cursors_async())
    await asyncio.sleep(0)
    assert not second.done()
    writes.release.set()
    await asyncio.gather(first, second)
    assert persisted_mark(cursor.path) == 2
    assert not cursor.dirty


async def test_a_failed_write_is_logged_and_retried_next_round(
        make_ledger: LedgerFactory, writes: BlockingWrite,
        caplog: pytest.LogCaptureFixture) -> None:
    ledger = make_ledger()
    ok = ledger.open_cursor("ok", -1)
    bad = ledger.open_cursor("bad", -1)
    bad.ack_cumulative(3)
    ok.ack_cumulative(8)
    writes.failures["bad"] = 1
    with caplog.at_level(logging.ERROR, logger="magnetar.storage"):
        await ledger.flush_cursors_async()
    assert bad.dirty and not ok.dirty  # the other cursor of the round was written
    assert (persisted_mark(ok.path), persisted_mark(bad.path)) == (8, -1)
    messages = [record.getMessage() for record in caplog.records]
    assert any("cannot persist cursor bad" in message and "No space" in message
               for message in messages)
    await ledger.flush_cursors_async()
    assert not ok.dirty and not bad.dirty
    assert (persisted_mark(ok.path), persisted_mark(bad.path)) == (8, 3)


async def test_a_consumer_close_flush_is_synchronous_and_not_overwritten(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(1)
    stale = cursor.snapshot()  # what a worker was about to write
    cursor.ack_cumulative(2)
    cursor.flush()  # a consumer's clean close: written at once, on this thread
    assert writes.threads[-1] is threading.current_thread()
    assert persisted_mark(cursor.path) == 2 and not cursor.dirty
    assert cursor.write(stale) is False  # an older state never replaces a newer one
    assert persisted_mark(cursor.path) == 2
    assert not cursor.dirty


async def test_a_deleted_cursor_is_not_written_back(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(1)
    in_flight = cursor.snapshot()
    ledger.delete_cursor("s")
    assert cursor.write(in_flight) is False
    assert not cursor.path.exists()
    assert ledger.persisted_cursor_names() == []


async def test_close_waits_for_a_flush_and_persists_every_ack(
        make_ledger: LedgerFactory, writes: BlockingWrite, tmp_path: Path) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(1)
    writes.release.clear()
    writes.started.clear()
    flush = asyncio.ensure_future(ledger.flush_cursors_async())
    await asyncio.get_running_loop().run_in_executor(None, writes.started.wait)
    cursor.ack_cumulative(6)
    close = asyncio.ensure_future(ledger.close())
    await asyncio.sleep(0)
    assert not close.done()
    writes.release.set()
    await asyncio.gather(flush, close)
    assert persisted_mark(cursor.path) == 6
    reopened = make_ledger()
    assert reopened.open_cursor("s", -1).mark_delete == 6


async def test_a_cancelled_flush_still_records_its_write(
        make_ledger: LedgerFactory, writes: BlockingWrite) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    cursor.ack_cumulative(3)
    writes.release.clear()
    writes.started.clear()
    flush = asyncio.ensure_future(ledger.flush_cursors_async())
    await asyncio.get_running_loop().run_in_executor(None, writes.started.wait)
    flush.cancel()
    writes.release.set()
    await ledger.flush_cursors_async()  # waits for the job the cancelled one started
    assert persisted_mark(cursor.path) == 3
    assert not cursor.dirty


def test_snapshot_and_write_outside_a_ledger(tmp_path: Path) -> None:
    cursor = ManagedCursor("sub", tmp_path / "sub.json", 4)
    cursor.dirty = True
    snapshot = cursor.snapshot()
    assert cursor.write(snapshot) is True
    assert cursor.write(snapshot) is False  # already there
    assert not cursor.dirty
    assert ManagedCursor.load(cursor.path).mark_delete == 4
