"""Fixtures for the client tests: magnetar's asyncio client against the session broker.

The root conftest provides ``broker`` (one embedded broker for the session),
``topic`` (a unique topic name) and ``client`` (the *official* pulsar client).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from magnetar.client import Client
from magnetar.testing import EmbeddedBroker


@pytest.fixture
async def mclient(broker: EmbeddedBroker) -> AsyncIterator[Client]:
    """magnetar's own client, connected to the session broker."""
    client = Client(broker.service_url, operation_timeout=10.0)
    try:
        yield client
    finally:
        await client.close()
