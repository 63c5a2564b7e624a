"""A topic of a tenant or namespace that does not exist is TopicNotFound before any
authorization check, as Pulsar answers it: LOOKUP, PARTITIONED_METADATA, PRODUCER and
SUBSCRIBE of a role without any grant (tokens, authorization on)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from magnetar.client import AuthenticationToken, Client
from magnetar.client.errors import AuthorizationError, TopicNotFound
from magnetar.testing import EmbeddedBroker

from .helpers import Keys


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(token_secret_key=keys.url, authentication_enabled=True,
                        authorization_enabled=True, superuser_roles="admin") as b:
        yield b


def client(broker: EmbeddedBroker, keys: Keys, role: str) -> Client:
    return Client(broker.service_url, auth=AuthenticationToken(keys.token(role)),
                  operation_timeout=5)

async def test_a_missing_namespace_is_topic_not_found_before_authorization(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    tag = uuid.uuid4().hex[:6]
    for topic in (f"persistent://public/missing-{tag}/t", f"persistent://nobody-{tag}/ns/t"):
        async with client(broker, keys, "mallory") as c:
            with pytest.raises(TopicNotFound):  # LOOKUP
                await c._lookup.get_broker(topic)
            with pytest.raises(TopicNotFound):  # PARTITIONED_METADATA
                await c._lookup.get_partition_count(topic)
            with pytest.raises(TopicNotFound):
                await c.create_producer(topic)
            with pytest.raises(TopicNotFound):
                await c.subscribe(topic, "s")
    # An existing namespace without a grant is still refused as before.
    async with client(broker, keys, "mallory") as c:
        with pytest.raises(AuthorizationError):
            await c.create_producer("persistent://public/default/mallory")


_OFFICIAL = """
import sys, pulsar
client = pulsar.Client(sys.argv[1], authentication=pulsar.AuthenticationToken(sys.argv[2]),
                       logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
                       operation_timeout_seconds=5)
for attempt in (lambda: client.create_producer(sys.argv[3]),
                lambda: client.subscribe(sys.argv[3], "s")):
    try:
        attempt()
        print("verdict: created")
    except Exception as exc:
        print("verdict:", type(exc).__name__)
client.close()
"""


def test_official_client_gets_topic_not_found_for_a_missing_namespace(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    topic = f"persistent://public/missing-{uuid.uuid4().hex[:6]}/t"
    done = subprocess.run(
        [sys.executable, "-c", _OFFICIAL, broker.service_url, keys.token("mallory"), topic],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    verdicts = [line.split()[1] for line in done.stdout.splitlines()
                if line.startswith("verdict:")]
    assert verdicts == ["TopicNotFound", "TopicNotFound"], done.stdout
