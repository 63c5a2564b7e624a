"""Moving-window rates: exact on a steady counter, two samples for an idle one, and a
burst after a long idle measured over the window, not over the idle time."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

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
    assert 50 / 11 <= rate.rate() <= 50 / 10  # over the window, not 50 / 100


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
