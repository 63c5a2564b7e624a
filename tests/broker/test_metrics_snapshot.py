"""A /metrics scrape reads the topics a chunk per event loop turn and renders on a
worker thread: every topic is still in it, with the figures the topic holds."""

from __future__ import annotations

import pulsar
import pytest

from magnetar.broker import metrics
from magnetar.testing import EmbeddedBroker

from .test_storage_metrics import sample, scrape


def test_a_scrape_in_chunks_has_every_topic_and_its_counts(
    monkeypatch: pytest.MonkeyPatch, topic: str
) -> None:
    monkeypatch.setattr(metrics, "_SNAPSHOT_CHUNK", 2)  # 7 topics: four loop turns
    names = [f"{topic}-{index}" for index in range(7)]
    with EmbeddedBroker(admin=True) as broker:
        client = pulsar.Client(
            broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
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
