"""Schemas with the official client: String, JSON and Avro records, incompatibility."""

from __future__ import annotations

import time

import pulsar
import pytest
from pulsar.schema import (
    AvroSchema,
    BytesSchema,
    Double,
    Integer,
    JsonSchema,
    Record,
    String,
    StringSchema,
)

RECEIVE_MS = 5000
Earliest = pulsar.InitialPosition.Earliest


class User(Record):
    name = String()
    age = Integer()
    score = Double()


class Order(Record):
    order_id = String()
    amount = Integer()


def test_string_schema_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", schema=StringSchema(), initial_position=Earliest)
    producer = client.create_producer(topic, schema=StringSchema())
    texts = ["hello", "h\u00e9llo w\u00f6rld \u2603", ""]
    for text in texts:
        producer.send(text)
    got = []
    for _ in texts:
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.acknowledge(msg)
        got.append(msg.value())
    assert got == texts


def test_json_schema_round_trip(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "s", schema=JsonSchema(User), initial_position=Earliest)
    producer = client.create_producer(topic, schema=JsonSchema(User))
    users = [User(name="ada", age=36, score=9.5), User(name="bob", age=7, score=0.25)]
    for user in users:
        producer.send(user, properties={"kind": "user"})
    for user in users:
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.acknowledge(msg)
        value = msg.value()
        assert isinstance(value, User)
        assert (value.name, value.age, value.score) == (user.name, user.age, user.score)
        assert msg.properties() == {"kind": "user"}
        assert msg.schema_version()


def test_avro_schema_round_trip(client: pulsar.Client, topic: str) -> None:
    pytest.importorskip("fastavro", reason="pulsar-client[avro] is not installed")
    consumer = client.subscribe(topic, "s", schema=AvroSchema(Order), initial_position=Earliest)
    producer = client.create_producer(
        topic, schema=AvroSchema(Order), batching_enabled=True, batching_max_publish_delay_ms=5
    )
    for i in range(10):
        producer.send_async(Order(order_id=f"o{i}", amount=i * 10), None)
    producer.flush()
    for i in range(10):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        consumer.acknowledge(msg)
        assert (msg.value().order_id, msg.value().amount) == (f"o{i}", i * 10)


def test_same_schema_from_several_producers_and_consumers(
    client: pulsar.Client, topic: str
) -> None:
    # The consumer registers the schema first; producers with the same one are fine.
    consumer = client.subscribe(topic, "s", schema=JsonSchema(User), initial_position=Earliest)
    p1 = client.create_producer(topic, schema=JsonSchema(User))
    p2 = client.create_producer(topic, schema=JsonSchema(User))
    p1.send(User(name="one", age=1, score=1.0))
    p2.send(User(name="two", age=2, score=2.0))
    versions = set()
    names = []
    for _ in range(2):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        names.append(msg.value().name)
        versions.add(msg.schema_version())
    assert names == ["one", "two"]
    assert len(versions) == 1


def _assert_refused_quickly(make: object) -> None:
    start = time.monotonic()
    with pytest.raises(pulsar.IncompatibleSchema):
        make()  # type: ignore[operator]
    assert time.monotonic() - start < 5.0


def test_incompatible_schema_type_is_refused(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, schema=StringSchema())
    producer.send("text")
    _assert_refused_quickly(lambda: client.create_producer(topic, schema=JsonSchema(User)))
    _assert_refused_quickly(lambda: client.create_producer(topic, schema=JsonSchema(Order)))
    _assert_refused_quickly(lambda: client.subscribe(topic, "json-sub", schema=JsonSchema(User)))
    # The topic still works with its own schema.
    consumer = client.subscribe(topic, "s", schema=StringSchema(), initial_position=Earliest)
    assert consumer.receive(timeout_millis=RECEIVE_MS).value() == "text"


def test_incompatible_schema_the_other_way(client: pulsar.Client, topic: str) -> None:
    client.subscribe(topic, "s", schema=JsonSchema(User))
    _assert_refused_quickly(lambda: client.create_producer(topic, schema=StringSchema()))


def test_bytes_producer_on_schema_topic(client: pulsar.Client, topic: str) -> None:
    """A producer without a schema (bytes) may write to a topic that has one."""
    consumer = client.subscribe(topic, "s", schema=StringSchema(), initial_position=Earliest)
    client.create_producer(topic, schema=StringSchema()).send("typed")
    client.create_producer(topic, schema=BytesSchema()).send(b"raw")
    assert consumer.receive(timeout_millis=RECEIVE_MS).value() == "typed"
    assert consumer.receive(timeout_millis=RECEIVE_MS).value() == "raw"
