"""Shared fixtures: a real magnetar broker on loopback and the official Pulsar client."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One in-process broker for the session; tests use unique topic names."""
    with EmbeddedBroker(admin=True) as b:
        yield b


def quiet_logger() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@pytest.fixture
def client_factory() -> Iterator[Callable[[str], pulsar.Client]]:
    clients: list[pulsar.Client] = []

    def make(url: str, **kwargs: object) -> pulsar.Client:
        kwargs.setdefault("operation_timeout_seconds", 10)
        client = pulsar.Client(url, logger=quiet_logger(), **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        with contextlib.suppress(Exception):
            client.close()


@pytest.fixture
def client(broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]) -> pulsar.Client:
    return client_factory(broker.service_url)


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"
