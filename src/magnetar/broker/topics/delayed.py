"""Entries whose ``deliver_at_time`` is in the future, held until they are due."""

from __future__ import annotations

import heapq

# About 170 bytes of heap and set per tracked entry.
DEFAULT_CAPACITY = 50_000


class DelayedDeliveryTracker:
    """A min-heap of (deliver_at_ms, entry_id). Time is passed in, never read here.

    It holds at most ``capacity`` entries; the dispatcher finds the ones it could not
    add again in the log once the tracker has drained (``overflow_from``)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self._heap: list[tuple[int, int]] = []
        self._ids: set[int] = set()
        self.capacity = max(1, capacity)
        # The first entry that was due later but found the tracker full, if any.
        self.overflow_from: int | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._ids

    def add(self, entry_id: int, deliver_at_ms: int) -> bool:
        """Track ``entry_id``; False (nothing kept) if the tracker is full."""
        if entry_id not in self._ids:
            if len(self._ids) >= self.capacity:
                return False
            self._ids.add(entry_id)
            heapq.heappush(self._heap, (deliver_at_ms, entry_id))
        return True

    def overflowed(self, entry_id: int) -> None:
        """``entry_id`` is due later and was not tracked: look for it again later."""
        if self.overflow_from is None or entry_id < self.overflow_from:
            self.overflow_from = entry_id

    @property
    def has_room(self) -> bool:
        return len(self._ids) < self.capacity // 2 + 1

    def discard(self, entry_id: int) -> None:
        self._ids.discard(entry_id)

    def pop_due(self, now_ms: int) -> list[int]:
        due: list[int] = []
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            _, entry_id = heapq.heappop(heap)
            if entry_id in self._ids:
                self._ids.discard(entry_id)
                due.append(entry_id)
        return due

    def next_due_ms(self) -> int | None:
        heap = self._heap
        while heap and heap[0][1] not in self._ids:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def clear(self) -> None:
        self._heap.clear()
        self._ids.clear()
        self.overflow_from = None
