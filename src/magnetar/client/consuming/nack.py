"""Negative acknowledgements: when each nacked entry becomes due for redelivery.

Sans-IO: the consumer adds nacked messages and asks which are due at the time
its ``clock`` shows; the delay is fixed or, with a PIP-106
:class:`~magnetar.client.backoff.RedeliveryBackoff`, grows with the redelivery
count the broker sent with the message.
"""

from __future__ import annotations

import heapq
import time

from magnetar.client.backoff import Clock, RedeliveryBackoff
from magnetar.client.consuming.acks import Position


class NegativeAcksTracker:
    __slots__ = ("_backoff", "_clock", "_due", "_heap", "delay")

    def __init__(
        self,
        delay: float = 60.0,
        backoff: RedeliveryBackoff | None = None,
        *,
        clock: Clock = time.monotonic,
    ) -> None:
        self.delay = delay
        self._backoff = backoff
        self._clock = clock
        self._due: dict[Position, float] = {}
        self._heap: list[tuple[float, Position]] = []

    def delay_for(self, redelivery_count: int) -> float:
        if self._backoff is not None:
            return self._backoff.next_delay(redelivery_count)
        return self.delay

    def add(self, position: Position, redelivery_count: int = 0) -> float:
        """Nack an entry; returns when it is due. A second nack keeps the earlier time."""
        due = self._clock() + self.delay_for(redelivery_count)
        current = self._due.get(position)
        if current is not None and current <= due:
            return current
        self._due[position] = due
        heapq.heappush(self._heap, (due, position))
        return due

    def remove(self, position: Position) -> None:
        self._due.pop(position, None)  # its heap entry is skipped when it surfaces

    def next_deadline(self) -> float | None:
        heap = self._heap
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float | None = None) -> list[Position]:
        """Entries whose delay has passed, in due order; they leave the tracker."""
        now = self._clock() if now is None else now
        heap = self._heap
        out: list[Position] = []
        while heap and heap[0][0] <= now:
            due, position = heapq.heappop(heap)
            if self._due.get(position) == due:
                del self._due[position]
                out.append(position)
        return out

    def positions(self) -> list[Position]:
        """Every nacked entry still waiting, due or not."""
        return list(self._due)

    def clear(self) -> None:
        self._due.clear()
        self._heap.clear()

    def __len__(self) -> int:
        return len(self._due)

    def __contains__(self, position: object) -> bool:
        return position in self._due
