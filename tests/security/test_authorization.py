"""Authorization with tokens: superusers, the wrong role refused on produce, consume and
lookups, permissions granted and revoked through Pulsar's admin paths (new producers
refused after a revoke), SEEK and GET_LAST_MESSAGE_ID after a revoke, PIP-371 replies
only from a role that may consume, grants kept across a restart."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from official_client import quiet_logger

from magnetar.client import AuthenticationToken, Client
from magnetar.client.errors import AuthorizationError
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, admin, bearer

SETTINGS = {
    "admin": True,
    "authentication_enabled": True,
    "authorization_enabled": True,
    "superuser_roles": "admin",
}


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(token_secret_key=keys.url, **SETTINGS) as b:  # type: ignore[arg-type]
        yield b


def namespace(broker: EmbeddedBroker, keys: Keys) -> str:
    """A namespace of its own for each test (grants on public/default would leak),
    created where the broker wants namespaces created before use."""
    ns = f"public/ns-{uuid.uuid4().hex[:8]}"
    admin(broker, keys, "PUT", f"/admin/v2/namespaces/{ns}")
    return ns


def client(broker: EmbeddedBroker, keys: Keys, role: str) -> Client:
    return Client(broker.service_url, auth=AuthenticationToken(keys.token(role)),
                  operation_timeout=5)


async def test_superuser_produces_and_consumes_anywhere(broker: EmbeddedBroker, keys: Keys) -> None:
    topic = f"persistent://{namespace(broker, keys)}/t"
    async with client(broker, keys, "admin") as c:
        consumer = await c.subscribe(topic, "s")
        await (await c.create_producer(topic)).send(b"x")
        assert (await consumer.receive()).value == b"x"


async def test_wrong_role_refused_for_produce_and_consume(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    topic = f"persistent://{namespace(broker, keys)}/t"
    async with client(broker, keys, "mallory") as c:
        with pytest.raises(AuthorizationError):
            await c.create_producer(topic)
        with pytest.raises(AuthorizationError):
            await c.subscribe(topic, "s")
        with pytest.raises(AuthorizationError):  # LOOKUP
            await c._lookup.get_broker(topic)
        with pytest.raises(AuthorizationError):  # PARTITIONED_METADATA
            await c._lookup.get_partition_count(topic)
    # The refused producer did not create the topic.
    listed = admin(broker, keys, "GET", "/admin/v2/persistent/" + topic[13:].rsplit("/", 1)[0])
    assert topic not in (listed.json() if listed.status == 200 else [])


def test_official_client_wrong_role_for_produce_and_for_consume(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = namespace(broker, keys)
    topic = f"persistent://{ns}/t"
    assert admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/writer",
                 ["produce"]).status == 204
    assert admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/reader",
                 ["consume"]).status == 204
    writer = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(
        keys.token("writer")), logger=quiet_logger(), operation_timeout_seconds=5)
    reader = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(
        keys.token("reader")), logger=quiet_logger(), operation_timeout_seconds=5)
    try:
        consumer = reader.subscribe(topic, "s")
        producer = writer.create_producer(topic)
        producer.send(b"granted")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted"
        with pytest.raises(pulsar.PulsarException):  # the reader may not produce
            reader.create_producer(topic)
        with pytest.raises(pulsar.PulsarException):  # the writer may not consume
            writer.subscribe(topic, "w")
    finally:
        writer.close()
        reader.close()


async def test_grant_then_revoke_refuses_new_producers(broker: EmbeddedBroker, keys: Keys) -> None:
    ns = namespace(broker, keys)
    topic = f"persistent://{ns}/t"
    path = f"/admin/v2/namespaces/{ns}/permissions"
    assert admin(broker, keys, "POST", f"{path}/bob", ["produce"]).status == 204
    assert admin(broker, keys, "GET", path).json() == {"bob": ["produce"]}
    async with client(broker, keys, "bob") as c:
        first = await c.create_producer(topic)
        await first.send(b"while granted")
        assert admin(broker, keys, "DELETE", f"{path}/bob").status == 204
        assert admin(broker, keys, "GET", path).json() == {}
        with pytest.raises(AuthorizationError):
            await c.create_producer(topic)
        # As in Pulsar, a producer attached before the revoke is not closed by it.
        await first.send(b"attached before")


async def test_topic_grants(broker: EmbeddedBroker, keys: Keys) -> None:
    ns = namespace(broker, keys)
    topic, other = f"persistent://{ns}/granted", f"persistent://{ns}/other"
    tpath = f"/admin/v2/persistent/{ns}/granted/permissions"
    assert admin(broker, keys, "POST", f"{tpath}/carol", ["consume", "produce"]).status == 204
    assert admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/dave",
                 ["consume"]).status == 204
    assert admin(broker, keys, "GET", tpath).json() == {
        "carol": ["consume", "produce"], "dave": ["consume"]
    }
    async with client(broker, keys, "carol") as c:
        await (await c.create_producer(topic)).send(b"ok")
        with pytest.raises(AuthorizationError):
            await c.create_producer(other)
    # dave's grant is the namespace's: not revocable on the topic (Pulsar's 412)
    assert admin(broker, keys, "DELETE", f"{tpath}/dave").status == 412
    assert admin(broker, keys, "DELETE", f"{tpath}/carol").status == 204
    async with client(broker, keys, "carol") as c:
        with pytest.raises(AuthorizationError):
            await c.create_producer(topic)


async def test_listing_a_namespace_needs_a_grant_on_the_namespace(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = namespace(broker, keys)
    topic = f"persistent://{ns}/listed"
    async with client(broker, keys, "admin") as c:
        await (await c.create_producer(topic)).send(b"x")
        assert topic in await c._lookup.get_topics_of_namespace(ns)
    tpath = f"/admin/v2/persistent/{ns}/listed/permissions"
    assert admin(broker, keys, "POST", f"{tpath}/erin", ["consume"]).status == 204
    async with client(broker, keys, "erin") as c:
        # A grant on one topic lets erin consume it, not list the namespace (Pulsar's
        # GET_TOPICS namespace operation); nor may a role with no grant at all.
        await c.subscribe(topic, "s")
        with pytest.raises(AuthorizationError, match="GetTopicsOfNamespace"):
            await c._lookup.get_topics_of_namespace(ns)
    async with client(broker, keys, "mallory") as c:
        with pytest.raises(AuthorizationError):
            await c._lookup.get_topics_of_namespace(ns)
    npath = f"/admin/v2/namespaces/{ns}/permissions/erin"
    assert admin(broker, keys, "POST", npath, ["consume"]).status == 204
    async with client(broker, keys, "erin") as c:
        assert topic in await c._lookup.get_topics_of_namespace(ns)


@pytest.mark.parametrize(
    ("body", "status"),
    [(["functions"], 501), (["sources"], 501), (["fly"], 400), ({"a": 1}, 400), ("x", 400)],
)
def test_bad_grants(broker: EmbeddedBroker, keys: Keys, body: object, status: int) -> None:
    ns = namespace(broker, keys)
    reply = admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/r", body)
    assert reply.status == status
    assert reply.json()["reason"]
    assert admin(broker, keys, "GET", f"/admin/v2/namespaces/{ns}/permissions").json() == {}


def test_permission_routes_need_a_superuser(broker: EmbeddedBroker, keys: Keys) -> None:
    ns = namespace(broker, keys)
    reply = http(broker, "POST", f"/admin/v2/namespaces/{ns}/permissions/me", ["produce"],
                 headers=bearer(keys.token("me")))
    assert reply.status == 403
    assert http(f"{broker.admin_url}/admin/v2/namespaces/{ns}/permissions").status == 401


async def test_seek_and_last_message_id_after_a_revoke(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    ns = namespace(broker, keys)
    topic = f"persistent://{ns}/t"
    path = f"/admin/v2/namespaces/{ns}/permissions/erin"
    assert admin(broker, keys, "POST", path, ["consume", "produce"]).status == 204
    async with client(broker, keys, "erin") as c:
        consumer = await c.subscribe(topic, "s")
        await (await c.create_producer(topic)).send(b"x")
        await consumer.get_last_message_id()
        assert admin(broker, keys, "DELETE", path).status == 204
        with pytest.raises(AuthorizationError):
            await consumer.get_last_message_id()
        with pytest.raises(AuthorizationError):
            await consumer.seek(0)


async def test_a_reply_needs_consume_permission(broker: EmbeddedBroker, keys: Keys) -> None:
    """PIP-371: the consumer's role must (still) be allowed to consume the topic."""
    ns = namespace(broker, keys)
    topic = f"persistent://{ns}/rpc"
    base = f"/admin/v2/namespaces/{ns}/permissions"
    assert admin(broker, keys, "POST", f"{base}/asker", ["produce"]).status == 204
    assert admin(broker, keys, "POST", f"{base}/worker", ["consume"]).status == 204
    async with client(broker, keys, "asker") as a, client(broker, keys, "worker") as w:
        consumer = await w.subscribe(topic, "s", subscription_type="shared")
        producer = await a.create_producer(topic)
        pending = asyncio.ensure_future(producer.request(b"question", timeout=30))
        msg = await consumer.receive()
        await consumer.acknowledge(msg, reply=b"answer")
        assert (await pending).value == b"answer"
        assert admin(broker, keys, "DELETE", f"{base}/worker").status == 204
        pending = asyncio.ensure_future(producer.request(b"again", timeout=30))
        msg = await consumer.receive()
        with pytest.raises(AuthorizationError):
            await (await consumer.acknowledge(msg, reply=b"not allowed any more"))
        pending.cancel()


async def test_grants_survive_a_restart(keys: Keys, tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, token_secret_key=keys.url, **SETTINGS)  # type: ignore[arg-type]
    with broker:
        ns = namespace(broker, keys)
        topic = f"persistent://{ns}/t"
        assert admin(broker, keys, "POST", f"/admin/v2/namespaces/{ns}/permissions/fay",
                     ["produce"]).status == 204
        broker.restart()
        assert admin(broker, keys, "GET", f"/admin/v2/namespaces/{ns}/permissions").json() == {
            "fay": ["produce"]
        }
        async with client(broker, keys, "fay") as c:
            await (await c.create_producer(topic)).send(b"after restart")


def test_grants_of_a_namespace_created_with_its_policies(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    """The official client suite's setup: private/auth created with auth_policies that
    grant token-principal produce and consume (Pulsar's Policies body)."""
    ns = f"public/created-{uuid.uuid4().hex[:8]}"
    body = {"auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]},
                              "destination_auth": {}, "subscription_auth_roles": {}},
            "replication_clusters": ["standalone"]}
    assert admin(broker, keys, "PUT", f"/admin/v2/namespaces/{ns}", body).status == 204
    topic = f"persistent://{ns}/t"
    principal = pulsar.Client(broker.service_url, authentication=pulsar.AuthenticationToken(
        keys.token("token-principal")), logger=quiet_logger(), operation_timeout_seconds=5)
    try:
        consumer = principal.subscribe(topic, "s")
        principal.create_producer(topic).send(b"granted at creation")
        assert consumer.receive(timeout_millis=10_000).data() == b"granted at creation"
    finally:
        principal.close()
