"""Token authentication on the binary protocol, with the official client and magnetar's:
a good token connects; a bad signature, an expired token or none is refused with an
authentication error; RS256 tokens checked by a public key; the anonymous role."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.auth.tokens import create_secret_key, create_token, load_private_key
from magnetar.client import AuthenticationToken, Client
from magnetar.client.errors import AuthenticationError
from magnetar.testing import EmbeddedBroker

from .helpers import Keys


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(authentication_enabled=True, token_secret_key=keys.url) as b:
        yield b


def official(url: str, token: str | None) -> pulsar.Client:
    auth = pulsar.AuthenticationToken(token) if token is not None else None
    return pulsar.Client(
        url, authentication=auth, logger=quiet_logger(), operation_timeout_seconds=3
    )


def test_official_client_with_a_good_token_produces_and_consumes(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    client = official(broker.service_url, keys.token("alice"))
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        producer.send(b"hello")
        assert consumer.receive(timeout_millis=10_000).data() == b"hello"
    finally:
        client.close()


@pytest.mark.parametrize("case", ["bad signature", "expired", "missing", "garbage"])
def test_official_client_is_refused(
    broker: EmbeddedBroker, keys: Keys, topic: str, case: str
) -> None:
    token = {
        "bad signature": create_token("alice", secret_key=create_secret_key()),
        "expired": keys.token("alice", expires_in=-60),
        "missing": None,
        "garbage": "not-a-jwt",
    }[case]
    client = official(broker.service_url, token)
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(topic)
    finally:
        client.close()


async def test_magnetar_client_good_and_refused_tokens(
    broker: EmbeddedBroker, keys: Keys, topic: str
) -> None:
    async with Client(broker.service_url, auth=AuthenticationToken(keys.token("bob"))) as c:
        producer = await c.create_producer(topic)
        await producer.send(b"x")
    refused = {
        "bad signature": AuthenticationToken(create_token("bob", secret_key=b"k" * 32)),
        "expired": AuthenticationToken(keys.token("bob", expires_in=-1)),
        "missing": None,
        "empty": AuthenticationToken(""),
    }
    for case, auth in refused.items():
        async with Client(broker.service_url, auth=auth, operation_timeout=5) as c:
            with pytest.raises(AuthenticationError) as caught:
                await c.create_producer(topic)
            assert "Failed to authenticate" in str(caught.value), case
    expired = refused["expired"]
    async with Client(broker.service_url, auth=expired, operation_timeout=5) as c:
        with pytest.raises(AuthenticationError, match="expired"):
            await c.create_producer(topic)


async def test_a_token_signed_by_the_private_key_of_the_public_key(
    key_pair: tuple[Path, Path], keys: Keys, topic: str
) -> None:
    private, public = key_pair
    token = create_token("carol", private_key=load_private_key(private.read_bytes()))
    with EmbeddedBroker(
        authentication_enabled=True, token_public_key=f"file://{public}"
    ) as broker:
        async with Client(broker.service_url, auth=AuthenticationToken(token)) as c:
            await (await c.create_producer(topic)).send(b"rs256")
        # An HS256 token (whatever its key) is no good against an RSA public key.
        async with Client(
            broker.service_url, auth=AuthenticationToken(keys.token("carol")),
            operation_timeout=5,
        ) as c:
            with pytest.raises(AuthenticationError):
                await c.create_producer(topic)


async def test_anonymous_role_lets_a_client_without_credentials_in(
    keys: Keys, topic: str
) -> None:
    with EmbeddedBroker(
        authentication_enabled=True, token_secret_key=keys.url, anonymous_user_role="guest"
    ) as broker:
        async with Client(broker.service_url) as c:
            await (await c.create_producer(topic)).send(b"anonymous")
        # Credentials that are presented must still be good.
        async with Client(
            broker.service_url, auth=AuthenticationToken("x.y.z"), operation_timeout=5
        ) as c:
            with pytest.raises(AuthenticationError):
                await c.create_producer(topic)


async def test_the_token_is_checked_from_a_data_url(keys: Keys, topic: str) -> None:
    import base64

    url = "data:;base64," + base64.b64encode(keys.secret).decode()
    with EmbeddedBroker(authentication_enabled=True, token_secret_key=url) as broker:
        async with Client(broker.service_url, auth=AuthenticationToken(keys.token("d"))) as c:
            await (await c.create_producer(topic)).send(b"data-url")
