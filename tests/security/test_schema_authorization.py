"""GET_SCHEMA and GET_OR_CREATE_SCHEMA authorized as Pulsar authorizes them: reading
takes a lookup's permission (produce or consume), adding a version takes produce, and
neither creates a topic (Pulsar's getTopicIfExists answers TopicNotFound)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import Keys, admin
from .wire import TokenPeer

T = BaseCommand.Type

V1 = pb.Schema(name="rec", type=pb.Schema.Json,
               schema_data=b'{"type":"record","name":"R","fields":[]}')
V2 = pb.Schema(name="rec", type=pb.Schema.Json,
               schema_data=b'{"type":"record","name":"R","fields":'
                           b'[{"name":"a","type":"int","default":1}]}')


@pytest.fixture(scope="module")
def broker(keys: Keys) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        token_secret_key=keys.url, admin=True, authentication_enabled=True,
        authorization_enabled=True, superuser_roles="admin",
    ) as b:
        yield b


@pytest.fixture
def owned(broker: EmbeddedBroker, keys: Keys) -> str:
    """A topic of its own namespace with schema version 0, put there by its owner;
    ``reader`` may consume there and ``writer`` produce."""
    ns = f"public/schema-{uuid.uuid4().hex[:8]}"
    assert admin(broker, keys, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    for role, actions in (("owner", ["produce", "consume"]), ("reader", ["consume"]),
                          ("writer", ["produce"])):
        path = f"/admin/v2/namespaces/{ns}/permissions/{role}"
        assert admin(broker, keys, "POST", path, actions).status == 204
    topic = f"persistent://{ns}/t"
    owner = TokenPeer(broker.port, keys.token("owner"))
    attached = owner.request(BaseCommand(type=T.PRODUCER, producer=pb.CommandProducer(
        topic=topic, producer_id=1, request_id=1, schema=V1)), 1)
    owner.close()
    assert attached.command.type == T.PRODUCER_SUCCESS, attached.command
    return topic


def get_schema(peer: TokenPeer, topic: str, request_id: int) -> pb.CommandGetSchemaResponse:
    command = BaseCommand(type=T.GET_SCHEMA, getSchema=pb.CommandGetSchema(
        request_id=request_id, topic=topic))
    frame = peer.request(command, request_id)
    assert frame.command.type == T.GET_SCHEMA_RESPONSE, frame.command
    return frame.command.getSchemaResponse


def get_or_create(
    peer: TokenPeer, topic: str, schema: pb.Schema, request_id: int
) -> pb.CommandGetOrCreateSchemaResponse:
    request = pb.CommandGetOrCreateSchema(request_id=request_id, topic=topic, schema=schema)
    command = BaseCommand(type=T.GET_OR_CREATE_SCHEMA, getOrCreateSchema=request)
    frame = peer.request(command, request_id)
    assert frame.command.type == T.GET_OR_CREATE_SCHEMA_RESPONSE, frame.command
    return frame.command.getOrCreateSchemaResponse


def versions(broker: EmbeddedBroker, keys: Keys, topic: str) -> list[int]:
    reply = admin(broker, keys, "GET", f"/admin/v2/schemas/{topic[len('persistent://'):]}/schemas")
    assert reply.status == 200, reply
    return [entry["version"] for entry in reply.json()["getSchemaResponses"]]


def topics_of(broker: EmbeddedBroker, keys: Keys, namespace: str) -> list[str]:
    reply = admin(broker, keys, "GET", f"/admin/v2/persistent/{namespace}")
    assert reply.status == 200, reply
    return list(reply.json())


def test_a_role_without_grants_neither_reads_nor_adds_schemas_nor_creates_topics(
    broker: EmbeddedBroker, keys: Keys, owned: str
) -> None:
    ns = owned[len("persistent://"):].rsplit("/", 1)[0]
    before = versions(broker, keys, owned)
    mallory = TokenPeer(broker.port, keys.token("mallory"))
    read = get_schema(mallory, owned, 1)
    assert read.error_code == pb.AuthorizationError
    assert not read.HasField("schema")
    added = get_or_create(mallory, owned, V2, 2)
    assert added.error_code == pb.AuthorizationError
    assert not added.HasField("schema_version")
    for request_id, place in enumerate((ns, "public/default"), 3):
        created = get_or_create(mallory, f"persistent://{place}/created-by-mallory", V1,
                                request_id)
        assert created.error_code == pb.AuthorizationError
    mallory.close()
    assert versions(broker, keys, owned) == before == [0]
    for place in (ns, "public/default"):
        assert f"persistent://{place}/created-by-mallory" not in topics_of(broker, keys, place)


def test_reading_takes_produce_or_consume_and_adding_takes_produce(
    broker: EmbeddedBroker, keys: Keys, owned: str
) -> None:
    reader = TokenPeer(broker.port, keys.token("reader"))
    read = get_schema(reader, owned, 1)
    assert not read.HasField("error_code")
    assert read.schema.schema_data == V1.schema_data
    refused = get_or_create(reader, owned, V2, 2)
    assert refused.error_code == pb.AuthorizationError
    assert "not authorized" in refused.error_message
    reader.close()
    assert versions(broker, keys, owned) == [0]
    writer = TokenPeer(broker.port, keys.token("writer"))
    added = get_or_create(writer, owned, V2, 1)
    assert not added.HasField("error_code")
    assert get_schema(writer, owned, 2).schema.schema_data == V2.schema_data
    writer.close()
    assert versions(broker, keys, owned) == [0, 1]


def test_get_or_create_schema_creates_no_topic_even_for_a_superuser(
    broker: EmbeddedBroker, keys: Keys, owned: str
) -> None:
    ns = owned[len("persistent://"):].rsplit("/", 1)[0]
    missing = f"persistent://{ns}/never-produced"
    superuser = TokenPeer(broker.port, keys.token("admin"))
    answer = get_or_create(superuser, missing, V1, 1)
    assert answer.error_code == pb.TopicNotFound
    assert get_schema(superuser, missing, 2).error_code == pb.TopicNotFound
    superuser.close()
    assert missing not in topics_of(broker, keys, ns)
