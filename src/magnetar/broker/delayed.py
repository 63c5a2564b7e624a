"""Entries whose ``deliver_at_time`` is in the future, held until they are due."""

from __future__ import annotations

import heapq


class DelayedDeliveryTracker:
    """A min-heap of (deliver_at_ms, entry_id). Time is passed in, never read here."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int]] = []
        self._ids: set[int] = set()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._ids

    def add(self, entry_id: int, deliver_at_ms: int) -> None:
        if entry_id not in self._ids:
            self._ids.add(entry_id)
            heapq.heappush(self._heap, (deliver_at_ms, entry_id))

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
