"""The entry cache: each ledger's most recent entries, under one shared byte budget.

Like Pulsar's ``managedLedgerCacheSizeMB``, the bound is for the whole broker, not
per topic: every ledger of a ``Store`` (the broker shares one between its persistent
and its non-persistent store) draws from one ``CacheBudget``.  When a put takes the
budget over its bound, the least recently used ledger's cache gives up its oldest
entries first, then the next least recently used one's, and so on; a cache is
"used" when an entry is put into it or read from it.

A ledger's cache (``EntryCache``) is always a contiguous run of ids
``first_id .. end_id - 1`` ending at the newest entry, because entries arrive with
consecutive ids and leave oldest first; a list with a moving head gives O(1) lookup
and amortised O(1) eviction.  It stores the very bytes objects the producer handed to
``append`` (no copy), so dispatching the tail never touches the disk.  An entry that
left the cache is read from its segment file.

Each entry is charged its length plus ``ENTRY_OVERHEAD`` (the bytes object's header
and the list slot), so that many small entries cannot hold much more memory than the
budget says.

Loop thread only.  A cache that holds nothing never touches its budget, so a ledger
may be opened, or aborted before its first append, on a worker thread.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator

# Evicted slots at the head of the list are compacted away once there are this many
# and they make up half the list; it bounds both the waste and the cost of compacting.
_COMPACT_MIN = 1024

# What a cached entry costs beyond its data: the bytes object's header (33 bytes on
# 64-bit CPython), the allocator's rounding, and the list slot that holds it.
ENTRY_OVERHEAD = 48


class CacheBudget:
    """One byte bound for the entry caches of many ledgers, evicting across them."""

    __slots__ = ("_lru", "evicted_bytes", "evicted_entries", "max_bytes", "size_bytes")

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError("max_bytes must not be negative")
        self.max_bytes = max_bytes
        self.size_bytes = 0  # charged bytes of every cache together
        self.evicted_entries = 0  # entries pushed out by the bound (not trims or closes)
        self.evicted_bytes = 0
        # The caches that hold entries, least recently used first.
        self._lru: OrderedDict[EntryCache, None] = OrderedDict()

    def __repr__(self) -> str:
        return (f"<CacheBudget {self.size_bytes}/{self.max_bytes} bytes "
                f"in {len(self._lru)} caches>")

    def __len__(self) -> int:
        """How many caches hold entries."""
        return len(self._lru)

    def _charge(self, cache: EntryCache, size: int) -> None:
        self.size_bytes += size
        lru = self._lru
        lru[cache] = None
        lru.move_to_end(cache)
        if self.size_bytes > self.max_bytes:
            self._evict()

    def _touch(self, cache: EntryCache) -> None:
        if cache in self._lru:
            self._lru.move_to_end(cache)

    def _forget(self, cache: EntryCache) -> None:
        self._lru.pop(cache, None)

    def _evict(self) -> None:
        lru = self._lru
        while self.size_bytes > self.max_bytes and lru:
            cache = next(iter(lru))
            before = self.size_bytes
            count = cache._shrink(self.size_bytes - self.max_bytes)
            self.evicted_entries += count
            self.evicted_bytes += before - self.size_bytes
            if not len(cache):
                del lru[cache]


class EntryCache:
    """The cached tail of one ledger; its bytes count against ``budget``."""

    __slots__ = ("_budget", "_entries", "_head", "end_id", "first_id", "size_bytes")

    def __init__(self, budget: CacheBudget, next_id: int = 0) -> None:
        self._budget = budget
        self._entries: list[bytes | None] = []
        self._head = 0  # index in _entries of first_id
        self.first_id = next_id
        self.end_id = next_id  # one past the newest cached id
        self.size_bytes = 0  # charged to the budget: data plus ENTRY_OVERHEAD each

    def __len__(self) -> int:
        return self.end_id - self.first_id

    def __repr__(self) -> str:
        return f"<EntryCache {self.first_id}..{self.end_id - 1} {self.size_bytes} bytes>"

    @property
    def budget(self) -> CacheBudget:
        return self._budget

    def put(self, entry_id: int, data: bytes) -> None:
        if entry_id != self.end_id:
            # Not the successor of the newest entry: start over rather than leave a hole.
            self.clear(entry_id)
        self._entries.append(data)
        self.end_id = entry_id + 1
        size = len(data) + ENTRY_OVERHEAD
        self.size_bytes += size
        self._budget._charge(self, size)  # may evict from this cache too, even all of it

    def get(self, entry_id: int) -> bytes | None:
        if self.first_id <= entry_id < self.end_id:
            self._budget._touch(self)
            return self._entries[self._head + entry_id - self.first_id]
        return None

    def iter_from(self, entry_id: int, last_id: int) -> Iterator[bytes]:
        """Cached entries ``entry_id .. last_id`` (both must lie in the cached run)."""
        self._budget._touch(self)
        entries = self._entries
        base = self._head - self.first_id
        for index in range(entry_id + base, last_id + base + 1):
            data = entries[index]
            assert data is not None
            yield data

    def drop_before(self, entry_id: int) -> None:
        """Forget entries below ``entry_id`` (they were trimmed from the ledger)."""
        count = min(entry_id, self.end_id) - self.first_id
        if count > 0:
            # In one slice, not entry by entry: retention may drop a whole cache at once.
            head = self._head
            dropped = self._entries[head:head + count]
            size = sum(map(len, dropped)) + ENTRY_OVERHEAD * count  # type: ignore[arg-type]
            self.size_bytes -= size
            self._budget.size_bytes -= size
            del self._entries[head:head + count]
            self.first_id += count
        if self.first_id < entry_id:
            self.clear(entry_id)
        if not len(self):
            self._budget._forget(self)
        self._compact()

    def clear(self, next_id: int) -> None:
        """Forget every entry (their bytes go back to the budget); the next put is
        ``next_id``."""
        if self._entries:
            self._budget.size_bytes -= self.size_bytes
            self._budget._forget(self)
            self._entries = []
        self._head = 0
        self.first_id = self.end_id = next_id
        self.size_bytes = 0

    def _pop_oldest(self) -> None:
        data = self._entries[self._head]
        assert data is not None
        size = len(data) + ENTRY_OVERHEAD
        self.size_bytes -= size
        self._budget.size_bytes -= size
        self._entries[self._head] = None
        self._head += 1
        self.first_id += 1

    def _shrink(self, excess: int) -> int:
        """Budget only: drop oldest entries until ``excess`` bytes are freed or none
        is left; returns how many were dropped."""
        target = self.size_bytes - excess
        count = 0
        while self.size_bytes > target and self.first_id < self.end_id:
            self._pop_oldest()
            count += 1
        self._compact()
        return count

    def _compact(self) -> None:
        head = self._head
        if (head >= _COMPACT_MIN and head * 2 >= len(self._entries)) or head == len(self._entries):
            del self._entries[:head]
            self._head = 0
