"""pytest plugin (registered through the ``pytest11`` entry point).

Fixtures: ``magnetar_broker`` (a fresh broker per test) and
``magnetar_broker_session`` (one broker shared by the session).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from magnetar.testing.embedded import EmbeddedBroker


@pytest.fixture
def magnetar_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker


@pytest.fixture(scope="session")
def magnetar_broker_session() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker() as broker:
        yield broker
