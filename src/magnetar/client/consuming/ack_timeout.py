"""Ack timeout: messages handed to the application and not acked in time are redelivered.

Sans-IO, clock injected.  Deadlines grow with insertion order (one timeout, a
monotonic clock), so the expired messages are always at the front.  With a
PIP-106 ``ack_timeout_redelivery_backoff`` an expired message waits a further
``backoff.next_delay(redelivery_count)`` before it is due (as the Java client's
``UnAckedMessageRedeliveryTracker``); an ack meanwhile still counts.
"""

from __future__ import annotations

import heapq
import itertools
import time

from magnetar.client.backoff import Clock, RedeliveryBackoff
from magnetar.client.consuming.acks import Position
from magnetar.protocol.message_id import MessageId


class AckTimeoutTracker:
    __slots__ = ("_backoff", "_clock", "_counts", "_deadlines", "_held", "_held_heap", "_seq",
                 "timeout")

    def __init__(
        self,
        timeout: float,
        *,
        backoff: RedeliveryBackoff | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        if timeout <= 0:
            raise ValueError("ack timeout must be positive")
        self.timeout = timeout
        self._backoff = backoff
        self._clock = clock
        self._deadlines: dict[MessageId, float] = {}
        # With a backoff only: redelivery counts, and the expired messages held back
        # until their backoff has passed (a heap by due time; stale rows skipped).
        self._counts: dict[MessageId, int] = {}
        self._held: dict[MessageId, float] = {}
        self._held_heap: list[tuple[float, int, MessageId]] = []
        self._seq = itertools.count()  # ties in the heap never compare message ids

    def add(self, message_id: MessageId, redelivery_count: int = 0) -> float:
        deadline = self._clock() + self.timeout
        self._deadlines.pop(message_id, None)  # re-adding moves it to the back
        self._deadlines[message_id] = deadline
        if self._backoff is not None:
            self._counts[message_id] = redelivery_count
            self._held.pop(message_id, None)
        return deadline

    def remove(self, message_id: MessageId) -> None:
        self._deadlines.pop(message_id, None)
        if self._backoff is not None:
            self._counts.pop(message_id, None)
            self._held.pop(message_id, None)

    def remove_entry(self, position: Position) -> None:
        for mid in [m for m in self._tracked() if (m.ledger_id, m.entry_id) == position]:
            self.remove(mid)

    def remove_up_to(self, message_id: MessageId) -> None:
        """A cumulative ack: forget every message at or before ``message_id``."""
        key = (message_id.ledger_id, message_id.entry_id, message_id.batch_index)
        for mid in [
            m for m in self._tracked() if (m.ledger_id, m.entry_id, m.batch_index) <= key
        ]:
            self.remove(mid)

    def _tracked(self) -> list[MessageId]:
        return [*self._deadlines, *self._held]

    def next_deadline(self) -> float | None:
        first: float | None = None
        for deadline in self._deadlines.values():
            first = deadline
            break
        held = self._next_held()
        if held is not None and (first is None or held < first):
            return held
        return first

    def _next_held(self) -> float | None:
        heap = self._held_heap
        while heap and self._held.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_expired(self, now: float | None = None) -> list[Position]:
        """Entries with a message past its deadline (each entry once); they leave the tracker."""
        now = self._clock() if now is None else now
        expired: dict[Position, None] = {}
        backoff = self._backoff
        while self._deadlines:
            mid, deadline = next(iter(self._deadlines.items()))
            if deadline > now:
                break
            del self._deadlines[mid]
            if backoff is None:
                expired[(mid.ledger_id, mid.entry_id)] = None
            else:
                # Held back by its backoff, measured from the ack timeout's expiry.
                due = deadline + backoff.next_delay(self._counts.pop(mid, 0))
                self._held[mid] = due
                heapq.heappush(self._held_heap, (due, next(self._seq), mid))
        if backoff is not None:
            heap = self._held_heap
            while heap and heap[0][0] <= now:
                due, _, mid = heapq.heappop(heap)
                if self._held.get(mid) == due:
                    del self._held[mid]
                    expired[(mid.ledger_id, mid.entry_id)] = None
        if expired:
            # Other messages of an expired entry come back with it.
            for mid in [m for m in self._tracked() if (m.ledger_id, m.entry_id) in expired]:
                self.remove(mid)
        return list(expired)

    def clear(self) -> None:
        self._deadlines.clear()
        self._counts.clear()
        self._held.clear()
        self._held_heap.clear()

    def __len__(self) -> int:
        return len(self._deadlines) + len(self._held)
