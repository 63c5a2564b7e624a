"""Shared fixtures: a real magnetar broker on loopback and the official Pulsar client."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pulsar
import pytest
from official_client import official_clients

from magnetar.testing import EmbeddedBroker


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One in-process broker for the session; tests use unique topic names."""
    with EmbeddedBroker(admin=True) as b:
        yield b


@pytest.fixture
def client_factory() -> Iterator[Callable[..., pulsar.Client]]:
    """Official clients for a test (quiet, closed at its end): ``client_factory(url)``."""
    with official_clients() as make:
        yield make


@pytest.fixture
def client(broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]) -> pulsar.Client:
    return client_factory(broker.service_url)


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:12]}"
