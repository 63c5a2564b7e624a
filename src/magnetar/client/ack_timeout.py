"""Ack timeout: messages handed to the application and not acked in time are redelivered.

Sans-IO, clock injected.  Deadlines grow with insertion order (one timeout, a
monotonic clock), so the expired messages are always at the front.
"""

from __future__ import annotations

import time

from magnetar.client.acks import Position
from magnetar.client.backoff import Clock
from magnetar.protocol.message_id import MessageId


class AckTimeoutTracker:
    __slots__ = ("_clock", "_deadlines", "timeout")

    def __init__(self, timeout: float, *, clock: Clock = time.monotonic) -> None:
        if timeout <= 0:
            raise ValueError("ack timeout must be positive")
        self.timeout = timeout
        self._clock = clock
        self._deadlines: dict[MessageId, float] = {}

    def add(self, message_id: MessageId) -> float:
        deadline = self._clock() + self.timeout
        self._deadlines.pop(message_id, None)  # re-adding moves it to the back
        self._deadlines[message_id] = deadline
        return deadline

    def remove(self, message_id: MessageId) -> None:
        self._deadlines.pop(message_id, None)

    def remove_entry(self, position: Position) -> None:
        for mid in [m for m in self._deadlines if (m.ledger_id, m.entry_id) == position]:
            del self._deadlines[mid]

    def remove_up_to(self, message_id: MessageId) -> None:
        """A cumulative ack: forget every message at or before ``message_id``."""
        key = (message_id.ledger_id, message_id.entry_id, message_id.batch_index)
        for mid in [
            m for m in self._deadlines if (m.ledger_id, m.entry_id, m.batch_index) <= key
        ]:
            del self._deadlines[mid]

    def next_deadline(self) -> float | None:
        for deadline in self._deadlines.values():
            return deadline
        return None

    def pop_expired(self, now: float | None = None) -> list[Position]:
        """Entries with a message past its deadline (each entry once); they leave the tracker."""
        now = self._clock() if now is None else now
        expired: dict[Position, None] = {}
        while self._deadlines:
            mid, deadline = next(iter(self._deadlines.items()))
            if deadline > now:
                break
            del self._deadlines[mid]
            expired[(mid.ledger_id, mid.entry_id)] = None
        if expired:
            # Other messages of an expired entry come back with it.
            for mid in [m for m in self._deadlines if (m.ledger_id, m.entry_id) in expired]:
                del self._deadlines[mid]
        return list(expired)

    def clear(self) -> None:
        self._deadlines.clear()

    def __len__(self) -> int:
        return len(self._deadlines)
