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


class CounterHistory:
    """Samples of a few monotonic counters of one owner, taken together: a sample is
    (time, the counters' values); ``rate(i)`` is counter ``i``'s growth per second over
    the last ``window`` seconds (0.0 until two samples exist).

    One history per owner, not one per counter: a pass of the sampler over 5,000
    topics that all moved made four ``MovingRate.add`` calls per topic and two per
    producer (32 ms a pass in-process, 6% of the broker's CPU at 2,500 msg/s spread
    over them). A rate depends only on the history's two ends, which are the same
    whether a counter's flat runs are merged on their own or, as here, only while
    every counter of the owner is flat."""

    __slots__ = ("_samples", "window")

    def __init__(self, window: float = WINDOW) -> None:
        self.window = window
        # A list, not a deque: a deque's first block costs ~600 bytes, and a broker
        # keeps one of these per loaded topic, producer and consumer (thousands).
        self._samples: list[tuple[float, tuple[int, ...]]] = []

    def add(self, now: float, values: tuple[int, ...]) -> None:
        samples = self._samples
        if len(samples) >= 2 and samples[-1][1] == values == samples[-2][1]:
            # Counters that did not move: stretch their flat run rather than grow the
            # history (the rate over the run is the same), so idle counters cost two
            # samples, not one per interval.
            samples[-1] = (now, values)
            # Its start moves up to the window's start (the counters held these values
            # all along), so a burst after a long idle is measured over the window.
            samples[-2] = (max(samples[-2][0], now - self.window), values)
        else:
            samples.append((now, values))
        # Keep one sample at or before the window's start, so the window is spanned.
        while len(samples) > 2 and samples[1][0] <= now - self.window:
            del samples[0]

    @property
    def flat(self) -> bool:
        """Down to its flat run: two samples of the same values (rates of 0)."""
        samples = self._samples
        return len(samples) == 2 and samples[0][1] == samples[1][1]

    def stretch(self, now: float) -> None:
        """What ``add(now, the same values)`` does to a flat history, late: the
        sampler skips idle owners and catches up when one moves again."""
        samples = self._samples
        values = samples[-1][1]
        samples[-1] = (now, values)
        samples[-2] = (max(samples[-2][0], now - self.window), values)

    def rate(self, index: int) -> float:
        samples = self._samples
        if len(samples) < 2:
            return 0.0
        (t0, first), (t1, last) = samples[0], samples[-1]
        v0, v1 = first[index], last[index]
        if len(samples) > 2 and samples[1][1][index] == v0:
            # The counter was flat from the first sample to the second, which is
            # inside the window: it held v0 at the window's start too. (A merged flat
            # run can begin well before the window: its start would stretch the
            # window and understate the rate.)
            t0 = max(t0, t1 - self.window)
        if t1 <= t0 or v1 < v0:  # a counter that went back (a reload) says nothing
            return 0.0
        return (v1 - v0) / (t1 - t0)


class MovingRate:
    """The history of one counter alone (``CounterHistory`` of one value)."""

    __slots__ = ("_history",)

    def __init__(self, window: float = WINDOW) -> None:
        self._history = CounterHistory(window)

    @property
    def _samples(self) -> list[tuple[float, int]]:
        return [(t, values[0]) for t, values in self._history._samples]

    def add(self, now: float, value: int) -> None:
        self._history.add(now, (value,))

    def rate(self) -> float:
        return self._history.rate(0)


_TOPIC_KEYS = ("msg_in", "bytes_in", "msg_out", "bytes_out")
_PRODUCER_KEYS = ("msg_in", "bytes_in")
_SUBSCRIPTION_KEYS = ("msg_out", "redeliver", "expired")
_CONSUMER_KEYS = ("msg_out", "bytes_out")


class _Owner:
    """The rates of one topic, producer, subscription or consumer, and what the
    sampler needs to pass over it cheaply while it is idle."""

    __slots__ = ("flat", "flat_until", "history", "keys", "moved", "values")

    def __init__(self, keys: tuple[str, ...], window: float) -> None:
        self.keys = keys
        self.history = CounterHistory(window)
        # When each counter last grew, as seen by the sampler: a consumer's or a
        # subscription's lastConsumedTimestamp without a clock read per message sent
        # (here, not in a WeakKeyDictionary of its own: its setdefault made a weak
        # reference per counter that grew, each pass).
        self.moved: dict[str, float] = {}
        self.values: tuple[int, ...] = (0,) * len(keys)  # the counters at the last sample
        self.flat = False  # the counters did not move and the history is flat
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
            state = self._rates[owner] = _Owner(keys, self.window)
            self._first_seen.setdefault(owner, now)
            if from_zero and any(values):
                # The counters started at 0 with their object, which the broker's
                # sampler sees within an interval of its birth: what they counted
                # came since then (else a burst before the first sample is lost).
                state.history.add(now - SAMPLE_INTERVAL, state.values)
        elif values == state.values:
            if state.flat:
                # Idle, with the history down to its flat run: what ``add`` would do
                # is stretch the run to now; remember now, and do it when a counter
                # moves again (the rates are 0 meanwhile either way).
                state.flat_until = now
                return
        elif state.flat_until is not None:
            state.history.stretch(state.flat_until)
            state.flat_until = None
        last = state.values
        if values != last:
            moved = state.moved
            for key, value, before in zip(keys, values, last, strict=True):
                if value > before:
                    moved[key] = now
        history = state.history
        history.add(now, values)
        state.flat = values == last and history.flat
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
        if state is None or key not in state.keys:
            return 0.0
        return state.history.rate(state.keys.index(key))

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
