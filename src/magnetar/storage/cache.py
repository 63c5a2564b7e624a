"""The bounded cache of a ledger's most recent entries.

Entries arrive with consecutive ids and leave oldest first, so the cache is always a
contiguous run of ids ``first_id .. end_id - 1``; a list with a moving head gives O(1)
lookup and amortised O(1) eviction.  It stores the very bytes objects the producer
handed to ``append`` (no copy), so dispatching the tail never touches the disk.
"""

from __future__ import annotations

from collections.abc import Iterator

# Evicted slots at the head of the list are compacted away once there are this many
# and they make up half the list; it bounds both the waste and the cost of compacting.
_COMPACT_MIN = 1024


class EntryCache:
    __slots__ = ("_entries", "_head", "end_id", "first_id", "max_bytes", "size_bytes")

    def __init__(self, max_bytes: int, next_id: int = 0) -> None:
        self.max_bytes = max_bytes
        self._entries: list[bytes | None] = []
        self._head = 0  # index in _entries of first_id
        self.first_id = next_id
        self.end_id = next_id  # one past the newest cached id
        self.size_bytes = 0

    def __len__(self) -> int:
        return self.end_id - self.first_id

    def put(self, entry_id: int, data: bytes) -> None:
        if entry_id != self.end_id:
            # Not the successor of the newest entry: start over rather than leave a hole.
            self.clear(entry_id)
        self._entries.append(data)
        self.end_id = entry_id + 1
        self.size_bytes += len(data)
        if self.size_bytes > self.max_bytes:
            self._evict()

    def get(self, entry_id: int) -> bytes | None:
        if self.first_id <= entry_id < self.end_id:
            return self._entries[self._head + entry_id - self.first_id]
        return None

    def iter_from(self, entry_id: int, last_id: int) -> Iterator[bytes]:
        """Cached entries ``entry_id .. last_id`` (both must lie in the cached run)."""
        entries = self._entries
        base = self._head - self.first_id
        for index in range(entry_id + base, last_id + base + 1):
            data = entries[index]
            assert data is not None
            yield data

    def drop_before(self, entry_id: int) -> None:
        """Forget entries below ``entry_id`` (they were trimmed from the ledger)."""
        while self.first_id < min(entry_id, self.end_id):
            self._pop_oldest()
        if self.first_id < entry_id:
            self.clear(entry_id)
        self._compact()

    def clear(self, next_id: int) -> None:
        self._entries = []
        self._head = 0
        self.first_id = self.end_id = next_id
        self.size_bytes = 0

    def _pop_oldest(self) -> None:
        data = self._entries[self._head]
        assert data is not None
        self.size_bytes -= len(data)
        self._entries[self._head] = None
        self._head += 1
        self.first_id += 1

    def _evict(self) -> None:
        while self.size_bytes > self.max_bytes and self.first_id < self.end_id:
            self._pop_oldest()
        self._compact()

    def _compact(self) -> None:
        head = self._head
        if (head >= _COMPACT_MIN and head * 2 >= len(self._entries)) or head == len(self._entries):
            del self._entries[:head]
            self._head = 0
