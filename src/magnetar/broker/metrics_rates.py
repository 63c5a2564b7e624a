"""Rates for the Prometheus exposition, from counter deltas between two scrapes.

Pulsar's ``pulsar_rate_in`` and friends are per-second rates over the last stats
interval; magnetar has no stats timer, so a rate is the counter's growth since the
previous scrape divided by the time between them (0 on a series' first scrape). A
counter that shrank (a subscription's consumers left, taking their counts) reads as 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


class ScrapeRates:
    """Call :meth:`begin` once per scrape, then :meth:`rate` per (key, counter)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._last: dict[Hashable, float] = {}
        self._seen: dict[Hashable, float] = {}
        self._elapsed = 0.0
        self._last_scrape: float | None = None

    def begin(self) -> None:
        now = self.clock()
        self._elapsed = 0.0 if self._last_scrape is None else now - self._last_scrape
        self._last_scrape = now
        # Series gone since the previous scrape (deleted topics) are forgotten.
        self._last, self._seen = self._seen, {}

    def rate(self, key: Hashable, counter: float) -> float:
        self._seen[key] = counter
        previous = self._last.get(key)
        if previous is None or self._elapsed <= 0 or counter < previous:
            return 0.0
        return (counter - previous) / self._elapsed
