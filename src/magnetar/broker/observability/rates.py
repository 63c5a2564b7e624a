"""Message and byte rates over a moving window, as Pulsar's stats report them.

The data path only bumps counters (topic, producer and consumer ``messages_in``,
``bytes_out``...); a periodic task samples those counters into a short history per
object, and a rate is the counter's growth over the window the history spans. So a
rate costs nothing per message, and it is at most one sample interval stale.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.topics.topic import Topic

SAMPLE_INTERVAL = 1.0  # seconds between samples
WINDOW = 10.0  # seconds of history a rate is measured over
# Topics sampled before the sampler yields to the loop: a pass over 5,000 loaded topics
# and their producers in one callback stalled every connection 150-200 ms each second.
SAMPLE_CHUNK = 250


class MovingRate:
    """Samples of one monotonic counter; ``rate()`` is its growth per second over the
    last ``window`` seconds (0.0 until two samples exist)."""

    __slots__ = ("_samples", "window")

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        # A list, not a deque: a deque's first block costs ~600 bytes, and a broker
        # keeps four of these per loaded topic (thousands of topics).
        self._samples: list[tuple[float, int]] = []

    def add(self, now: float, value: int) -> None:
        samples = self._samples
        if len(samples) >= 2 and samples[-1][1] == value == samples[-2][1]:
            # A counter that did not move: stretch its flat run rather than grow the
            # history (the rate over the run is the same), so an idle counter costs
            # two samples, not one per interval.
            samples[-1] = (now, value)
            # Its start moves up to the window's start (the counter held this value
            # all along), so a burst after a long idle is measured over the window.
            samples[-2] = (max(samples[-2][0], now - self.window), value)
        else:
            samples.append((now, value))
        # Keep one sample at or before the window's start, so the window is spanned.
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            del samples[0]

    def last_value(self) -> int:
        return self._samples[-1][1] if self._samples else 0

    def rate(self) -> float:
        samples = self._samples
        if len(samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = samples[0], samples[-1]
        if t1 <= t0 or v1 < v0:  # a counter that went back (a reload) says nothing
            return 0.0
        return (v1 - v0) / (t1 - t0)


class RateTracker:
    """The moving rates of every loaded topic, producer and consumer, keyed weakly by
    the object (a closed producer's history goes with it)."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._rates: weakref.WeakKeyDictionary[object, dict[str, MovingRate]] = (
            weakref.WeakKeyDictionary()
        )
        self._first_seen: weakref.WeakKeyDictionary[object, float] = (
            weakref.WeakKeyDictionary()
        )
        # When each counter last grew, as seen by the sampler: a consumer's or a
        # subscription's lastConsumedTimestamp without a clock read per message sent.
        self._moved: weakref.WeakKeyDictionary[object, dict[str, float]] = (
            weakref.WeakKeyDictionary()
        )

    def _record(self, owner: object, now: float, counters: dict[str, int],
                from_zero: bool = False) -> None:
        rates = self._rates.get(owner)
        if rates is None:
            rates = self._rates[owner] = {}
            self._first_seen.setdefault(owner, now)
        for key, value in counters.items():
            rate = rates.get(key)
            if rate is None:
                rate = rates[key] = MovingRate(self.window)
                if value > 0 and from_zero:
                    # The counter started at 0 with its object, which the broker's
                    # sampler sees within an interval of its birth: what it counted
                    # came since then (else a burst before the first sample is lost).
                    rate.add(now - SAMPLE_INTERVAL, 0)
            if value > rate.last_value():
                self._moved.setdefault(owner, {})[key] = now
            rate.add(now, value)

    def sample(self, now: float, topics: Iterable[Topic]) -> None:
        """Take one sample of every counter of ``topics`` and their clients."""
        for topic in topics:
            stats = topic.stats
            self._record(topic, now, {
                "msg_in": stats.messages_in, "bytes_in": stats.bytes_in,
                "msg_out": stats.messages_out, "bytes_out": stats.bytes_out,
            })
            for producer in topic.producers.values():
                self._record(producer, now,
                             {"msg_in": producer.messages_in, "bytes_in": producer.bytes_in})
            for sub in topic.subscriptions.values():
                self._record(sub, now, {
                    "msg_out": sub.messages_out, "redeliver": sub.messages_redelivered,
                    "expired": sub.messages_expired,
                }, from_zero=True)
                for consumer in sub.consumers:
                    self._record(consumer, now, {
                        "msg_out": consumer.messages_out, "bytes_out": consumer.bytes_out,
                    })

    def rate(self, owner: object, key: str) -> float:
        rates = self._rates.get(owner)
        if rates is None:
            return 0.0
        rate = rates.get(key)
        return rate.rate() if rate is not None else 0.0

    def last_moved(self, owner: object, key: str) -> float | None:
        """When the counter ``key`` of ``owner`` was last seen to grow (None: never
        since its first sample); within one sample interval."""
        return self._moved.get(owner, {}).get(key)

    def first_seen(self, owner: object, now: float) -> float:
        """When ``owner`` was first sampled (or now, remembered, if it never was): a
        client's ``connectedSince``, within one sample interval."""
        return self._first_seen.setdefault(owner, now)

    async def run(self, topics: Callable[[], Iterable[Topic]], clock: Callable[[], float],
                  interval: float = SAMPLE_INTERVAL) -> None:
        """The periodic sampler (a broker timer); a pass yields to the loop every
        SAMPLE_CHUNK topics."""
        while True:
            await asyncio.sleep(interval)
            loaded = list(topics())
            for start in range(0, len(loaded), SAMPLE_CHUNK):
                if start:
                    await asyncio.sleep(0)
                self.sample(clock(), loaded[start : start + SAMPLE_CHUNK])
