"""GET_SCHEMA and GET_OR_CREATE_SCHEMA with exact frames."""

from __future__ import annotations

from magnetar.protocol.frames import encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer


def get_or_create(peer: RawPeer, topic: str, schema: pb.Schema, request_id: int):  # type: ignore[no-untyped-def]
    peer.send(
        BaseCommand(
            type=BaseCommand.GET_OR_CREATE_SCHEMA,
            getOrCreateSchema=pb.CommandGetOrCreateSchema(
                request_id=request_id, topic=topic, schema=schema
            ),
        )
    )
    return peer.expect(BaseCommand.GET_OR_CREATE_SCHEMA_RESPONSE).command.getOrCreateSchemaResponse


def get_schema(peer: RawPeer, topic: str, request_id: int, version: bytes | None = None):  # type: ignore[no-untyped-def]
    request = pb.CommandGetSchema(request_id=request_id, topic=topic)
    if version is not None:
        request.schema_version = version
    peer.send(BaseCommand(type=BaseCommand.GET_SCHEMA, getSchema=request))
    return peer.expect(BaseCommand.GET_SCHEMA_RESPONSE).command.getSchemaResponse


def test_schema_versions_are_created_fetched_and_checked(
    broker: EmbeddedBroker, topic: str
) -> None:
    peer = RawPeer(broker.port)
    # JSON schemas are Avro record definitions; v2 adds a field with a default (FULL allows it).
    v1 = pb.Schema(
        name="rec", schema_data=b'{"type":"record","name":"R","fields":[]}', type=pb.Schema.Json
    )
    v2 = pb.Schema(
        name="rec",
        schema_data=b'{"type":"record","name":"R","fields":'
        b'[{"name":"a","type":"int","default":1}]}',
        type=pb.Schema.Json,
    )
    # As Pulsar's getTopicIfExists: the command does not create a topic.
    missing_topic = get_or_create(peer, topic, v1, 9)
    assert missing_topic.error_code == pb.TopicNotFound
    peer.producer(topic)
    first = get_or_create(peer, topic, v1, 1)
    assert not first.HasField("error_code")
    assert get_or_create(peer, topic, v1, 2).schema_version == first.schema_version
    second = get_or_create(peer, topic, v2, 3)
    assert second.schema_version != first.schema_version
    latest = get_schema(peer, topic, 4)
    assert latest.schema.schema_data == v2.schema_data
    assert latest.schema_version == second.schema_version
    old = get_schema(peer, topic, 5, first.schema_version)
    assert old.schema.schema_data == v1.schema_data
    incompatible = get_or_create(
        peer, topic, pb.Schema(name="s", schema_data=b"", type=pb.Schema.String), 6
    )
    assert incompatible.error_code == pb.IncompatibleSchema
    assert "Incompatible schema: exists schema type JSON" in incompatible.error_message
    missing = get_schema(peer, topic + "-none", 7)
    assert missing.HasField("error_code")
    # A definition that is not an Avro record is refused as Pulsar refuses it.
    invalid = get_or_create(
        peer, topic, pb.Schema(name="rec", schema_data=b'{"type":"record"}', type=pb.Schema.Json), 8
    )
    assert invalid.error_code == pb.IncompatibleSchema
    assert "Invalid schema definition data for JSON schema" in invalid.error_message
    peer.close()


def test_get_schema_of_a_topic_still_loading_waits_for_it(
    broker: EmbeddedBroker, topic: str
) -> None:
    peer = RawPeer(broker.port)
    schema = pb.Schema(
        name="rec", schema_data=b'{"type":"record","name":"R","fields":[]}', type=pb.Schema.Json
    )
    producer = BaseCommand(
        type=BaseCommand.PRODUCER,
        producer=pb.CommandProducer(topic=topic, producer_id=1, request_id=1, schema=schema),
    )
    get = BaseCommand(
        type=BaseCommand.GET_SCHEMA, getSchema=pb.CommandGetSchema(request_id=2, topic=topic)
    )
    # One write: the GET_SCHEMA is read while the PRODUCER's load of the new topic runs.
    peer.sock.sendall(encode_command(producer) + encode_command(get))
    answer = peer.expect(BaseCommand.GET_SCHEMA_RESPONSE).command.getSchemaResponse
    peer.close()
    assert not answer.HasField("error_code"), answer.error_message
    assert answer.schema.schema_data == schema.schema_data


def test_a_partitioned_topics_schema_is_read_from_its_partitions(
    broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 2)
    peer = RawPeer(broker.port)
    schema = pb.Schema(
        name="rec", schema_data=b'{"type":"record","name":"R","fields":[]}', type=pb.Schema.Json
    )
    assert not get_or_create(peer, topic + "-partition-0", schema, 1).HasField("error_code")
    read = get_schema(peer, topic, 2)  # the base name, as Pulsar keeps one schema for all
    assert read.schema.schema_data == schema.schema_data
    # Versions are added through a partition; the base name is no topic of its own.
    assert get_or_create(peer, topic, schema, 3).error_code == pb.TopicNotFound
    peer.close()
