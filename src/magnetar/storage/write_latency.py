"""Write latency of a ledger: time from ``append`` to the entry being durable, as plain
bucket counts the metrics turn into a histogram at scrape time.

The write pipeline stamps the clock once per write batch (the first append of an event
loop iteration), not per entry, and observes a whole batch at once when it is
confirmed, so the publish path pays one clock read per batch and a bisect per
confirmation.
"""

from __future__ import annotations

from bisect import bisect_left

# Pulsar's buckets for pulsar_storage_write_latency (0.5 ms to 1 s), in seconds.
BUCKETS = (0.0005, 0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 1.0)


class WriteLatency:
    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds: float, entries: int = 1) -> None:
        """``entries`` entries took ``seconds`` each (one batch)."""
        seconds = max(seconds, 0.0)
        self.counts[bisect_left(BUCKETS, seconds)] += entries
        self.total += seconds * entries

    @property
    def count(self) -> int:
        return sum(self.counts)
