"""Moving-window rates: exact on a steady counter, two samples for an idle one, and a
burst after a long idle measured over the window, not over the idle time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

import pytest

from magnetar.broker.observability.rates import SAMPLE_CHUNK, MovingRate, RateTracker


def test_a_steady_counter_gives_its_rate_over_the_window() -> None:
    rate = MovingRate(window=10.0)
    for second in range(30):
        rate.add(float(second), second * 5)
    assert rate.rate() == 5.0
    assert len(rate._samples) <= 12


def test_an_idle_counter_keeps_two_samples_and_a_zero_rate() -> None:
    rate = MovingRate(window=10.0)
    for second in range(1000):
        rate.add(float(second), 42)
    assert rate.rate() == 0.0
    assert len(rate._samples) == 2


def test_a_burst_after_a_long_idle_is_measured_over_the_window() -> None:
    rate = MovingRate(window=10.0)
    for second in range(100):
        rate.add(float(second), 7)
    rate.add(100.0, 7 + 50)  # 50 in the last second
    assert rate.rate() == 50 / 10  # over the window, not 50 / 100


def test_a_counter_that_went_back_says_nothing() -> None:
    rate = MovingRate(window=10.0)
    rate.add(0.0, 100)
    rate.add(1.0, 3)  # the topic was reloaded
    assert rate.rate() == 0.0


def test_the_sampler_yields_to_the_loop_between_chunks_of_topics() -> None:
    """5,000 loaded topics sampled in one callback stalled the loop 150-200 ms a second:
    a pass samples at most SAMPLE_CHUNK topics before it lets other callbacks run."""
    calls: list[tuple[int, int]] = []  # (topics sampled, other callbacks run so far)
    ticks = [0]

    class Spy(RateTracker):
        def sample(self, now: float, topics: Iterable[Any]) -> None:
            calls.append((len(list(topics)), ticks[0]))

    topics: list[Any] = [object()] * (SAMPLE_CHUNK * 4 + 1)

    async def scenario() -> None:
        async def other() -> None:
            while True:
                ticks[0] += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(other())
        sampler = asyncio.create_task(Spy().run(lambda: topics, lambda: 0.0, interval=0))
        while sum(n for n, _ in calls) < len(topics):
            await asyncio.sleep(0)
        sampler.cancel()
        ticker.cancel()

    asyncio.run(scenario())
    sizes = [n for n, _ in calls]
    assert sum(sizes[:5]) == len(topics) and max(sizes) <= SAMPLE_CHUNK
    assert calls[1][1] > calls[0][1]  # the loop ran something between two chunks


class _Stats:
    def __init__(self) -> None:
        self.messages_in = self.bytes_in = self.messages_out = self.bytes_out = 0


class _Topic:
    """What the sampler reads of a topic: its counters, no clients."""

    def __init__(self) -> None:
        self.stats = _Stats()
        self.producers: dict[str, Any] = {}
        self.subscriptions: dict[str, Any] = {}


def test_an_idle_topic_costs_the_sampler_no_history_work_and_its_rates_stay_exact() -> None:
    """5,000 idle topics: each pass stretched every counter's history; an idle owner
    whose histories are flat is now passed over, and caught up when it moves again,
    so a burst after the idle is measured exactly as before."""
    tracker, topic, reference = RateTracker(window=10.0), _Topic(), MovingRate(window=10.0)
    topic.stats.messages_in = 7
    for second in range(100):
        tracker.sample(float(second), [topic])
        reference.add(float(second), 7)
    history = tracker._rates[topic].history._samples  # type: ignore[attr-defined]
    assert history[-1][0] < 99.0  # passed over while idle: not stretched each second
    assert tracker.rate(topic, "msg_in") == reference.rate() == 0.0
    topic.stats.messages_in = 57  # 50 in the last second
    tracker.sample(100.0, [topic])
    reference.add(100.0, 57)
    assert tracker.rate(topic, "msg_in") == reference.rate()
    assert 50 / 11 <= tracker.rate(topic, "msg_in") <= 50 / 10
    for second in range(101, 130):  # idle again, then a steady rate
        tracker.sample(float(second), [topic])
        reference.add(float(second), 57)
    for second in range(130, 150):
        topic.stats.messages_in += 3
        tracker.sample(float(second), [topic])
        reference.add(float(second), topic.stats.messages_in)
        assert tracker.rate(topic, "msg_in") == reference.rate()


def _brute_force_rate(samples: list[tuple[float, int]], now: float, window: float) -> float:
    """Every sample kept: growth from the last sample at or before the window's start
    (or the first one) to now, per second."""
    start = [s for s in samples if s[0] <= now - window] or samples[:1]
    (t0, v0), (t1, v1) = start[-1], samples[-1]
    return 0.0 if t1 <= t0 or v1 < v0 else (v1 - v0) / (t1 - t0)


def test_the_rates_of_counters_that_move_apart_match_a_history_that_keeps_every_sample() -> None:
    """A topic's four counters share one history: one moving while the others are
    flat, all idle, bursts and a reload must still give each counter its own rate."""
    checked_nonzero = 0
    import random

    rng = random.Random(7)
    tracker, topic = RateTracker(window=10.0), _Topic()
    kept: dict[str, list[tuple[float, int]]] = {k: [] for k in ("msg_in", "msg_out")}
    for second in range(400):
        phase = (second // 25) % 4  # both move, only msg_in, idle, only msg_out
        if phase in (0, 1) and rng.random() < 0.7:
            topic.stats.messages_in += rng.randint(1, 50)
        if phase in (0, 3) and rng.random() < 0.7:
            topic.stats.messages_out += rng.randint(1, 50)
        if second == 300:
            topic.stats.messages_in = 2  # reloaded: counted from zero again
        tracker.sample(float(second), [topic])
        kept["msg_in"].append((float(second), topic.stats.messages_in))
        kept["msg_out"].append((float(second), topic.stats.messages_out))
        for key, samples in kept.items():
            expected = _brute_force_rate(samples, float(second), 10.0)
            assert tracker.rate(topic, key) == pytest.approx(expected), (second, key)
            checked_nonzero += tracker.rate(topic, key) > 0
    assert checked_nonzero > 300
