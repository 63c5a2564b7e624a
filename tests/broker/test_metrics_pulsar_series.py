"""Pulsar's rate, subscription, backlog-size and write-latency series on /metrics,
parsed with prometheus_client's parser after a known workload: counters exact, rates
those of the admin stats' moving window (sampled at controlled times), topics stored
but not loaded included, no _created series."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger
from prometheus_client.parser import text_string_to_metric_families

from magnetar.broker.observability.rates import RateTracker
from magnetar.storage.record import HEADER_SIZE
from magnetar.testing import EmbeddedBroker

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(broker: EmbeddedBroker) -> Samples:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    for (found, found_labels), number in samples.items():
        if found == name and set(labels.items()) <= found_labels:
            return number
    raise AssertionError(f"no sample {name} {labels}")


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


def sample_rates(broker: EmbeddedBroker, tracker: RateTracker, now: float) -> None:
    """One sample of every loaded topic's counters at ``now``, on the broker's loop."""
    service = broker.service
    assert service is not None and broker._loop is not None

    async def sample() -> None:
        tracker.sample(now, list(service.topics.values()))

    asyncio.run_coroutine_threadsafe(sample(), broker._loop).result(30)


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def quiet(url: str) -> pulsar.Client:
    return pulsar.Client(url, logger=quiet_logger())


def test_counters_rates_subscriptions_and_write_latency(topic: str) -> None:
    count, acked, size = 20, 8, 100
    with EmbeddedBroker(admin=True) as broker:
        client = quiet(broker.service_url)
        try:
            consumer = client.subscribe(topic, "sub", receiver_queue_size=1000)
            producer = client.create_producer(topic)
            for index in range(count):
                producer.send(bytes([index]) * size)
            received = [consumer.receive(timeout_millis=10_000) for _ in range(count)]
            for message in received[:acked]:
                consumer.acknowledge(message)
            sub = {"topic": topic, "subscription": "sub"}
            wait_for(lambda: value(scrape(broker), "pulsar_subscription_back_log", **sub)
                     == count - acked)
            samples = scrape(broker)
        finally:
            client.close()

    entry_bytes = value(samples, "pulsar_in_bytes_total", topic=topic)
    assert value(samples, "pulsar_in_messages_total", topic=topic) == count
    assert value(samples, "pulsar_out_messages_total", topic=topic) == count
    assert value(samples, "pulsar_out_bytes_total", topic=topic) == entry_bytes
    assert entry_bytes % count == 0
    per_entry = entry_bytes // count
    assert value(samples, "pulsar_subscription_back_log", **sub) == count - acked
    assert value(samples, "pulsar_subscription_unacked_messages", **sub) == count - acked
    assert value(samples, "pulsar_msg_backlog", topic=topic) == count - acked
    assert value(samples, "pulsar_storage_backlog_size", topic=topic) == (
        (count - acked) * (per_entry + HEADER_SIZE)
    )
    # magnetar's histogram in seconds, and Pulsar's gauges in milliseconds beside it.
    histogram = "magnetar_storage_write_latency_seconds"
    assert value(samples, f"{histogram}_count", topic=topic) == count
    assert value(samples, f"{histogram}_bucket", topic=topic, le="+Inf") == count
    seconds = value(samples, f"{histogram}_sum", topic=topic)
    assert seconds > 0
    assert value(samples, "pulsar_storage_write_latency_count", topic=topic) == count
    assert value(samples, "pulsar_storage_write_latency_sum", topic=topic) == pytest.approx(
        seconds * 1000)
    per_bucket = [value(samples, f"pulsar_storage_write_latency_{suffix}", topic=topic)
                  for suffix in ("le_0_5", "le_1", "le_5", "le_10", "le_20", "le_50",
                                 "le_100", "le_200", "le_1000", "overflow")]
    assert sum(per_bucket) == count  # each entry in exactly one bucket, as Pulsar's
    assert "pulsar_storage_write_latency_bucket" not in names(samples)
    # The process's own series (prometheus-client's process and platform collectors).
    assert value(samples, "process_resident_memory_bytes") > 0
    assert "process_cpu_seconds_total" in names(samples)
    assert "python_info" in names(samples)
    assert not any(name.endswith("_created") for name in names(samples))


def test_rates_are_deltas_over_the_scrape_interval(topic: str) -> None:
    count = 12
    with EmbeddedBroker(admin=True) as broker:
        assert broker.service is not None
        # A tracker of the test's own: the broker's sampler (real time, every second)
        # keeps sampling the one it started with.
        tracker = broker.service.rates = RateTracker()
        client = quiet(broker.service_url)
        try:
            consumer = client.subscribe(topic, "sub")
            producer = client.create_producer(topic)
            sample_rates(broker, tracker, 100.0)
            assert value(scrape(broker), "pulsar_rate_in", topic=topic) == 0  # one sample
            for index in range(count):
                producer.send(b"%03d" % index)
            for _ in range(count):
                consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            service = broker.service
            wait_for(lambda: service.topics[topic].stats.messages_out == count)
            sample_rates(broker, tracker, 104.0)
            samples = scrape(broker)
            with urllib.request.urlopen(
                f"{broker.admin_url}/admin/v2/persistent/public/default/"
                f"{topic.rsplit('/', 1)[1]}/stats", timeout=30,
            ) as answer:
                stats = json.load(answer)
        finally:
            client.close()
    entry_bytes = value(samples, "pulsar_in_bytes_total", topic=topic)
    sub = {"topic": topic, "subscription": "sub"}
    assert value(samples, "pulsar_rate_in", topic=topic) == count / 4
    assert value(samples, "pulsar_rate_out", topic=topic) == count / 4
    assert value(samples, "pulsar_throughput_in", topic=topic) == entry_bytes / 4
    assert value(samples, "pulsar_throughput_out", topic=topic) == entry_bytes / 4
    assert value(samples, "pulsar_subscription_msg_rate_out", **sub) == count / 4
    # The same window as the admin stats.
    assert stats["msgRateIn"] == count / 4
    assert stats["msgThroughputOut"] == entry_bytes / 4


def segment_bytes(data_dir: Path) -> int:
    return sum(p.stat().st_size for p in data_dir.rglob("*.seg"))


def test_topics_on_disk_but_not_loaded(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        client = quiet(broker.service_url)
        try:
            producer = client.create_producer(topic)
            for _ in range(5):
                producer.send(b"stored")
        finally:
            client.close()
    stored = segment_bytes(tmp_path)
    assert stored > 0
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        assert broker.service is not None and topic not in broker.service.topics
        samples = scrape(broker)
        assert topic not in broker.service.topics  # the scrape loaded nothing
    assert value(samples, "pulsar_storage_size", topic=topic) == stored
    assert value(samples, "pulsar_in_messages_total", topic=topic) == 0
    assert value(samples, "pulsar_rate_in", topic=topic) == 0
    assert value(samples, "pulsar_subscriptions_count", topic=topic) == 0
