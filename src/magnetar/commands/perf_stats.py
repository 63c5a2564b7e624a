"""Latency and rate bookkeeping for ``magnetar perf``: an interval's figures for the
live line every few seconds, and the whole run's for the final summary."""

from __future__ import annotations

from array import array
from bisect import bisect_left

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
# Bounds of the final histogram, milliseconds.
HISTOGRAM_MS = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)


def percentile(ordered: list[float], pct: float) -> float:
    """The nearest-rank percentile of an ascending list (0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * pct // 100))  # ceiling
    return ordered[min(len(ordered), int(rank)) - 1]


class Window:
    """Messages, bytes and latencies (ms) since it was started."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.messages = 0
        self.bytes = 0
        self.latencies = array("d")

    def record(self, size: int, latency_ms: float) -> None:
        self.messages += 1
        self.bytes += size
        self.latencies.append(latency_ms)

    def line(self, label: str, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        ordered = sorted(self.latencies)
        mean = sum(ordered) / len(ordered) if ordered else 0.0
        figures = " ".join(f"p{p:g} {percentile(ordered, p):.3f}" for p in PERCENTILES)
        return (f"{label}: {self.messages / elapsed:10.1f} msg/s "
                f"{self.bytes * 8 / elapsed / 1e6:8.3f} Mbit/s --- latency ms: "
                f"mean {mean:.3f} {figures} max {ordered[-1] if ordered else 0.0:.3f}")

    def histogram(self) -> list[tuple[str, int]]:
        """(bucket label, count) over HISTOGRAM_MS, the last one open-ended."""
        counts = [0] * (len(HISTOGRAM_MS) + 1)
        for value in self.latencies:
            counts[bisect_left(HISTOGRAM_MS, value)] += 1
        labels = [f"<= {bound:g} ms" for bound in HISTOGRAM_MS] + [f"> {HISTOGRAM_MS[-1]:g} ms"]
        return list(zip(labels, counts, strict=True))


class Recorder:
    """The current interval and the whole run."""

    def __init__(self, now: float) -> None:
        self.interval = Window(now)
        self.total = Window(now)

    def record(self, size: int, latency_ms: float) -> None:
        self.interval.record(size, latency_ms)
        self.total.record(size, latency_ms)

    def roll(self, label: str, now: float) -> str:
        line = self.interval.line(label, now)
        self.interval = Window(now)
        return line
