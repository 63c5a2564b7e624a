"""The event loop lag probe: a fake clock and sleep for its arithmetic, and one
broker whose /metrics carries its figures."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.broker.observability.loop_lag import LoopLagProbe
from magnetar.testing import EmbeddedBroker


class FakeTime:
    """A clock that a sleep advances by what was asked plus the next scripted lag;
    the sleep after the last one raises ``Done``."""

    class Done(Exception):
        pass

    def __init__(self, lags: list[float]) -> None:
        self.now = 1000.0
        self.lags = list(lags)
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if not self.lags:
            raise FakeTime.Done
        self.slept.append(seconds)
        self.now += seconds + self.lags.pop(0)


def run_probe(lags: list[float], interval: float = 0.01) -> tuple[LoopLagProbe, FakeTime]:
    fake = FakeTime(lags)
    probe = LoopLagProbe(interval, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(FakeTime.Done):
        asyncio.run(probe.run())
    return probe, fake


def test_records_the_largest_lag_and_the_stalls_over_50_ms() -> None:
    probe, fake = run_probe([0.0005, 0.12, 0.003, 0.051, 0.049, 0.0])
    assert fake.slept == [0.01] * 6
    assert probe.samples == 6
    assert probe.max_seconds == pytest.approx(0.12)
    assert probe.stalls == 2  # 120 ms and 51 ms; 49 ms is no stall
    assert probe.total == pytest.approx(0.0005 + 0.12 + 0.003 + 0.051 + 0.049)


def test_an_early_wake_up_counts_as_no_lag() -> None:
    probe, _ = run_probe([-0.0008, 0.002])
    assert probe.max_seconds == pytest.approx(0.002)
    assert probe.total == pytest.approx(0.002)
    assert probe.counts[0] == 1  # the early one, in the first bucket


def test_the_histogram_buckets_are_cumulative_and_the_families_are_named() -> None:
    probe, _ = run_probe([0.0, 0.004, 0.3, 20.0])
    worst, stalls, histogram = probe.families()
    assert worst.name == "magnetar_event_loop_lag_seconds_max"
    assert worst.samples[0].value == pytest.approx(20.0)
    assert stalls.name == "magnetar_event_loop_stalls"
    assert stalls.samples[0].labels == {"over": "0.05"}
    assert stalls.samples[0].value == 2
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert buckets["0.001"] == 1
    assert buckets["0.005"] == 2
    assert buckets["0.25"] == 2
    assert buckets["0.5"] == 3
    assert buckets["10.0"] == 3
    assert buckets["+Inf"] == 4


def test_interval_zero_disables_it() -> None:
    fake = FakeTime([0.5])
    probe = LoopLagProbe(0, clock=fake.clock, sleep=fake.sleep)
    asyncio.run(probe.run())  # returns at once
    assert fake.slept == []
    assert probe.families() == []


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(ConfigError, match="loop_lag_probe_interval"):
        BrokerConfig(loop_lag_probe_interval=-1).validate()


def test_a_real_stall_shows_on_the_metrics_page() -> None:
    with EmbeddedBroker(admin=True) as broker:
        assert broker.service is not None and broker._loop is not None
        # Hold the broker's loop for 80 ms, as a long callback would.
        broker._loop.call_soon_threadsafe(time.sleep, 0.08)
        deadline = time.monotonic() + 10
        while not broker.service.loop_lag.stalls and time.monotonic() < deadline:
            time.sleep(0.01)
        with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as response:
            text = response.read().decode()
    values = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    assert float(values["magnetar_event_loop_lag_seconds_max"]) >= 0.07
    assert float(values['magnetar_event_loop_stalls_total{over="0.05"}']) >= 1
    assert float(values["magnetar_event_loop_lag_seconds_count"]) >= 1


def test_on_a_real_loop_it_wakes_on_timers_and_stops_when_cancelled() -> None:
    beats: list[float] = []

    async def main() -> int:
        probe = LoopLagProbe(0.005)
        probe.on_wake = lambda: beats.append(time.monotonic())
        task = asyncio.get_running_loop().create_task(probe.run())
        while probe.samples < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        stopped_at = probe.samples
        await asyncio.sleep(0.05)
        assert probe.samples == stopped_at  # no timer left behind
        return stopped_at

    assert asyncio.run(main()) >= 3
    assert len(beats) >= 3
