"""The tests' official Pulsar clients (the pulsar-client package): a quiet logger, and
``official_clients`` to make clients that are all closed at the end.

tests/conftest.py's ``client_factory`` and ``client`` fixtures are built on it; it lives
in tests/ itself (on sys.path through the rootdir conftest) so any test module or helper
imports it as ``from official_client import quiet_logger``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pulsar

OPERATION_TIMEOUT_S = 10


def quiet_logger() -> pulsar.ConsoleLogger:
    """Errors only: the official client logs every connect and lookup otherwise."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


@contextlib.contextmanager
def official_clients() -> Iterator[Callable[..., pulsar.Client]]:
    """A maker of official clients (quiet, a 10 s operation timeout unless given), each
    closed on the way out; a close that fails (a broker gone) is no test's failure."""
    clients: list[pulsar.Client] = []

    def make(url: str, **kwargs: object) -> pulsar.Client:
        kwargs.setdefault("operation_timeout_seconds", OPERATION_TIMEOUT_S)
        kwargs.setdefault("logger", quiet_logger())
        client = pulsar.Client(url, **kwargs)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()
