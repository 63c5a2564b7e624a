"""Kafka record batches end to end: built by kafka-python (an independent implementation
of the format), written raw into topics (the broker's ingest API and the client's
``send_entry``), read through ``KafkaPayloadProcessor`` for each codec: keys, values,
headers, timestamps and per-record acks. Also a topic that mixes Pulsar-format and
Kafka-format entries, a corrupt batch (an error for that entry only), readers and
multi-topic consumers, and the record format itself both ways against kafka-python.
"""

from __future__ import annotations

import asyncio
import struct
import uuid
from typing import Any

import crc32c
import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from magnetar.broker.features.raw_entries import append_raw_entry
from magnetar.client import (
    DEFAULT_PROCESSOR,
    EARLIEST,
    Client,
    EntryContext,
    KafkaPayloadProcessor,
    MessageId,
    MessagePayload,
    PayloadProcessingError,
    TimeoutError,
)
from magnetar.client.consuming.kafka_records import (
    CODECS,
    KafkaFormatError,
    KafkaRecord,
    encode_record_batch,
    read_record_batches,
)
from magnetar.testing import EmbeddedBroker

KAFKA = {"entry.format": "kafka"}
T0 = 1_700_000_000_000

# (key, value, headers, timestamp): null keys and values, bytes that are not UTF-8,
# a header with a null value, repeated header keys (the last wins), empty values.
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (b"user-1", b"hello " * 20, [("trace", b"t-1"), ("n", None)], T0),
    (None, b"no key " * 20, [], T0 + 5),
    (b"\xff\xfe-raw", b"\x00\x01\x02" * 30, [("bin", b"\xc3\x28"), ("dup", b"1"),
                                             ("dup", b"2")], T0 + 1),
    (b"user-1", None, [("tombstone", b"yes")], T0 + 9),
    (b"", b"", [], T0 + 9),
]


def kafka_batch(records: list[Any], codec: str, base_offset: int = 0) -> bytes:
    """A record batch built by kafka-python; the base offset (outside the CRC) is set
    as a broker would set it."""
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=CODECS[codec], is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for delta, (key, value, headers, timestamp) in enumerate(records):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    attributes = struct.unpack_from(">h", data, 21)[0]
    assert attributes & 0x07 == CODECS[codec], "kafka-python left the batch uncompressed"
    return bytes(data)


def expected_fields(records: list[Any], base_offset: int = 0) -> list[tuple[Any, ...]]:
    out = []
    for delta, (key, value, headers, timestamp) in enumerate(records):
        out.append((
            b"" if value is None else value,
            None if key is None else key.decode("utf-8", "surrogateescape"),
            {name: "" if data is None else data.decode("utf-8", "surrogateescape")
             for name, data in headers},
            timestamp,
            base_offset + delta,
        ))
    return out


def fields(msg: Any) -> tuple[Any, ...]:
    return (msg.value, msg.key, msg.properties, msg.event_time, msg.sequence_id)


async def ingest(broker: EmbeddedBroker, topic: str, payload: bytes, **options: Any) -> MessageId:
    """The broker's raw-entry API, called on the broker's loop (it runs in its own thread)."""
    assert broker.service is not None
    future = asyncio.run_coroutine_threadsafe(
        append_raw_entry(broker.service, topic, payload, **options), broker.service.loop)
    return await asyncio.wrap_future(future)


async def backlog_of(broker: EmbeddedBroker, topic: str, subscription: str) -> int:
    """The subscription's backlog once acks have reached the broker (polled)."""
    assert broker.service is not None
    sub = broker.service.topics[topic].subscriptions[subscription]
    for _ in range(200):
        if not sub.backlog():
            return 0
        await asyncio.sleep(0.05)
    return sub.backlog()


async def assert_nothing_more(consumer: Any) -> None:
    with pytest.raises(TimeoutError):
        await consumer.receive(0.3)


# ---------------------------------------------------------------- end to end, per codec


@pytest.mark.parametrize("codec", sorted(CODECS))
async def test_kafka_batches_by_kafka_python_read_per_record(
    mclient: Client, broker: EmbeddedBroker, topic: str, codec: str
) -> None:
    consumer = await mclient.subscribe(
        topic, "s", subscription_type="shared", initial_position="earliest", ack_group_time=0,
        negative_ack_redelivery_delay=0.2, payload_processor=KafkaPayloadProcessor())
    first = kafka_batch(RECORDS, codec, base_offset=100)
    second = kafka_batch(RECORDS[:3], codec, base_offset=105)
    first_id = await ingest(broker, topic, first, num_messages=5, properties=KAFKA)
    producer = await mclient.create_producer(topic)
    second_id = await producer.send_entry(second, num_messages=3, properties=KAFKA)
    msgs = [await consumer.receive(10) for _ in range(8)]
    assert [fields(m) for m in msgs] == (
        expected_fields(RECORDS, 100) + expected_fields(RECORDS[:3], 105))
    assert [(m.message_id.entry_id, m.message_id.batch_index, m.message_id.batch_size)
            for m in msgs] == (
        [(first_id.entry_id, i, 5) for i in range(5)]
        + [(second_id.entry_id, i, 3) for i in range(3)])
    assert msgs[0].producer_name == "magnetar-raw-ingest"
    assert msgs[5].producer_name == producer.producer_name
    assert msgs[2].key is not None
    assert msgs[2].key.encode("utf-8", "surrogateescape") == b"\xff\xfe-raw"
    # Per-record acks: all but one record of each entry, then a nack of those two.
    left = (msgs[1], msgs[7])
    for msg in msgs:
        if msg not in left:
            await consumer.acknowledge(msg)
    for msg in left:
        consumer.negative_acknowledge(msg)
    again = sorted([await consumer.receive(10) for _ in range(2)], key=lambda m: m.message_id)
    assert [m.message_id for m in again] == [m.message_id for m in left]
    assert [fields(m) for m in again] == [fields(m) for m in left]
    assert [m.redelivery_count for m in again] == [1, 1]
    for msg in again:
        await consumer.acknowledge(msg)
    await assert_nothing_more(consumer)
    assert await backlog_of(broker, topic, "s") == 0


async def test_raw_snappy_and_log_append_time(
    mclient: Client, broker: EmbeddedBroker, topic: str
) -> None:
    """Kafka's clients frame snappy the xerial way; a raw snappy block is read too. Under
    LOG_APPEND_TIME every record's event time is the batch's max timestamp."""
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       payload_processor=KafkaPayloadProcessor())
    records = [KafkaRecord(7 + i, T0 + i, b"k", b"v%d" % i) for i in range(3)]
    raw_snappy = encode_record_batch(records, compression="snappy", snappy_framing="raw")
    assert not raw_snappy[61:].startswith(b"\x82SNAPPY")
    appended = encode_record_batch(records, log_append_time=True)
    await ingest(broker, topic, raw_snappy, num_messages=3, properties=KAFKA)
    await ingest(broker, topic, appended, num_messages=3, properties=KAFKA)
    msgs = [await consumer.receive(10) for _ in range(6)]
    assert [(m.value, m.sequence_id) for m in msgs] == [(b"v%d" % i, 7 + i) for i in range(3)] * 2
    assert [m.event_time for m in msgs] == [T0, T0 + 1, T0 + 2] + [T0 + 2] * 3


# ---------------------------------------------------------------- mixed topics, errors


class ByFormat:
    """Dispatches on entry.format: Kafka entries to the Kafka processor, others to
    Pulsar's format."""

    def __init__(self) -> None:
        self.kafka = KafkaPayloadProcessor(fallback=None)
        self.formats: list[str | None] = []

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        entry_format = context.get_property("entry.format")
        self.formats.append(entry_format)
        processor = self.kafka if entry_format == "kafka" else DEFAULT_PROCESSOR
        processor.process(payload, context, schema, emit)


async def test_a_topic_mixing_pulsar_and_kafka_entries(
    mclient: Client, broker: EmbeddedBroker, topic: str
) -> None:
    dispatcher = ByFormat()
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       payload_processor=dispatcher)
    plain = await mclient.create_producer(topic)
    batched = await mclient.create_producer(topic, batching=True, batching_max_messages=3,
                                            batching_max_delay=1.0)
    await plain.send(b"p0", key="a", properties={"x": "1"})
    await asyncio.gather(*(batched.send_async(b"b%d" % i) for i in range(3)))
    await ingest(broker, topic, kafka_batch(RECORDS[:2], "gzip"), num_messages=2,
                 properties=KAFKA)
    await plain.send(b"p1")
    await plain.send_entry(kafka_batch(RECORDS[2:3], "zstd", base_offset=2), num_messages=1,
                           properties=KAFKA)
    values = [(await consumer.receive(10)).value for _ in range(8)]
    assert values == [b"p0", b"b0", b"b1", b"b2", RECORDS[0][1], RECORDS[1][1], b"p1",
                      RECORDS[2][1]]
    assert dispatcher.formats == [None, None, "kafka", None, "kafka"]


async def test_a_corrupt_kafka_batch_fails_that_entry_only(
    mclient: Client, broker: EmbeddedBroker, topic: str
) -> None:
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       ack_group_time=0, payload_processor=KafkaPayloadProcessor())
    good = kafka_batch(RECORDS[:2], "lz4")
    corrupt = bytearray(good)
    corrupt[-3] ^= 0xFF  # inside the compressed records: the CRC-32C no longer matches
    await ingest(broker, topic, good, num_messages=2, properties=KAFKA)
    bad_id = await ingest(broker, topic, bytes(corrupt), num_messages=2, properties=KAFKA)
    await ingest(broker, topic, good, num_messages=2, properties=KAFKA)
    got = [await consumer.receive(10) for _ in range(2)]
    with pytest.raises(PayloadProcessingError) as failure:
        await consumer.receive(10)
    assert isinstance(failure.value.__cause__, KafkaFormatError)
    assert "CRC-32C" in str(failure.value.__cause__)
    assert failure.value.message_id == bad_id
    assert failure.value.entry.value == bytes(corrupt)
    got += [await consumer.receive(10) for _ in range(2)]
    assert [m.value for m in got] == [RECORDS[0][1], RECORDS[1][1]] * 2
    for msg in got:
        await consumer.acknowledge(msg)
    await consumer.acknowledge(failure.value.entry)
    await assert_nothing_more(consumer)
    assert await backlog_of(broker, topic, "s") == 0


async def test_kafka_entries_on_readers_and_multi_topic_consumers(
    mclient: Client, broker: EmbeddedBroker
) -> None:
    base = f"persistent://public/default/kafka-{uuid.uuid4().hex[:10]}"
    topics = [base + "-a", base + "-b"]
    for offset, topic in enumerate(topics):
        await ingest(broker, topic, kafka_batch(RECORDS, "snappy", base_offset=offset * 10),
                     num_messages=5, properties=KAFKA)
    consumer = await mclient.subscribe(topics, "s", initial_position="earliest",
                                       payload_processor=KafkaPayloadProcessor())
    msgs = [await consumer.receive(10) for _ in range(10)]
    by_topic = {t: [fields(m) for m in msgs if m.topic == t] for t in topics}
    assert by_topic == {t: expected_fields(RECORDS, i * 10) for i, t in enumerate(topics)}
    for msg in msgs:
        await consumer.acknowledge(msg)
    reader = await mclient.create_reader(topics[0], EARLIEST,
                                         payload_processor=KafkaPayloadProcessor())
    read = []
    while await reader.has_message_available():  # false after the entry's last record
        read.append(await reader.read_next(10))
    assert [fields(m) for m in read] == expected_fields(RECORDS)
    # A reader that starts at a record reads from the one after it (or at it, inclusive).
    for inclusive, first in ((False, 3), (True, 2)):
        after = await mclient.create_reader(topics[0], read[2].message_id,
                                            start_message_id_inclusive=inclusive,
                                            payload_processor=KafkaPayloadProcessor())
        assert fields(await after.read_next(10)) == expected_fields(RECORDS)[first]


async def test_control_batches_give_no_message(
    mclient: Client, broker: EmbeddedBroker, topic: str
) -> None:
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       ack_group_time=0, payload_processor=KafkaPayloadProcessor())
    marker = control_batch(encode_record_batch([KafkaRecord(3, T0, b"\x00\x00\x00\x01", b"")]))
    data = encode_record_batch([KafkaRecord(4, T0, b"k", b"data")])
    await ingest(broker, topic, marker, num_messages=1, properties=KAFKA)
    await ingest(broker, topic, marker + data, num_messages=2, properties=KAFKA)
    msg = await consumer.receive(10)
    assert (msg.value, msg.sequence_id, msg.message_id.batch_index,
            msg.message_id.batch_size) == (b"data", 4, 0, 1)
    await consumer.acknowledge(msg)
    await assert_nothing_more(consumer)
    assert await backlog_of(broker, topic, "s") == 0


def control_batch(batch: bytes) -> bytes:
    """``batch`` with the control attribute set and its CRC-32C made right again."""
    data = bytearray(batch)
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


# ---------------------------------------------------------------- the record format


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_record_format_agrees_with_kafka_python_both_ways(codec: str) -> None:
    batch = kafka_batch(RECORDS, codec, base_offset=42)
    (read,) = read_record_batches(batch)
    assert read.compression == codec and read.base_offset == 42
    assert [(r.key, r.value, list(r.headers), r.timestamp, r.offset) for r in read.records] == [
        (key, value, headers, ts, 42 + i) for i, (key, value, headers, ts) in enumerate(RECORDS)]
    framings = ["xerial", "raw"] if codec == "snappy" else ["xerial"]
    for framing in framings:
        ours = encode_record_batch(read.records, compression=codec, snappy_framing=framing)
        theirs = DefaultRecordBatch(ours)
        assert theirs.validate_crc()
        assert theirs.base_offset == 42 and theirs.compression_type == CODECS[codec]
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs] == [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in read.records]
        assert read_record_batches(ours)[0].records == read.records


def test_record_format_reads_batches_back_to_back() -> None:
    data = kafka_batch(RECORDS[:2], "none") + kafka_batch(RECORDS[2:], "gzip", base_offset=2)
    batches = read_record_batches(data)
    assert [len(b.records) for b in batches] == [2, 3]
    assert [r.offset for b in batches for r in b.records] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(("damage", "words"), [
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC-32C"),
    (lambda b: b[:16] + b"\x01" + b[17:], "magic 1"),
    (lambda b: b[:40], "cut short"),
    (lambda b: b[:-5], "declares"),
    (lambda b: b"", "empty"),
])
def test_record_format_refuses_damaged_batches(damage: Any, words: str) -> None:
    batch = kafka_batch(RECORDS, "none")
    with pytest.raises(KafkaFormatError, match=words):
        read_record_batches(damage(batch))


def test_record_format_refuses_records_that_do_not_fill_their_batch() -> None:
    batch = bytearray(kafka_batch(RECORDS, "none"))
    struct.pack_into(">i", batch, 57, 4)  # one record fewer than the batch holds
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(KafkaFormatError, match="follow the batch"):
        read_record_batches(bytes(batch))
    struct.pack_into(">i", batch, 57, 6)  # one record more than it holds
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    with pytest.raises(KafkaFormatError, match="cut short"):
        read_record_batches(bytes(batch))
