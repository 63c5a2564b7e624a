"""Expiring tokens on live connections, as Pulsar's ServerCnx refreshes them: a client
that supports refresh gets AUTH_CHALLENGE and answers with a fresh token (the official
client calls its token supplier again; so does magnetar's), and keeps its connection;
a client that answers with the expired token, or that does not support refresh, is
disconnected."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.session.connection import ServerCnx
from magnetar.client import AuthenticationToken, Client
from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import Keys

T = BaseCommand.Type
LIFETIME = 2  # seconds a token lives in these tests


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        authentication_enabled=True,
        token_secret_key=keys.url,
        authentication_refresh_check_seconds=0.25,
    ) as b:
        yield b


def connections(broker: EmbeddedBroker, role: str) -> list[ServerCnx]:
    assert broker.server is not None
    return [c for c in list(broker.server.service.connections) if c.role == role and c.alive]


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def refreshed_past(cnx: ServerCnx, first_expiry: float) -> bool:
    identity = cnx.auth.identity if cnx.auth is not None else None
    return identity is not None and (identity.expires_at or 0) > first_expiry + 1


def test_official_client_refreshes_through_its_supplier(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(lambda: keys.token("sup", LIFETIME)),
        logger=quiet_logger(),
        operation_timeout_seconds=10,
    )
    try:
        producer = client.create_producer(topic)
        (cnx,) = connections(broker, "sup")
        assert cnx.auth is not None and cnx.auth.identity is not None
        first = cnx.auth.identity.expires_at
        assert first is not None
        wait_until(lambda: refreshed_past(cnx, first))  # AUTH_CHALLENGE answered
        producer.send(b"after refresh")
        assert cnx.alive and connections(broker, "sup") == [cnx]  # the same connection
    finally:
        client.close()


def test_official_client_with_a_fixed_token_is_disconnected_after_expiry(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(keys.token("fixed", LIFETIME)),
        logger=quiet_logger(),
        operation_timeout_seconds=10,
    )
    try:
        client.create_producer(topic)
        (cnx,) = connections(broker, "fixed")
        wait_until(lambda: not cnx.alive)
    finally:
        client.close()


async def test_magnetar_client_refreshes_through_its_supplier(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    auth = AuthenticationToken(lambda: keys.token("mag", LIFETIME))
    async with Client(broker.service_url, auth=auth) as client:
        producer = await client.create_producer(topic)
        (cnx,) = connections(broker, "mag")
        assert cnx.auth is not None and cnx.auth.identity is not None
        first = cnx.auth.identity.expires_at
        assert first is not None
        deadline = time.monotonic() + 30
        while not refreshed_past(cnx, first):
            assert time.monotonic() < deadline
            await producer.send(b"tick")
        assert cnx.alive and connections(broker, "mag") == [cnx]


def test_a_client_without_refresh_support_is_closed(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    connect = pb.CommandConnect(
        client_version="old", protocol_version=21, auth_method_name="token",
        auth_data=keys.token("old", LIFETIME).encode(),
        feature_flags=pb.FeatureFlags(supports_auth_refresh=False),
    )
    decoder = FrameDecoder()
    seen: list[int] = []
    with socket.create_connection(("127.0.0.1", broker.port), timeout=30) as sock:
        sock.sendall(encode_command(BaseCommand(type=T.CONNECT, connect=connect)))
        while True:
            data = sock.recv(65536)
            if not data:
                break  # closed by the broker once the token expired
            for frame in decoder.feed(data):
                seen.append(frame.command.type)
                if frame.command.type == T.PING:
                    sock.sendall(encode_command(BaseCommand(type=T.PONG, pong=pb.CommandPong())))
    assert seen[0] == T.CONNECTED
    assert T.AUTH_CHALLENGE not in seen


async def test_the_role_may_not_change_on_refresh(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    roles = iter(["first-role"])

    def supplier() -> str:
        return keys.token(next(roles, "second-role"), LIFETIME)

    async with Client(broker.service_url, auth=AuthenticationToken(supplier)) as client:
        await client.create_producer(topic)
        (cnx,) = connections(broker, "first-role")
        deadline = time.monotonic() + 30
        while cnx.alive:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
