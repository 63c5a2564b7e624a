"""Fixtures shared by the broker's integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker


@pytest.fixture
def official(client_factory: Callable[..., pulsar.Client]) -> Callable[[EmbeddedBroker], Any]:
    """A producer and a consumer of the official client on one topic, checked by a
    round trip; returns ``round_trip(label)`` to check them again later (a bystander
    that must keep working while a test abuses the broker)."""

    def make(broker: EmbeddedBroker) -> Callable[[str], None]:
        client = client_factory(broker.service_url)
        topic = f"persistent://public/default/ok-{uuid.uuid4().hex[:10]}"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)

        def round_trip(label: str) -> None:
            producer.send(label.encode())
            msg = consumer.receive(timeout_millis=20_000)
            assert msg.data() == label.encode()
            consumer.acknowledge(msg)

        round_trip("before")
        return round_trip

    return make
