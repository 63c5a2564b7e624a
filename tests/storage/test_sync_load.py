"""SyncLoad: the shared judgement of whether a small group may be synced inline."""

from __future__ import annotations

from magnetar.storage.sync_load import SyncLoad


def test_a_slow_sync_moves_the_average_over_the_limit_and_fast_ones_bring_it_back() -> None:
    load = SyncLoad()
    assert load.allows_inline(0.001, own_write_due=False)
    load.observe(0.02)
    assert not load.allows_inline(0.001, own_write_due=False)
    for _ in range(20):
        load.observe(0.0002)
    assert load.allows_inline(0.001, own_write_due=False)


def test_another_ledgers_write_due_this_round_forbids_inline() -> None:
    load = SyncLoad()
    load.writes_due = 1
    assert load.allows_inline(0.001, own_write_due=True)  # that write is its own
    assert not load.allows_inline(0.001, own_write_due=False)
    load.writes_due = 2
    assert not load.allows_inline(0.001, own_write_due=True)


async def test_disk_work_on_a_worker_forbids_inline_until_it_is_done() -> None:
    import asyncio

    load = SyncLoad()
    loop = asyncio.get_running_loop()
    gate = asyncio.Event()
    first = loop.create_future()
    second = asyncio.ensure_future(gate.wait())
    load.job_started(first)
    load.job_started(second)
    assert load.disk_jobs == 2
    assert not load.allows_inline(0.001, own_write_due=False)
    first.set_result(None)
    await asyncio.sleep(0)  # done callbacks run on the loop
    assert load.disk_jobs == 1 and not load.allows_inline(0.001, own_write_due=False)
    gate.set()
    await second
    await asyncio.sleep(0)
    assert load.disk_jobs == 0 and load.allows_inline(0.001, own_write_due=False)
