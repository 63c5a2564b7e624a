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

    @property
    def flat(self) -> bool:
        """Down to its flat run: two samples of one value (a rate of 0)."""
        samples = self._samples
        return len(samples) == 2 and samples[0][1] == samples[1][1]

    def stretch(self, now: float) -> None:
        """What ``add(now, the same value)`` does to a flat history, late: the
        sampler skips idle counters and catches up when one moves again."""
        samples = self._samples
        value = samples[-1][1]
        samples[-1] = (now, value)
        samples[-2] = (max(samples[-2][0], now - self.window), value)

    def rate(self) -> float:
        samples = self._samples
        if len(samples) < 2:
            return 0.0
        (t0, v0), (t1, v1) = samples[0], samples[-1]
        if t1 <= t0 or v1 < v0:  # a counter that went back (a reload) says nothing
            return 0.0
        return (v1 - v0) / (t1 - t0)


_TOPIC_KEYS = ("msg_in", "bytes_in", "msg_out", "bytes_out")
_PRODUCER_KEYS = ("msg_in", "bytes_in")
_SUBSCRIPTION_KEYS = ("msg_out", "redeliver", "expired")
_CONSUMER_KEYS = ("msg_out", "bytes_out")


class _Owner:
    """The rates of one topic, producer, subscription or consumer, and what the
    sampler needs to pass over it cheaply while it is idle."""

    __slots__ = ("flat", "flat_until", "moved", "rates", "values")

    def __init__(self) -> None:
        self.rates: dict[str, MovingRate] = {}
        # When each counter last grew, as seen by the sampler: a consumer's or a
        # subscription's lastConsumedTimestamp without a clock read per message sent
        # (here, not in a WeakKeyDictionary of its own: its setdefault made a weak
        # reference per counter that grew, each pass).
        self.moved: dict[str, float] = {}
        self.values: tuple[int, ...] = ()  # the counters at the last sample
        self.flat = False  # the counters did not move and every history is flat
        self.flat_until: float | None = None  # last sample skipped while flat


class RateTracker:
    """The moving rates of every loaded topic, producer and consumer, keyed weakly by
    the object (a closed producer's history goes with it)."""

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        self._rates: weakref.WeakKeyDictionary[object, _Owner] = weakref.WeakKeyDictionary()
        self._first_seen: weakref.WeakKeyDictionary[object, float] = (
            weakref.WeakKeyDictionary()
        )

    def _record(self, owner: object, now: float, keys: tuple[str, ...],
                values: tuple[int, ...], from_zero: bool = False) -> None:
        state = self._rates.get(owner)
        if state is None:
            state = self._rates[owner] = _Owner()
            self._first_seen.setdefault(owner, now)
        elif values == state.values:
            if state.flat:
                # Idle, with every history down to its flat run: what ``add`` would
                # do is stretch the runs to now; remember now, and do it when a
                # counter moves again (the rates are 0 meanwhile either way).
                state.flat_until = now
                return
        elif state.flat_until is not None:
            for idle in state.rates.values():
                idle.stretch(state.flat_until)
            state.flat_until = None
        rates = state.rates
        for key, value in zip(keys, values, strict=True):
            rate = rates.get(key)
            if rate is None:
                rate = rates[key] = MovingRate(self.window)
                if value > 0 and from_zero:
                    # The counter started at 0 with its object, which the broker's
                    # sampler sees within an interval of its birth: what it counted
                    # came since then (else a burst before the first sample is lost).
                    rate.add(now - SAMPLE_INTERVAL, 0)
            if value > rate.last_value():
                state.moved[key] = now
            rate.add(now, value)
        state.flat = values == state.values and all(rate.flat for rate in rates.values())
        state.values = values

    def sample(self, now: float, topics: Iterable[Topic]) -> None:
        """Take one sample of every counter of ``topics`` and their clients."""
        record = self._record
        for topic in topics:
            stats = topic.stats
            record(topic, now, _TOPIC_KEYS, (
                stats.messages_in, stats.bytes_in, stats.messages_out, stats.bytes_out,
            ))
            for producer in topic.producers.values():
                record(producer, now, _PRODUCER_KEYS,
                       (producer.messages_in, producer.bytes_in))
            for sub in topic.subscriptions.values():
                record(sub, now, _SUBSCRIPTION_KEYS, (
                    sub.messages_out, sub.messages_redelivered, sub.messages_expired,
                ), from_zero=True)
                for consumer in sub.consumers:
                    record(consumer, now, _CONSUMER_KEYS,
                           (consumer.messages_out, consumer.bytes_out))

    def rate(self, owner: object, key: str) -> float:
        state = self._rates.get(owner)
        if state is None:
            return 0.0
        rate = state.rates.get(key)
        return rate.rate() if rate is not None else 0.0

    def last_moved(self, owner: object, key: str) -> float | None:
        """When the counter ``key`` of ``owner`` was last seen to grow (None: never
        since its first sample); within one sample interval."""
        state = self._rates.get(owner)
        return state.moved.get(key) if state is not None else None

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
