"""A /metrics scrape reads the topics a chunk per event loop turn and renders on a
worker thread: every topic is still in it, with the figures the topic holds."""

from __future__ import annotations

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.observability import metrics
from magnetar.testing import EmbeddedBroker

from .test_storage_metrics import sample, scrape


def test_a_scrape_in_chunks_has_every_topic_and_its_counts(
    monkeypatch: pytest.MonkeyPatch, topic: str
) -> None:
    monkeypatch.setattr(metrics, "_SNAPSHOT_CHUNK", 2)  # 7 topics: four loop turns
    names = [f"{topic}-{index}" for index in range(7)]
    with EmbeddedBroker(admin=True) as broker:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        try:
            for count, name in enumerate(names, start=1):
                producer = client.create_producer(name)
                for _ in range(count):
                    producer.send(b"x")
                producer.close()
            client.subscribe(names[0], "sub")
            text = scrape(broker)
        finally:
            client.close()
    for count, name in enumerate(names, start=1):
        full = name
        assert sample(text, "pulsar_in_messages_total", topic=full) == count
        assert sample(text, "pulsar_subscriptions_count", topic=full) == (1 if count == 1 else 0)
    assert sample(text, "pulsar_topics_count") == len(names)


def test_the_bounded_resources_are_on_metrics(topic: str) -> None:
    with EmbeddedBroker(admin=True, cache_max_bytes=1 << 20) as broker:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for _ in range(30):
                producer.send(b"x" * 100_000)  # 3 MB through a 1 MB cache
            text = scrape(broker)
        finally:
            client.close()
    assert sample(text, "magnetar_entry_cache_max_bytes") == 1 << 20
    assert 0 < sample(text, "magnetar_entry_cache_bytes") <= 1 << 20
    assert sample(text, "magnetar_entry_cache_evicted_bytes_total") >= 1_000_000
    assert sample(text, "magnetar_publish_buffer_bytes") == 0  # all receipted
    assert sample(text, "magnetar_publish_buffer_max_bytes") > 0
    assert sample(text, "magnetar_connections_read_paused") == 0
    assert sample(text, "magnetar_connections_refused_total") == 0
    assert sample(text, "magnetar_segment_files_open") >= 0
