"""PIP-371 requests stored recently, so that a resent request is stored only once.

A client whose send receipt was lost (its connection dropped after the broker stored
the request) sends the request again after it reconnects, under the same producer
name and sequence id. The broker answers that copy with the first copy's message id
instead of storing it again, whether or not deduplication is on, so the responder
runs the request once. Each request is remembered for its own timeout (capped by
``rpc_reply_hold_seconds``), at most ``limit`` requests in all, in memory: a broker
restart forgets them (with deduplication on, its persisted sequence ids also catch
resends across a restart).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

RequestKey = tuple[str, str, int]  # (topic, producer name, sequence id)


class RequestLog:
    """Bookkeeping only: no I/O; ``clock`` (seconds) is injected."""

    def __init__(self, limit: int, max_seconds: float, clock: Callable[[], float]) -> None:
        self.limit = limit
        self.max_seconds = max_seconds
        self.clock = clock
        # key -> (position of the first copy, until when it is remembered); insertion
        # order is arrival order, so the oldest are at the front.
        self._seen: OrderedDict[RequestKey, tuple[int, float]] = OrderedDict()
        self.resends = 0  # copies answered with their first copy's id

    def __len__(self) -> int:
        return len(self._seen)

    def first_copy(self, topic: str, producer: str, sequence_id: int) -> int | None:
        """The position of the stored first copy of this request, if remembered."""
        record = self._seen.get((topic, producer, sequence_id))
        if record is None:
            return None
        if record[1] <= self.clock():
            del self._seen[(topic, producer, sequence_id)]
            return None
        self.resends += 1
        return record[0]

    def remember(
        self, topic: str, producer: str, sequence_id: int, position: int, timeout_ms: int
    ) -> None:
        now = self.clock()
        self._seen[(topic, producer, sequence_id)] = (
            position,
            now + min(timeout_ms / 1000, self.max_seconds),
        )
        seen = self._seen
        while seen:
            oldest = next(iter(seen.values()))
            if len(seen) <= self.limit and oldest[1] > now:
                break
            seen.popitem(last=False)
