"""The entry cache: one byte budget shared by many ledgers, LRU across them."""

from __future__ import annotations

from pathlib import Path

import pytest

from magnetar.storage import CacheBudget, LedgerConfig, ManagedLedger, Store
from magnetar.storage.cache import ENTRY_OVERHEAD, EntryCache

from .helpers import payload

MB = 1024 * 1024


def test_caches_share_one_bound_and_evict_the_least_recently_used_first() -> None:
    per_entry = 100 + ENTRY_OVERHEAD
    budget = CacheBudget(10 * per_entry)
    a, b, c = EntryCache(budget), EntryCache(budget), EntryCache(budget)
    for entry_id in range(4):
        a.put(entry_id, b"a" * 100)
    for entry_id in range(4):
        b.put(entry_id, b"b" * 100)
    assert budget.size_bytes == 8 * per_entry
    assert a.get(0) == b"a" * 100  # a is now used more recently than b
    for entry_id in range(4):
        c.put(entry_id, b"c" * 100)
    # Two entries had to go: b's oldest, as b is the least recently used.
    assert budget.size_bytes == 10 * per_entry
    assert (a.first_id, len(a)) == (0, 4)
    assert (b.first_id, len(b)) == (2, 2)
    assert (c.first_id, len(c)) == (0, 4)
    assert budget.evicted_entries == 2
    # b runs dry before anyone else gives anything up.
    c.put(4, b"c" * 100)
    c.put(5, b"c" * 100)
    assert len(b) == 0 and len(a) == 4 and len(c) == 6
    assert len(budget) == 2  # b holds nothing and is no longer tracked
    # Then a, least recently used now, gives its oldest.
    c.put(6, b"c" * 100)
    assert (a.first_id, len(a)) == (1, 3)
    assert budget.size_bytes == sum(x.size_bytes for x in (a, b, c)) == 10 * per_entry


def test_clear_and_trim_give_the_bytes_back() -> None:
    budget = CacheBudget(MB)
    cache = EntryCache(budget, 5)
    for entry_id in range(5, 15):
        cache.put(entry_id, b"x" * 10)
    cache.drop_before(10)
    assert budget.size_bytes == cache.size_bytes == 5 * (10 + ENTRY_OVERHEAD)
    cache.drop_before(100)
    assert budget.size_bytes == 0 and len(budget) == 0
    cache.put(100, b"y")
    cache.clear(101)
    assert budget.size_bytes == 0 and len(budget) == 0


def test_drop_before_after_evictions_keeps_the_rest_addressable() -> None:
    per_entry = 10 + ENTRY_OVERHEAD
    budget = CacheBudget(3000 * per_entry)
    cache = EntryCache(budget)
    for entry_id in range(5000):  # the first 2,000 are evicted: the head moves on
        cache.put(entry_id, entry_id.to_bytes(2, "big") * 5)
    assert cache.first_id == 2000
    cache.drop_before(4500)
    assert (cache.first_id, len(cache)) == (4500, 500)
    assert budget.size_bytes == cache.size_bytes == 500 * per_entry
    assert cache.get(4499) is None
    assert [cache.get(i) for i in (4500, 4999)] == [i.to_bytes(2, "big") * 5 for i in (4500, 4999)]
    assert list(cache.iter_from(4998, 4999)) == [i.to_bytes(2, "big") * 5 for i in (4998, 4999)]
    cache.put(5000, b"z")
    assert cache.get(5000) == b"z" and len(cache) == 501


def test_an_entry_bigger_than_the_budget_is_not_kept() -> None:
    budget = CacheBudget(1000)
    cache = EntryCache(budget)
    cache.put(0, b"x" * 10)
    cache.put(1, b"z" * 2000)
    assert len(cache) == 0 and budget.size_bytes == 0
    cache.put(2, b"x" * 10)
    assert cache.get(2) == b"x" * 10


async def test_two_ledgers_sharing_1_mb_never_hold_more_together(tmp_path: Path) -> None:
    config = LedgerConfig(cache_max_bytes=MB, segment_max_bytes=256 * 1024,
                          inline_sync_max_entries=0)
    budget = CacheBudget(config.cache_max_bytes)
    one = ManagedLedger.open(tmp_path / "one", config, cache_budget=budget)
    two = ManagedLedger.open(tmp_path / "two", config, cache_budget=budget)
    try:
        for entry_id in range(300):
            for ledger in (one, two):
                ledger.append(payload(entry_id, size=3000 + entry_id))
                assert budget.size_bytes <= MB
                assert one._cache.size_bytes + two._cache.size_bytes == budget.size_bytes
        await one.flush()
        await two.flush()
        assert budget.size_bytes > MB - 4000  # it is used, not just bounded
        assert budget.evicted_entries > 0
        # Both keep their newest entries; everything else comes from the disk, intact.
        for ledger in (one, two):
            assert 0 < len(ledger._cache) < 300
            misses = ledger.stats.cache_misses
            assert [ledger.read(i) for i in range(300)] == [
                payload(i, size=3000 + i) for i in range(300)]
            assert ledger.stats.cache_misses - misses == 300 - len(ledger._cache)
            assert ledger.read_range(0, 300, max_bytes=10 * MB) == [
                payload(i, size=3000 + i) for i in range(300)]
    finally:
        await one.close()
        await two.close()
    assert budget.size_bytes == 0


async def test_eviction_is_lru_across_ledgers(tmp_path: Path) -> None:
    per_entry = 1000 + ENTRY_OVERHEAD
    config = LedgerConfig(cache_max_bytes=30 * per_entry, inline_sync_max_entries=0)
    store = Store(tmp_path / "data", config)
    hot = store.open_ledger("persistent://t/ns/hot")
    cold = store.open_ledger("persistent://t/ns/cold")
    new = store.open_ledger("persistent://t/ns/new")
    try:
        for entry_id in range(10):
            hot.append(payload(entry_id, size=1000))
        for entry_id in range(10):
            cold.append(payload(entry_id, size=1000))
        await hot.flush()
        await cold.flush()
        # hot was filled first, but it is read: now cold is the least recently used.
        assert hot.read(5) == payload(5, size=1000)
        for entry_id in range(15):
            new.append(payload(entry_id, size=1000))
        await new.flush()
        # cold, the least recently used, lost its five oldest entries; hot kept all.
        assert (cold._cache.first_id, len(cold._cache)) == (5, 5)
        assert len(hot._cache) == 10 and len(new._cache) == 15
        assert store.cache.size_bytes == 30 * per_entry
        misses = cold.stats.cache_misses
        assert [cold.read(i) for i in range(10)] == [payload(i, size=1000) for i in range(10)]
        assert cold.stats.cache_misses == misses + 5
    finally:
        for ledger in (hot, cold, new):
            await ledger.close()


async def test_a_closed_ledger_leaves_the_cache(tmp_path: Path) -> None:
    store = Store(tmp_path / "data", LedgerConfig(cache_max_bytes=MB))
    first = store.open_ledger("persistent://t/ns/a")
    second = store.open_ledger("persistent://t/ns/b")
    for entry_id in range(20):
        first.append(payload(entry_id, size=500))
        second.append(payload(entry_id, size=700))
    await first.flush()
    await second.flush()
    assert store.cache.size_bytes == 20 * (1200 + 2 * ENTRY_OVERHEAD)
    await first.close()
    assert store.cache.size_bytes == second._cache.size_bytes == 20 * (700 + ENTRY_OVERHEAD)
    assert len(store.cache) == 1
    second.delete()
    assert store.cache.size_bytes == 0 and len(store.cache) == 0


def test_stores_can_share_one_budget(tmp_path: Path) -> None:
    persistent = Store(tmp_path / "data", LedgerConfig(cache_max_bytes=MB))
    scratch = Store(tmp_path / "scratch", LedgerConfig(sync_policy="interval"),
                    cache=persistent.cache)
    assert scratch.cache is persistent.cache
    assert persistent.cache.max_bytes == MB
    assert Store(tmp_path / "other", LedgerConfig()).cache is not persistent.cache


def test_budget_validation() -> None:
    with pytest.raises(ValueError):
        CacheBudget(-1)
