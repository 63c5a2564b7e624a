"""PIP-96 ingest over the admin HTTP API: ``POST .../{topic}/entries``.

The payload is the body; the metadata fields come as query parameters or headers. The
answer (the entry's id) comes once the entry is durable: a broker killed with SIGKILL
right after still has it. Refusals carry their status and reason.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from admin_http import http
from kafka.record.default_records import DefaultRecordBatchBuilder

from magnetar.client import (
    DEFAULT_PROCESSOR,
    EARLIEST,
    Client,
    EntryContext,
    KafkaPayloadProcessor,
    MessagePayload,
)
from magnetar.testing import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"
MAX_MESSAGE_SIZE = 2 * 1024 * 1024  # over aiohttp's own 1 MiB body limit


@pytest.fixture(scope="module")
def ingest_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, allow_auto_topic_creation=False,
                        max_message_size=MAX_MESSAGE_SIZE) as broker:
        yield broker


@pytest.fixture
def local() -> str:
    return f"raw-{uuid.uuid4().hex[:10]}"


def create(broker: EmbeddedBroker, local: str) -> None:
    assert http(broker, "PUT", f"{NS}/{local}").status == 204


def kafka_batch(n: int) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=1, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(n):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i * 10,
                       headers=[("h", b"%d" % i)])
    return bytes(builder.build())


class Recorder:
    """Keeps each entry's metadata and passes the entry to the Kafka processor."""

    def __init__(self) -> None:
        self.entries: list[Any] = []
        self.kafka = KafkaPayloadProcessor()

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        metadata = context.metadata
        self.entries.append({
            "format": context.get_property("entry.format"),
            "properties": context.properties,
            "num_messages": context.num_messages,
            "is_batch": context.is_batch,
            "key": metadata.partition_key if metadata.HasField("partition_key") else None,
            "ordering_key": metadata.ordering_key or None,
            "event_time": metadata.event_time,
            "producer_name": metadata.producer_name,
            "sequence_id": metadata.sequence_id,
            "payload": payload.copy(),
        })
        self.kafka.process(payload, context, schema, emit)


async def read(url: str, topic: str, n: int, processor: Any) -> list[Any]:
    async with Client(url, operation_timeout=10) as client:
        reader = await client.create_reader(topic, EARLIEST, payload_processor=processor)
        return [await reader.read_next(10) for _ in range(n)]


def test_post_with_query_parameters(ingest_broker: EmbeddedBroker, local: str) -> None:
    create(ingest_broker, local)
    batch = kafka_batch(3)
    reply = http(
        ingest_broker, "POST",
        f"{NS}/{local}/entries?num_messages=3&property=entry.format=kafka&property=a=b%3Dc"
        "&key=user-%C3%A9&ordering_key=ok&event_time=1700000000999&producer_name=kop"
        "&sequence_id=41", batch)
    status, answer = reply.status, reply.value()
    assert status == 200
    assert set(answer) == {"ledgerId", "entryId", "partitionIndex"}
    assert answer["partitionIndex"] == -1
    recorder = Recorder()
    msgs = asyncio.run(read(ingest_broker.service_url, f"persistent://public/default/{local}",
                            3, recorder))
    assert [(m.value, m.key, m.properties) for m in msgs] == [
        (b"v%d" % i * 10, f"k{i}", {"h": str(i)}) for i in range(3)]
    assert (msgs[0].message_id.ledger_id, msgs[0].message_id.entry_id) == (
        answer["ledgerId"], answer["entryId"])
    assert recorder.entries == [{
        "format": "kafka", "properties": {"entry.format": "kafka", "a": "b=c"},
        "num_messages": 3, "is_batch": True, "key": "user-é", "ordering_key": b"ok",
        "event_time": 1_700_000_000_999, "producer_name": "kop", "sequence_id": 41,
        "payload": batch,
    }]


def test_post_with_headers_and_query_over_header(
    ingest_broker: EmbeddedBroker, local: str
) -> None:
    create(ingest_broker, local)
    reply = http(ingest_broker, "POST", f"{NS}/{local}/entries?key=from-query",
                 b"opaque bytes", headers={
                     "X-Magnetar-Property": "entry.format=custom",
                     "X-Magnetar-Key": "from-header",
                     "X-Magnetar-Producer-Name": "handler",
                     "Content-Type": "application/octet-stream",
                 })
    assert reply.status == 200
    recorder = Recorder()
    recorder.kafka = KafkaPayloadProcessor(fallback=DEFAULT_PROCESSOR)
    (msg,) = asyncio.run(read(ingest_broker.service_url, f"persistent://public/default/{local}",
                              1, recorder))
    # Not Kafka and not a batch: the fallback gives the payload as one message.
    assert (msg.value, msg.key, msg.properties, msg.producer_name) == (
        b"opaque bytes", "from-query", {"entry.format": "custom"}, "handler")
    assert recorder.entries[0]["is_batch"] is False
    assert recorder.entries[0]["num_messages"] == 1


def test_a_payload_over_one_mebibyte_up_to_the_message_size(
    ingest_broker: EmbeddedBroker, local: str
) -> None:
    create(ingest_broker, local)
    big = bytes(range(256)) * (MAX_MESSAGE_SIZE // 256)
    assert http(ingest_broker, "POST", f"{NS}/{local}/entries", big).status == 200
    reply = http(ingest_broker, "POST", f"{NS}/{local}/entries", big + b"!")
    status, reason = reply.status, reply.reason
    assert status == 413, reason
    (msg,) = asyncio.run(read(ingest_broker.service_url, f"persistent://public/default/{local}",
                              1, DEFAULT_PROCESSOR))
    assert msg.value == big


def post_with_properties(broker: EmbeddedBroker, path: str, body: bytes,
                         properties: list[str]) -> tuple[int, str]:
    """POST with one ``X-Magnetar-Property`` header per property (urllib cannot
    repeat a header)."""
    host, port = broker.admin_url.removeprefix("http://").rsplit(":", 1)
    conn = HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest("POST", path)
        for prop in properties:
            conn.putheader("X-Magnetar-Property", prop)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        response.read()
        return response.status, response.reason
    finally:
        conn.close()


def test_properties_count_toward_the_frame_limit(
    ingest_broker: EmbeddedBroker, local: str
) -> None:
    """Headers can carry kilobytes of properties: the entry is judged as the frame a
    consumer will receive (payload at the limit + 10 KiB at most), not by its payload."""
    create(ingest_broker, local)
    path = f"{NS}/{local}/entries"
    full = b"f" * MAX_MESSAGE_SIZE
    status, reason = post_with_properties(
        ingest_broker, path, full, [f"h{i}={'v' * 1000}" for i in range(11)])
    assert status == 413 and "frame limit" in reason, reason
    status, reason = post_with_properties(
        ingest_broker, path, full, [f"h{i}={'v' * 1000}" for i in range(8)])
    assert status == 200, reason
    (msg,) = asyncio.run(read(ingest_broker.service_url, f"persistent://public/default/{local}",
                              1, DEFAULT_PROCESSOR))
    assert msg.value == full and len(msg.properties) >= 8


@pytest.mark.parametrize(("query", "status", "words"), [
    ("num_messages=x", 400, "num_messages must be an integer"),
    ("num_messages=0", 400, "at least 1"),
    ("property=novalue", 400, "name=value"),
    ("event_time=soon", 400, "event_time must be an integer"),
    # Counts and 64-bit fields out of range: answered 200 and stored, before.
    (f"num_messages={2**31}", 400, "at most 100000 (max_messages_per_batch)"),
    (f"num_messages={2**64 + 5}", 400, "max_messages_per_batch"),
    ("num_messages=100001", 400, "max_messages_per_batch"),
    (f"sequence_id={2**70}", 400, "sequence_id must be 0 to 2**64-1"),
    (f"event_time={2**70}", 400, "event_time must be 0 to 2**64-1"),
    ("sequence_id=-1", 400, "sequence_id must be 0 to 2**64-1"),
])
def test_bad_fields_are_400(ingest_broker: EmbeddedBroker, local: str, query: str,
                            status: int, words: str) -> None:
    create(ingest_broker, local)
    reply = http(ingest_broker, "POST", f"{NS}/{local}/entries?{query}", b"x")
    got, reason = reply.status, reply.reason
    assert got == status and words in reason


def test_refusals_by_topic(ingest_broker: EmbeddedBroker, local: str) -> None:
    # No such topic, and this broker does not create topics on use.
    reply = http(ingest_broker, "POST", f"{NS}/{local}/entries", b"x")
    status, reason = reply.status, reply.reason
    assert (status, "does not exist" in reason) == (404, True)
    # Partitioned: post to a partition.
    assert http(ingest_broker, "PUT", f"{NS}/{local}/partitions", b"2").status == 204
    reply = http(ingest_broker, "POST", f"{NS}/{local}/entries", b"x")
    status, reason = reply.status, reply.reason
    assert (status, "partitioned" in reason) == (409, True)
    reply = http(ingest_broker, "POST", f"{NS}/{local}-partition-1/entries", b"x")
    status, answer = reply.status, reply.value()
    assert (status, answer["partitionIndex"]) == (200, 1)
    # Terminated.
    create(ingest_broker, local + "-t")
    assert http(ingest_broker, "POST", f"{NS}/{local}-t/terminate").status == 200
    reply = http(ingest_broker, "POST", f"{NS}/{local}-t/entries", b"x")
    status, reason = reply.status, reply.reason
    assert (status, "terminated" in reason) == (409, True)
    # An invalid name.
    reply = http(ingest_broker, "POST", "/admin/v2/persistent/public/bad!ns/x/entries", b"x")
    status, reason = reply.status, reply.reason
    assert (status, "invalid namespace" in reason) == (412, True)


def test_an_acknowledged_post_survives_sigkill(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, mode="subprocess", admin=True)
    broker.start()
    try:
        local = "durable-raw"
        create(broker, local)
        ids = []
        for i in range(5):
            reply = http(
                broker, "POST", f"{NS}/{local}/entries?num_messages=2&property=entry.format=kafka"
                f"&sequence_id={i}", kafka_batch(2))
            status, answer = reply.status, reply.value()
            assert status == 200
            ids.append((answer["ledgerId"], answer["entryId"]))
        broker.kill()
        broker.start()
        msgs = asyncio.run(read(broker.service_url, f"persistent://public/default/{local}", 10,
                                KafkaPayloadProcessor()))
        assert sorted({(m.message_id.ledger_id, m.message_id.entry_id) for m in msgs}) == ids
        assert [m.value for m in msgs] == [b"v0" * 10, b"v1" * 10] * 5
    finally:
        broker.close()
