"""Entries of sealed segments below the cache are read on a worker thread ahead of the
reader: ``is_cold`` says when a read would go to the disk, ``read_ahead`` brings the
run in, and ``read`` then serves it from memory with the same bytes."""

from __future__ import annotations

import threading

from magnetar.storage import segment as segment_module

from .conftest import LedgerFactory
from .helpers import payload


async def test_a_cold_run_is_read_on_a_worker_and_then_served(
    make_ledger: LedgerFactory,
) -> None:
    ledger = make_ledger(segment_max_bytes=1000, cache_max_bytes=0)
    for entry_id in range(40):
        ledger.append(payload(entry_id, size=92))
    await ledger.flush()
    assert ledger.is_cold(0) and ledger.is_cold(20)
    assert not ledger.is_cold(39)  # the active segment: read in place
    assert ledger.read(3) == payload(3, size=92)

    threads: list[str] = []
    original = segment_module.Segment.read_run

    def spy(self: segment_module.Segment, *args: object, **kwargs: object) -> list[bytes]:
        threads.append(threading.current_thread().name)
        return original(self, *args, **kwargs)  # type: ignore[arg-type]

    segment_module.Segment.read_run = spy  # type: ignore[method-assign]
    try:
        loading = ledger.read_ahead(0, 1 << 20)
        assert loading is not None
        assert ledger.read_ahead(5, 1 << 20) is loading  # one run in flight at a time
        await loading
    finally:
        segment_module.Segment.read_run = original  # type: ignore[method-assign]
    assert threads and all(name != threading.main_thread().name for name in threads)
    assert not ledger.is_cold(0)
    run = [entry_id for entry_id in range(40) if ledger._read_ahead.holds(entry_id)]
    assert run == list(range(len(run))) and len(run) > 1  # its sealed segment came along
    for entry_id in run:
        assert ledger.read(entry_id) == payload(entry_id, size=92)
    assert ledger.read_ahead(39, 1 << 20) is None  # not cold


async def test_a_trim_drops_what_was_read_ahead(make_ledger: LedgerFactory) -> None:
    ledger = make_ledger(segment_max_bytes=500, cache_max_bytes=0)
    for entry_id in range(30):
        ledger.append(payload(entry_id, size=92))
    await ledger.flush()
    loading = ledger.read_ahead(0, 1 << 20)
    assert loading is not None
    await loading
    assert not ledger.is_cold(0)
    removed = ledger.trim(10)
    assert removed > 0
    first = ledger.first_entry_id
    assert ledger._read_ahead.get(first - 1) is None
