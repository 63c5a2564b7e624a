"""GET_SCHEMA from magnetar's client: a topic's schema as the official client's schema
classes registered it, by version, and None where a topic has none."""

from __future__ import annotations

import json

import pulsar
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from magnetar.client import Client, SchemaInfo


class User(Record):
    name = String()
    age = Integer()


def with_score(definition: bytes) -> bytes:
    """``definition`` and one field more with a default: a compatible next version."""
    record = json.loads(definition)
    record["fields"].append({"name": "score", "type": "float", "default": 0.0})
    return json.dumps(record).encode()


async def test_schema_of_an_avro_topic_and_its_versions(
        mclient: Client, client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=AvroSchema(User)).close()
    first = await mclient.get_schema(topic)
    assert first is not None
    assert first.type == "AVRO"
    assert json.loads(first.schema) == json.loads(AvroSchema(User).schema_info().schema())
    second = SchemaInfo("AVRO", with_score(first.schema), "User")
    await (await mclient.create_producer(topic, schema=second)).close()
    latest = await mclient.get_schema(topic)
    assert latest is not None
    assert [f["name"] for f in json.loads(latest.schema)["fields"]] == ["name", "age", "score"]
    old = await mclient.get_schema(topic, version=(0).to_bytes(8, "big"))
    assert old == first


async def test_schema_of_a_json_and_a_string_topic(
        mclient: Client, client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=JsonSchema(User)).close()
    info = await mclient.get_schema(topic)
    assert info is not None and info.type == "JSON"
    assert {f["name"] for f in json.loads(info.schema)["fields"]} == {"name", "age"}
    client.create_producer(topic + "-s", schema=pulsar.schema.StringSchema()).close()
    text = await mclient.get_schema(topic + "-s")
    assert text is not None and text.type == "STRING"


async def test_no_schema_is_none(mclient: Client, client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic).close()  # bytes: no schema registered
    assert await mclient.get_schema(topic) is None
    assert await mclient.get_schema(topic + "-never-created") is None
