"""ManagedLedger: appends, durability callbacks, group commit, reads, cache, trim, lifecycle."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

import magnetar.storage.ledger as ledger_module
from magnetar.storage import (
    EntryNotFound,
    LedgerClosed,
    LedgerConfig,
    LedgerFailed,
    ManagedLedger,
    StorageError,
    fsutil,
)
from magnetar.storage.cache import ENTRY_OVERHEAD
from magnetar.storage.sync_load import SyncLoad

from .conftest import LedgerFactory
from .helpers import payload, segment_files


async def test_round_trip_across_segment_rollover(make_ledger: LedgerFactory,
                                                  tmp_path: Path) -> None:
    ledger = make_ledger(segment_max_bytes=1024)
    assert ledger.first_entry_id == ledger.next_entry_id == 0
    assert ledger.last_confirmed_entry_id == -1
    for entry_id in range(300):
        assert ledger.append(payload(entry_id)) == entry_id
        if entry_id % 37 == 0:
            await asyncio.sleep(0)
    await ledger.flush()

    files = segment_files(tmp_path / "ledger")
    assert len(files) > 5
    assert all(path.stat().st_size <= 1024 for path in files)
    assert files[0].name == f"{0:020d}.seg"
    assert ledger.stats.rolls == len(files) - 1
    # The active segment keeps zeros reserved ahead of its writes; sealed ones do not.
    assert files[-1].stat().st_size > 0
    assert ledger.size_bytes() == sum(path.stat().st_size for path in files[:-1]) + sum(
        len(payload(entry_id)) + 8 for entry_id in range(300)
        if entry_id >= int(files[-1].stem)
    )
    assert ledger.last_confirmed_entry_id == 299
    assert ledger.entry_count() == 300
    for entry_id in range(300):
        assert ledger.read(entry_id) == payload(entry_id)
    got: list[bytes] = []
    while len(got) < 300:
        got += ledger.read_range(len(got), 23)
    assert got == [payload(i) for i in range(300)]
    await ledger.close()  # which gives the reserve back
    assert ledger.size_bytes() == sum(path.stat().st_size for path in files)


async def test_entry_bigger_than_a_segment_gets_its_own(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=100)
    big = b"B" * 500
    ids = [ledger.append(b"small"), ledger.append(big), ledger.append(b"after")]
    await ledger.flush()
    assert [ledger.read(i) for i in ids] == [b"small", big, b"after"]


async def test_on_durable_in_order_after_last_confirmed_advances(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=2048)
    fired: list[tuple[int, int]] = []

    def on_durable(entry_id: int) -> None:
        fired.append((entry_id, ledger.last_confirmed_entry_id))
        assert ledger.read(entry_id) == payload(entry_id)

    for entry_id in range(200):
        ledger.append(payload(entry_id), on_durable if entry_id % 3 else None)
        if entry_id % 50 == 0:
            await asyncio.sleep(0)
    assert ledger.next_entry_id == 200
    await ledger.flush()
    assert [entry_id for entry_id, _ in fired] == [i for i in range(200) if i % 3]
    assert all(confirmed >= entry_id for entry_id, confirmed in fired)


async def test_nothing_is_readable_before_it_is_durable(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    entry_id = ledger.append(b"hello")
    assert ledger.last_confirmed_entry_id == -1
    with pytest.raises(EntryNotFound):
        ledger.read(entry_id)
    assert ledger.read_range(0, 10) == []
    await ledger.flush()
    assert ledger.read(entry_id) == b"hello"


async def test_group_commit_one_write_and_few_syncs_per_burst(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = fsutil.fdatasync

    def counting_fdatasync(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", counting_fdatasync)
    ledger = make_ledger()
    fired: list[int] = []
    for entry_id in range(1000):  # all in one event-loop iteration
        ledger.append(payload(entry_id), fired.append)
    await ledger.flush()
    assert fired == list(range(1000))
    assert ledger.stats.writes == 1
    assert len(calls) == ledger.stats.syncs == 1


async def test_appends_during_a_sync_share_the_next_one(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    started = threading.Event()
    real = fsutil.fdatasync

    def slow_fdatasync(fd: int) -> None:
        started.set()
        release.wait(5)
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", slow_fdatasync)
    ledger = make_ledger()
    fired: list[int] = []
    ledger.append(b"first", fired.append)
    while not started.is_set():  # the first sync is now blocked in the worker
        await asyncio.sleep(0.001)
    for entry_id in range(1, 101):  # many loop iterations while it runs
        ledger.append(payload(entry_id), fired.append)
        await asyncio.sleep(0)
    assert fired == []
    assert ledger.stats.writes > 1  # written as they came, but not confirmed
    release.set()
    await ledger.flush()
    assert fired == list(range(101))
    assert ledger.stats.syncs == 2


async def test_interval_policy_confirms_after_write_and_syncs_on_timer(
        make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(sync_policy="interval", sync_interval=0.02)
    fired: list[int] = []
    for entry_id in range(10):
        ledger.append(payload(entry_id), fired.append)
    await asyncio.sleep(0)
    assert fired == list(range(10))
    assert ledger.last_confirmed_entry_id == 9
    assert ledger.stats.syncs == 0
    assert ledger.read(9) == payload(9)
    for _ in range(200):
        if ledger.stats.syncs:
            break
        await asyncio.sleep(0.005)
    assert ledger.stats.syncs == 1
    await asyncio.sleep(0.06)  # nothing new written: the timer stays off
    assert ledger.stats.syncs == 1


async def test_interval_policy_flush_syncs_now(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(sync_policy="interval", sync_interval=3600.0, segment_max_bytes=512)
    for entry_id in range(100):
        ledger.append(payload(entry_id))
    await ledger.flush()
    assert ledger.stats.syncs >= 1
    assert ledger.read_range(0, 1000, max_bytes=1 << 20) == [payload(i) for i in range(100)]


async def test_reopen_after_close_keeps_every_entry(make_ledger: LedgerFactory,
                                                    tmp_path: Path) -> None:
    ledger = make_ledger(segment_max_bytes=700)
    for entry_id in range(120):
        ledger.append(payload(entry_id))
    await ledger.close()
    assert ledger.closed

    reopened = make_ledger(segment_max_bytes=700)
    assert reopened.first_entry_id == 0
    assert reopened.next_entry_id == 120
    assert reopened.last_confirmed_entry_id == 119
    assert [reopened.read(i) for i in range(120)] == [payload(i) for i in range(120)]
    assert reopened.append(payload(120)) == 120
    await reopened.flush()
    assert reopened.read(120) == payload(120)


async def test_close_writes_and_confirms_pending_appends(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    fired: list[int] = []
    for entry_id in range(5):
        ledger.append(payload(entry_id), fired.append)
    await ledger.close()
    assert fired == [0, 1, 2, 3, 4]
    with pytest.raises(LedgerClosed):
        ledger.append(b"late")
    with pytest.raises(LedgerClosed):
        ledger.read(0)
    await ledger.close()  # idempotent
    reopened = make_ledger()
    assert reopened.read(4) == payload(4)


async def test_read_errors(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=200)
    for entry_id in range(30):
        ledger.append(payload(entry_id))
    await ledger.flush()
    for bad in (-1, 30, 1000):
        with pytest.raises(EntryNotFound):
            ledger.read(bad)
    assert ledger.read_range(30, 10) == []
    assert ledger.trim(15) > 0
    with pytest.raises(EntryNotFound):
        ledger.read(0)
    with pytest.raises(EntryNotFound):
        ledger.read_range(0, 5)
    with pytest.raises(KeyError):  # EntryNotFound is a KeyError
        ledger.read(ledger.first_entry_id - 1)


async def test_cache_is_bounded_and_disk_reads_fill_in(make_ledger: LedgerFactory) -> None:
    per_entry = 100 + ENTRY_OVERHEAD
    ledger = make_ledger(cache_max_bytes=10 * per_entry, segment_max_bytes=1500)
    for entry_id in range(100):
        ledger.append(payload(entry_id, size=100))
    await ledger.flush()
    cache = ledger._cache
    assert cache.size_bytes <= 10 * per_entry
    assert len(cache) == 10
    assert cache.first_id == 90

    hits, misses = ledger.stats.cache_hits, ledger.stats.cache_misses
    assert ledger.read(99) == payload(99, size=100)
    assert ledger.read(3) == payload(3, size=100)
    assert ledger.stats.cache_hits == hits + 1
    assert ledger.stats.cache_misses == misses + 1
    # A range that starts on disk, crosses segments and ends in the cache.
    everything = ledger.read_range(0, 100, max_bytes=1 << 20)
    assert everything == [payload(i, size=100) for i in range(100)]


async def test_cache_disabled(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(cache_max_bytes=0)
    for entry_id in range(10):
        ledger.append(payload(entry_id))
    await ledger.flush()
    assert len(ledger._cache) == 0
    assert [ledger.read(i) for i in range(10)] == [payload(i) for i in range(10)]


@pytest.mark.parametrize("cache_max_bytes", [0, 1 << 20])
async def test_read_range_limits(make_ledger: LedgerFactory, cache_max_bytes: int) -> None:
    ledger = make_ledger(cache_max_bytes=cache_max_bytes, segment_max_bytes=1000)
    for entry_id in range(50):
        ledger.append(payload(entry_id, size=100))
    await ledger.flush()
    assert len(ledger.read_range(0, 7)) == 7
    assert ledger.read_range(45, 100) == [payload(i, size=100) for i in range(45, 50)]
    assert len(ledger.read_range(0, 50, max_bytes=350)) == 3
    # One entry even if it alone exceeds the byte budget.
    assert ledger.read_range(10, 50, max_bytes=1) == [payload(10, size=100)]
    assert ledger.read_range(10, 0) == []


async def test_trim_removes_whole_segments_only(make_ledger: LedgerFactory,
                                                tmp_path: Path) -> None:
    ledger = make_ledger(segment_max_bytes=500)
    for entry_id in range(100):
        ledger.append(payload(entry_id, size=92))  # 5 records (100 bytes each) per segment
    await ledger.flush()
    assert len(segment_files(tmp_path / "ledger")) == 20
    size_before = ledger.size_bytes()

    assert ledger.trim(0) == 0
    assert ledger.trim(12) == 10  # entries 10 and 11 share a segment with 12..14
    assert ledger.first_entry_id == 10
    assert ledger.entry_count() == 90
    assert ledger.size_bytes() == size_before - 1000
    assert len(segment_files(tmp_path / "ledger")) == 18
    assert ledger.read(10) == payload(10, size=92)

    # Everything but the active segment can go; ids are never reused.
    assert ledger.trim(10_000) == 85
    assert ledger.first_entry_id == 95
    assert ledger.append(b"next") == 100
    await ledger.close()
    reopened = make_ledger(segment_max_bytes=500)
    assert (reopened.first_entry_id, reopened.next_entry_id) == (95, 101)


async def test_trim_never_removes_the_active_segment(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=100)
    for entry_id in range(10):
        ledger.append(payload(entry_id, size=92))  # one record per segment
    await ledger.flush()
    assert ledger.trim(10) == 9  # the active segment (entry 9) stays
    await ledger.close()
    reopened = make_ledger(segment_max_bytes=100)
    assert (reopened.first_entry_id, reopened.next_entry_id) == (9, 10)


async def test_trim_consumed_follows_the_slowest_cursor(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=500)
    for entry_id in range(100):
        ledger.append(payload(entry_id, size=92))
    await ledger.flush()
    assert ledger.trim_consumed() == 0  # no cursors: keep everything

    fast = ledger.open_cursor("fast", -1)
    slow = ledger.open_cursor("slow", -1)
    fast.ack_cumulative(80)
    slow.ack_cumulative(23)
    assert ledger.trim_consumed() == 20  # entries 0..19: below slow's mark_delete + 1
    assert not slow.dirty  # trimming persisted the cursors first
    slow.ack_cumulative(99)
    assert ledger.trim_consumed() == 60  # fast (80) now limits; 80..84 share a segment
    assert ledger.first_entry_id == 80

    # A cursor persisted on disk but not opened still holds data back.
    ledger.cursors["fast"].ack_cumulative(99)
    await ledger.close()
    reopened = make_ledger(segment_max_bytes=500)
    reopened.open_cursor("fast", -1)
    reopened.open_cursor("late", 84)
    assert reopened.trim_consumed() == 5
    assert reopened.first_entry_id == 85


async def test_trim_consumed_async_writes_cursors_first_and_skips_one_segment_logs(
    make_ledger: LedgerFactory, tmp_path: Path
) -> None:
    small = make_ledger(segment_max_bytes=1 << 20)  # every entry in the active segment
    for entry_id in range(10):
        small.append(payload(entry_id, size=92))
    await small.flush()
    small.open_cursor("sub", -1).ack_cumulative(9)
    assert await small.trim_consumed_async() == 0
    await small.close()

    ledger = make_ledger(tmp_path / "other", segment_max_bytes=500)
    for entry_id in range(100):
        ledger.append(payload(entry_id, size=92))
    await ledger.flush()
    cursor = ledger.open_cursor("sub", -1)
    cursor.ack_cumulative(23)
    files_before = set((tmp_path / "other" / "ledger").iterdir())
    assert await ledger.trim_consumed_async() == 20
    assert not cursor.dirty
    deleted = files_before - set((tmp_path / "other" / "ledger").iterdir())
    assert len([p for p in deleted if p.suffix == ".seg"]) >= 1  # deleted on a worker thread
    assert ledger.first_entry_id == 20
    await ledger.close()
    assert await ledger.trim_consumed_async() == 0  # closed: nothing, no error


async def test_cursors_persist_with_the_ledger(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("sub/one", 4)
    assert ledger.open_cursor("sub/one", 99) is cursor
    assert cursor.mark_delete == 4
    cursor.ack([6, 8])
    cursor.set_properties({"owner": "me"})
    ledger.open_cursor("two", -1)
    assert ledger.persisted_cursor_names() == ["sub/one", "two"]
    await ledger.close()  # flushes the dirty cursor

    reopened = make_ledger()
    assert reopened.cursors == {}
    assert reopened.persisted_cursor_names() == ["sub/one", "two"]
    again = reopened.open_cursor("sub/one", 99)  # initial position ignored: it exists
    assert again.mark_delete == 4
    assert again.individually_acked_ranges() == [(6, 6), (8, 8)]
    assert again.properties == {"owner": "me"}
    reopened.delete_cursor("sub/one")
    reopened.delete_cursor("never-existed")
    assert reopened.persisted_cursor_names() == ["two"]
    assert "sub/one" not in reopened.cursors


async def test_flush_cursors_writes_only_dirty_ones(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    cursor = ledger.open_cursor("s", -1)
    path = cursor.path
    mtime = path.stat().st_mtime_ns
    ledger.flush_cursors()
    assert path.stat().st_mtime_ns == mtime
    cursor.ack([0])
    assert cursor.dirty
    ledger.flush_cursors()
    assert not cursor.dirty
    assert b'"mark_delete":0' in path.read_bytes()


async def test_append_validation(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    with pytest.raises(ValueError):
        ledger.append(b"")
    assert ledger.next_entry_id == 0


def test_append_needs_a_running_loop(tmp_path: Path) -> None:
    ledger = ManagedLedger.open(tmp_path, LedgerConfig())
    with pytest.raises(RuntimeError):
        ledger.append(b"x")
    ledger.delete()


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        LedgerConfig(sync_policy="sometimes")
    with pytest.raises(ValueError):
        LedgerConfig(sync_interval=0)
    with pytest.raises(ValueError):
        LedgerConfig(segment_max_bytes=8)


async def test_a_directory_is_opened_by_one_ledger_at_a_time(
        make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger()
    with pytest.raises(StorageError, match="already open"):
        ManagedLedger.open(tmp_path / "ledger", LedgerConfig())
    await ledger.close()
    make_ledger()  # the lock went with the close


async def test_delete_removes_the_directory(make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger()
    fired: list[int] = []
    ledger.append(b"gone", fired.append)
    ledger.open_cursor("s", -1)
    ledger.delete()
    assert not (tmp_path / "ledger").exists()
    await asyncio.sleep(0.01)
    assert fired == []
    with pytest.raises(LedgerClosed):
        ledger.append(b"x")


async def test_failed_sync_fences_the_ledger(make_ledger: LedgerFactory,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = make_ledger()
    ledger.append(b"good")
    await ledger.flush()

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ledger_module, "fdatasync", broken_fdatasync)
    failures: list[BaseException] = []
    ledger.on_failure = failures.append
    fired: list[int] = []
    ledger.append(b"lost", fired.append)
    with pytest.raises(LedgerFailed):
        await ledger.flush()
    assert ledger.failed
    assert len(failures) == 1 and isinstance(failures[0], OSError)
    assert fired == []
    assert ledger.last_confirmed_entry_id == 0
    assert ledger.read(0) == b"good"
    with pytest.raises(LedgerFailed):
        ledger.append(b"more")
    await ledger.close()


async def test_failed_write_truncates_the_partial_record(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ledger = make_ledger()
    ledger.append(b"good")
    await ledger.flush()

    def broken_pwritev(fd: int, buffers: object, offset: int) -> int:
        os.pwrite(fd, b"\x00\x00\x00\x05par", offset)  # a partial record, then the error
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwritev", broken_pwritev)
    ledger.append(b"never")
    with pytest.raises(LedgerFailed):
        await ledger.flush()
    monkeypatch.undo()
    await ledger.close()
    [segment] = segment_files(tmp_path / "ledger")
    assert segment.stat().st_size == 8 + len(b"good")


async def test_callback_errors_do_not_stop_the_others(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    fired: list[int] = []

    def bad(entry_id: int) -> None:
        raise RuntimeError("boom")

    ledger.append(b"a", fired.append)
    ledger.append(b"b", bad)
    ledger.append(b"c", fired.append)
    await ledger.flush()
    assert fired == [0, 2]


async def test_callbacks_may_append(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger()
    fired: list[int] = []

    def chain(entry_id: int) -> None:
        fired.append(entry_id)
        if entry_id < 5:
            ledger.append(payload(entry_id + 1), chain)

    ledger.append(payload(0), chain)
    while len(fired) < 6:
        await asyncio.sleep(0.001)
    assert fired == [0, 1, 2, 3, 4, 5]


def test_works_under_uvloop(tmp_path: Path) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        ledger = ManagedLedger.open(tmp_path, LedgerConfig(segment_max_bytes=300))
        fired: list[int] = []
        for entry_id in range(50):
            ledger.append(payload(entry_id), fired.append)
        await ledger.flush()
        assert fired == list(range(50))
        await ledger.close()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
    ledger = ManagedLedger.open(tmp_path, LedgerConfig(segment_max_bytes=300))
    assert ledger.read_range(0, 100, max_bytes=1 << 20) == [payload(i) for i in range(50)]
    ledger.delete()


async def test_delete_after_close(make_ledger: LedgerFactory, tmp_path: Path) -> None:
    ledger = make_ledger(segment_max_bytes=100)
    for entry_id in range(10):
        ledger.append(payload(entry_id))
    await ledger.close()
    ledger.delete()
    assert not (tmp_path / "ledger").exists()
    fresh = make_ledger()
    assert fresh.next_entry_id == 0


def record_sync_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads the ledger calls fdatasync on, in order."""
    threads: list[str] = []
    real = fsutil.fdatasync

    def recording_fdatasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", recording_fdatasync)
    return threads


async def test_small_groups_sync_on_the_loop_thread_and_large_ones_on_the_worker(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = record_sync_threads(monkeypatch)
    ledger = make_ledger(inline_sync_max_entries=4)
    ledger.make_durable()  # else a new ledger's first sync settles its fsyncs on a worker
    fired: list[int] = []
    ledger.append(b"alone", fired.append)
    await ledger.flush()
    assert fired == [0]
    assert ledger.stats.inline_syncs == 1
    assert threads == [threading.current_thread().name]
    for entry_id in range(1, 11):  # one group of ten: too big to block the loop for
        ledger.append(payload(entry_id), fired.append)
    await ledger.flush()
    assert fired == list(range(11))
    assert ledger.stats.inline_syncs == 1
    assert ledger.stats.syncs == 2
    assert threads[1] != threading.current_thread().name


async def test_inline_sync_failure_fails_the_ledger(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(ledger_module, "fdatasync", broken)
    ledger = make_ledger(inline_sync_max_entries=4)
    failures: list[BaseException] = []
    ledger.on_failure = failures.append
    fired: list[int] = []
    ledger.append(b"doomed", fired.append)
    with pytest.raises(LedgerFailed):
        await ledger.flush()
    assert fired == []
    assert ledger.failed and failures


async def test_written_entries_are_readable_before_they_are_durable(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real = fsutil.fdatasync

    def slow_fdatasync(fd: int) -> None:
        release.wait(5)
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", slow_fdatasync)
    ledger = make_ledger()
    written: list[int] = []
    ledger.on_written = written.append
    entry_id = ledger.append(b"early", None)
    assert ledger.last_written_entry_id == -1  # queued: the write happens this round
    await asyncio.sleep(0)
    assert written == [entry_id] and ledger.last_written_entry_id == entry_id
    assert ledger.read(entry_id) == b"early"
    assert ledger.last_confirmed_entry_id == -1  # not durable yet
    release.set()
    await ledger.flush()
    assert ledger.last_confirmed_entry_id == entry_id


async def test_readers_get_a_small_group_before_its_inline_sync(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    real = fsutil.fdatasync

    def recording_fdatasync(fd: int) -> None:
        events.append(f"sync on {threading.current_thread().name}")
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", recording_fdatasync)
    ledger = make_ledger(inline_sync_max_entries=4)
    ledger.make_durable()  # else a new ledger's first sync settles its fsyncs on a worker
    ledger.on_written = lambda entry_id: events.append(f"written {entry_id}")
    ledger.append(b"read at once", None)
    await ledger.flush()
    assert events == ["written 0", f"sync on {threading.current_thread().name}"]
    assert ledger.stats.inline_syncs == 1


async def test_a_file_system_without_fallocate_gets_plain_appends(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def unsupported(fd: int, offset: int, length: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    ledger = make_ledger()
    for entry_id in range(5):
        ledger.append(payload(entry_id))
    await ledger.flush()
    [segment] = segment_files(tmp_path / "ledger")
    assert segment.stat().st_size == ledger.size_bytes()
    assert [ledger.read(i) for i in range(5)] == [payload(i) for i in range(5)]


async def test_a_slow_disk_moves_small_groups_to_the_worker(
        make_ledger: LedgerFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = fsutil.fdatasync

    def slow_fdatasync(fd: int) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(0.02)  # far over inline_sync_max_seconds
        real(fd)

    monkeypatch.setattr(ledger_module, "fdatasync", slow_fdatasync)
    ledger = make_ledger(inline_sync_max_entries=4, inline_sync_max_seconds=0.005)
    ledger.make_durable()  # else a new ledger's first sync settles its fsyncs on a worker
    for entry_id in range(3):
        ledger.append(payload(entry_id))
        await ledger.flush()
    loop_thread = threading.current_thread().name
    assert threads[0] == loop_thread  # nothing measured yet: the first one is inline
    assert all(name != loop_thread for name in threads[1:]) and len(threads) == 3
    assert ledger.stats.inline_syncs == 1


async def test_ledgers_with_writes_due_together_sync_on_workers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads = record_sync_threads(monkeypatch)
    shared = SyncLoad()
    # No fsync takes an hour: however slow this machine, the moving average never
    # forbids an inline sync here, so only the writes due together decide.
    config = LedgerConfig(inline_sync_max_entries=4, inline_sync_max_seconds=3600.0)
    first = ManagedLedger.open(tmp_path / "a", config, sync_load=shared)
    second = ManagedLedger.open(tmp_path / "b", config, sync_load=shared)
    try:
        first.append(b"together")
        second.append(b"together")  # both writes are due in this loop round
        await asyncio.gather(first.flush(), second.flush())
        loop_thread = threading.current_thread().name
        # The first did not make the other wait behind an inline sync: with the
        # other's write due, its sync went to a worker. (The thread names are not
        # in a fixed order: the worker may run after the other ledger's sync.)
        assert first.stats.syncs == 1 and first.stats.inline_syncs == 0
        assert any(name != loop_thread for name in threads)
        assert shared.writes_due == 0
        threads.clear()
        inline_before = second.stats.inline_syncs
        await asyncio.sleep(0)
        second.append(b"alone")
        await second.flush()
        assert threads == [loop_thread]  # alone, a small group syncs on the loop
        assert second.stats.inline_syncs == inline_before + 1
    finally:
        await first.close()
        await second.close()
