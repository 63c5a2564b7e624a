"""Chunked messages (PIP-37): the official client splits a message larger than the
broker's max_message_size into chunks; the broker stores and dispatches them as any
entries, and the consumer gets the whole message back."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pulsar

from magnetar.testing import EmbeddedBroker


def test_a_message_over_the_size_limit_goes_through_in_chunks(
    client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = f"persistent://public/default/chunks-{uuid.uuid4().hex[:10]}"
    with EmbeddedBroker(max_message_size=256 * 1024) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, chunking_enabled=True, batching_enabled=False)
        big = bytes(range(256)) * 4096  # 1 MiB: at least four chunks
        producer.send(big)
        producer.send(b"small")
        first = consumer.receive(timeout_millis=20_000)
        assert first.data() == big
        consumer.acknowledge(first)
        assert consumer.receive(timeout_millis=20_000).data() == b"small"
        service = broker.service
        assert service is not None
        assert service.topics[topic].ledger.entry_count() >= 5  # 4+ chunks and the small one
