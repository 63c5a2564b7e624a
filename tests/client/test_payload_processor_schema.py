"""PIP-96 API: wrapping bytes as a payload (Java's MessagePayloadFactory), and the
``schema`` argument of ``message_at``/``as_single_message`` decoding values as Pulsar's
schemas encode them (Avro, JSON, STRING, primitives)."""

from __future__ import annotations

import array
import asyncio
import io
import json
import struct
from typing import Any

import avro.io
import avro.schema
import pytest

from magnetar.client import (
    DEFAULT_PROCESSOR,
    Client,
    EntryContext,
    JsonSchema,
    MessagePayload,
    SchemaInfo,
    StringSchema,
)

USER = json.dumps({
    "type": "record", "name": "User",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
})


def avro_bytes(definition: str, value: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    avro.io.DatumWriter(avro.schema.parse(definition)).write(value, avro.io.BinaryEncoder(out))
    return out.getvalue()


# ---------------------------------------------------------------- the factory


def test_wrap_takes_any_bytes_like_object_without_a_copy() -> None:
    data = bytearray(b"abc")
    payload = MessagePayload.wrap(data)
    data[0] = ord("x")  # a view, not a copy
    assert payload.copy() == b"xbc"
    assert MessagePayload.wrap(b"abc").copy() == b"abc"
    assert MessagePayload.wrap(memoryview(b"abcdef")[2:4]).copy() == b"cd"
    numbers = array.array("i", [1, 2])
    assert MessagePayload.wrap(numbers).copy() == numbers.tobytes()
    assert len(MessagePayload.wrap(numbers)) == 2 * numbers.itemsize
    with pytest.raises(TypeError, match="encode"):
        MessagePayload.wrap("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes-like"):
        MessagePayload.wrap(12)  # type: ignore[arg-type]


# ---------------------------------------------------------------- decoding


@pytest.mark.parametrize(("schema", "data", "value"), [
    (SchemaInfo("BYTES"), b"\x00\x01", b"\x00\x01"),
    (StringSchema(), "héllo".encode(), "héllo"),
    (JsonSchema(USER), b'{"name": "ann", "age": 3}', {"name": "ann", "age": 3}),
    (SchemaInfo("AVRO", USER.encode()), avro_bytes(USER, {"name": "bo", "age": 41}),
     {"name": "bo", "age": 41}),
    (SchemaInfo("BOOLEAN"), b"\x01", True),
    (SchemaInfo("BOOLEAN"), b"\x00", False),
    (SchemaInfo("INT8"), b"\xff", -1),
    (SchemaInfo("INT16"), struct.pack(">h", -300), -300),
    (SchemaInfo("INT32"), struct.pack(">i", 70_000), 70_000),
    (SchemaInfo("INT64"), struct.pack(">q", -(2**40)), -(2**40)),
    (SchemaInfo("FLOAT"), struct.pack(">f", 1.5), 1.5),
    (SchemaInfo("DOUBLE"), struct.pack(">d", -2.25), -2.25),
    (SchemaInfo("PROTOBUF", b"{}"), b"\x08\x01", b"\x08\x01"),  # not decoded here
])
def test_values_decode_as_pulsar_encodes_them(schema: SchemaInfo, data: bytes,
                                              value: Any) -> None:
    assert schema.decode(data) == value


@pytest.mark.parametrize(("schema", "data"), [
    (StringSchema(), b"\xff\xfe"),
    (JsonSchema(USER), b"{not json"),
    (SchemaInfo("AVRO", USER.encode()), b"\x02"),
    (SchemaInfo("INT32"), b"\x00\x01"),
    (SchemaInfo("BOOLEAN"), b""),
])
def test_bytes_that_are_no_value_of_the_schema_raise_value_error(schema: SchemaInfo,
                                                                 data: bytes) -> None:
    with pytest.raises(ValueError):
        schema.decode(data)


# ---------------------------------------------------------------- through a consumer


class LengthPrefixed:
    """Entries of ``[u32 size][value]...`` tagged ``entry.format=pairs``; others Pulsar's."""

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        if context.get_property("entry.format") != "pairs":
            DEFAULT_PROCESSOR.process(payload, context, schema, emit)
            return
        data, values = payload.copy(), []
        while data:
            (size,) = struct.unpack_from(">I", data)
            values.append(data[4:4 + size])
            data = data[4 + size:]
        for index, value in enumerate(values):
            emit(context.message_at(index, len(values), MessagePayload.wrap(value), False,
                                    schema))


async def test_processor_messages_are_decoded_by_the_consumers_avro_schema(
    mclient: Client, topic: str
) -> None:
    schema = SchemaInfo("AVRO", USER.encode(), "User")
    users = [{"name": "ann", "age": 30}, {"name": "bo", "age": 41}]
    encoded = [avro_bytes(USER, user) for user in users]
    consumer = await mclient.subscribe(topic, "s", schema=schema,
                                       payload_processor=LengthPrefixed())
    producer = await mclient.create_producer(topic, schema=schema)
    await producer.send_entry(b"".join(struct.pack(">I", len(e)) + e for e in encoded),
                              num_messages=2, properties={"entry.format": "pairs"})
    await producer.send(encoded[1])  # Pulsar's format: DEFAULT decodes it alike
    got = []
    for _ in range(3):
        msg = await consumer.receive(10)
        got.append((msg.value, msg.data(), msg.message_id.batch_index))
        await consumer.acknowledge(msg)
    assert got == [(users[0], encoded[0], 0), (users[1], encoded[1], 1),
                   (users[1], encoded[1], -1)]
    await consumer.close()
    # Acknowledged as usual: nothing comes again.
    again = await mclient.subscribe(topic, "s", schema=schema,
                                    payload_processor=LengthPrefixed())
    with pytest.raises(TimeoutError):
        await again.receive(0.3)


async def test_default_decodes_a_pulsar_batch_by_the_consumers_json_schema(
    mclient: Client, topic: str
) -> None:
    schema = JsonSchema(USER)
    consumer = await mclient.subscribe(topic, "s", schema=schema,
                                       payload_processor=DEFAULT_PROCESSOR)
    plain = await mclient.subscribe(topic, "plain", schema=schema)  # no processor: bytes
    producer = await mclient.create_producer(topic, schema=schema, batching=True,
                                             batching_max_messages=3, batching_max_delay=0.5)
    sent = [json.dumps({"name": f"u{i}", "age": i}).encode() for i in range(3)]
    await asyncio.gather(*(producer.send_async(data) for data in sent))
    values = [(await consumer.receive(10)) for _ in range(3)]
    assert [m.value for m in values] == [json.loads(data) for data in sent]
    assert [m.data() for m in values] == sent
    assert [m.message_id.batch_index for m in values] == [0, 1, 2]
    assert [(await plain.receive(10)).value for _ in range(3)] == sent
