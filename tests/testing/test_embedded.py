"""The embedded broker and the pytest fixture, as a user's test suite meets them."""

from __future__ import annotations

import socket
import time

import pulsar
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker


def test_embedded_broker_accepts_connections_within_half_a_second() -> None:
    started = time.monotonic()
    with EmbeddedBroker() as broker:
        socket.create_connection(("127.0.0.1", broker.port), timeout=1).close()
        assert time.monotonic() - started < 0.5


def test_fixture_from_the_plugin(magnetar_broker: EmbeddedBroker) -> None:
    client = pulsar.Client(
        magnetar_broker.service_url, logger=quiet_logger()
    )
    producer = client.create_producer("fixture-topic")
    consumer = client.subscribe("fixture-topic", "s")
    producer.send(b"x")
    assert consumer.receive(5000).data() == b"x"
    client.close()


def test_data_survives_a_restart(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = EmbeddedBroker(data_dir=tmp_path)
    broker.start()
    try:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        client.create_producer("kept").send(b"persisted")
        client.close()
        broker.restart()
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        reader = client.create_reader("kept", pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"persisted"
        client.close()
    finally:
        broker.close()
