"""PIP-96 payload processors in magnetar's client, against the session broker.

``PayloadProcessor.DEFAULT`` must give exactly what a consumer without a processor gives
(batched and unbatched topics, batch sizes 1 and N, one topic and several, readers):
message ids (batch index, batch size, partition) and every metadata field. A custom
processor's messages are acknowledged one by one, a processor that raises fails only
its entry (on ``receive()``, where the entry can be nacked or acked), and permits stay
right whatever number of messages a processor makes of an entry.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from magnetar.client import (
    DEFAULT_PROCESSOR,
    EARLIEST,
    Client,
    EntryContext,
    Message,
    MessagePayload,
    MessageTooBig,
    PayloadProcessingError,
    PayloadProcessor,
    TimeoutError,
)
from magnetar.protocol.compression import LZ4
from magnetar.testing import EmbeddedBroker

FIELDS = ("value", "key", "ordering_key", "properties", "event_time", "publish_time",
          "sequence_id", "schema_version", "producer_name", "redelivery_count", "topic")


def snapshot(msg: Message) -> tuple[Any, ...]:
    """Everything the application can read of a message; MessageId equality covers the
    batch index, the batch size and the partition."""
    mid = msg.message_id
    return (mid, mid.batch_index, mid.batch_size, mid.partition,
            *(getattr(msg, name) for name in FIELDS))


async def produce(client: Client, topic: str, n: int, **producer_options: Any) -> list[Any]:
    producer = await client.create_producer(topic, **producer_options)
    futures = []
    for i in range(n):
        fields: dict[str, Any] = {}
        if i % 2:
            fields["key"] = f"k{i % 3}"
            fields["properties"] = {"i": str(i), "p": "x"}
        if i % 3 == 0:
            fields["event_time"] = 1_700_000_000_000 + i
        if i % 4 == 1:
            fields["ordering_key"] = b"o%d" % i
        futures.append(producer.send_async(b"m%d-" % i + b"y" * (i * 7), **fields))
    ids = await asyncio.gather(*futures)
    await producer.close()
    return list(ids)


async def drain(consumer: Any, n: int) -> list[Message]:
    out = []
    for _ in range(n):
        msg = await consumer.receive(10)
        out.append(msg)
        await consumer.acknowledge(msg)
    return out


async def assert_nothing_more(consumer: Any) -> None:
    with pytest.raises(TimeoutError):
        await consumer.receive(0.3)


PRODUCERS = {
    "unbatched": {},
    "unbatched-lz4": {"compression": "lz4"},
    "batch-size-1": {"batching": True, "batching_max_messages": 1},
    "batch-size-n": {"batching": True, "batching_max_messages": 7, "batching_max_delay": 0.5},
    "batch-size-n-zstd": {"batching": True, "batching_max_messages": 7,
                          "batching_max_delay": 0.5, "compression": "zstd"},
}


@pytest.mark.parametrize("kind", sorted(PRODUCERS))
async def test_default_equals_no_processor_on_one_topic(
    mclient: Client, topic: str, kind: str
) -> None:
    plain = await mclient.subscribe(topic, "plain", initial_position="earliest")
    default = await mclient.subscribe(topic, "default", initial_position="earliest",
                                      payload_processor=PayloadProcessor.DEFAULT)
    ids = await produce(mclient, topic, 20, **PRODUCERS[kind])
    expected = [snapshot(m) for m in await drain(plain, 20)]
    got = [snapshot(m) for m in await drain(default, 20)]
    assert got == expected
    assert [row[0] for row in got] == ids  # the ids the producer was given
    if kind.startswith("batch-size-n"):
        assert {row[2] for row in got} == {7, 6}  # 20 = 7 + 7 + 6
    await assert_nothing_more(default)


class JavaDefault:
    """PIP-96's DEFAULT as Java writes it: one ``message_at(..., True)`` per index, each
    reading the next message of the batch from the same payload."""

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        if context.is_batch:
            for index in range(context.num_messages):
                emit(context.message_at(index, context.num_messages, payload, True, schema))
        else:
            emit(context.as_single_message(payload, schema))


@pytest.mark.parametrize("kind", ["unbatched", "batch-size-1", "batch-size-n-zstd"])
async def test_message_at_one_by_one_equals_no_processor(
    mclient: Client, topic: str, kind: str
) -> None:
    plain = await mclient.subscribe(topic, "plain", initial_position="earliest")
    java = await mclient.subscribe(topic, "java", initial_position="earliest",
                                   payload_processor=JavaDefault())
    await produce(mclient, topic, 20, **PRODUCERS[kind])
    assert [snapshot(m) for m in await drain(java, 20)] == [
        snapshot(m) for m in await drain(plain, 20)]
    await assert_nothing_more(java)


@pytest.mark.parametrize("kind", ["unbatched", "batch-size-n"])
async def test_default_equals_no_processor_on_several_topics(
    mclient: Client, broker: EmbeddedBroker, kind: str
) -> None:
    base = f"persistent://public/default/pp-{uuid.uuid4().hex[:10]}"
    partitioned = base + "-partitioned"
    broker.create_partitioned_topic(partitioned, 3)
    topics = [base + "-a", base + "-b", partitioned]
    plain = await mclient.subscribe(topics, "plain", initial_position="earliest")
    default = await mclient.subscribe(topics, "default", initial_position="earliest",
                                      payload_processor=DEFAULT_PROCESSOR)
    for topic in topics:
        await produce(mclient, topic, 15, **PRODUCERS[kind])
    n = 15 * len(topics)

    def by_topic(messages: list[Message]) -> list[tuple[Any, ...]]:
        return sorted((snapshot(m) for m in messages), key=lambda row: (row[-1], row[0]))

    expected = by_topic(await drain(plain, n))
    got = by_topic(await drain(default, n))
    assert got == expected
    assert {row[3] for row in got} == {-1, 0, 1, 2}  # partitions and plain topics
    await assert_nothing_more(default)


@pytest.mark.parametrize("inclusive", [False, True])
async def test_default_equals_no_processor_on_readers(
    mclient: Client, topic: str, inclusive: bool
) -> None:
    ids = await produce(mclient, topic, 20, **PRODUCERS["batch-size-n"])
    for start in (EARLIEST, ids[3], ids[9]):
        plain = await mclient.create_reader(topic, start, start_message_id_inclusive=inclusive)
        default = await mclient.create_reader(topic, start, start_message_id_inclusive=inclusive,
                                              payload_processor=DEFAULT_PROCESSOR)
        expected = []
        while await plain.has_message_available():
            expected.append(snapshot(await plain.read_next(10)))
        got = []
        while await default.has_message_available():
            got.append(snapshot(await default.read_next(10)))
        assert got == expected and got
        await plain.close()
        await default.close()


async def test_default_keeps_per_message_acks_across_redelivery(
    mclient: Client, topic: str
) -> None:
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared",
                                       initial_position="earliest", ack_group_time=0,
                                       payload_processor=DEFAULT_PROCESSOR)
    await produce(mclient, topic, 5, batching=True, batching_max_messages=5,
                  batching_max_delay=0.5)
    first = [await consumer.receive(10) for _ in range(5)]
    assert {m.message_id.batch_size for m in first} == {5}
    for msg in first[::2]:
        await consumer.acknowledge(msg)
    consumer.redeliver_unacknowledged_messages()
    again = [await consumer.receive(10) for _ in range(2)]
    assert [m.message_id for m in again] == [first[1].message_id, first[3].message_id]
    for msg in again:
        await consumer.acknowledge(msg)
    await assert_nothing_more(consumer)


# ---------------------------------------------------------------- custom processors


class Splitter:
    """Entries tagged ``entry.format=lines`` hold lines: one message per line (no
    metadata), numbered as a batch; everything else goes to DEFAULT."""

    def __init__(self) -> None:
        self.contexts: list[tuple[str | None, int, bool, dict[str, str]]] = []

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        self.contexts.append((context.get_property("entry.format"), context.num_messages,
                              context.is_batch, context.properties))
        if context.get_property("entry.format") != "lines":
            DEFAULT_PROCESSOR.process(payload, context, schema, emit)
            return
        lines = payload.copy().split(b"\n")
        for index, line in enumerate(lines):
            msg = context.message_at(index, len(lines), MessagePayload(line), False, schema)
            msg.properties = {"line": str(index)}
            emit(msg)


async def test_custom_processor_messages_are_acked_one_by_one(
    mclient: Client, topic: str
) -> None:
    splitter = Splitter()
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared",
                                       initial_position="earliest", ack_group_time=0,
                                       payload_processor=splitter)
    producer = await mclient.create_producer(topic)
    entry_id = await producer.send_entry(b"a\nb\nc", properties={"entry.format": "lines"})
    await producer.send(b"plain", key="k")
    msgs = [await consumer.receive(10) for _ in range(4)]
    assert [m.value for m in msgs] == [b"a", b"b", b"c", b"plain"]
    assert [m.properties for m in msgs[:3]] == [{"line": "0"}, {"line": "1"}, {"line": "2"}]
    assert [(m.message_id.entry_id, m.message_id.batch_index, m.message_id.batch_size)
            for m in msgs[:3]] == [(entry_id.entry_id, i, 3) for i in range(3)]
    assert msgs[0].key is None and msgs[0].event_time is None
    assert msgs[0].producer_name == producer.producer_name
    assert msgs[3].key == "k"
    # Entry metadata as the processor saw it: no num_messages_in_batch given.
    assert splitter.contexts[0] == ("lines", 1, False, {"entry.format": "lines"})
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2])
    await consumer.acknowledge(msgs[3])
    consumer.negative_acknowledge(msgs[1])  # only "b" is left: it comes back alone
    consumer.redeliver_unacknowledged_messages()
    again = await consumer.receive(10)
    assert (again.value, again.message_id) == (b"b", msgs[1].message_id)
    await consumer.acknowledge(again)
    await assert_nothing_more(consumer)


class Fanout:
    """Every entry becomes ``factor`` messages, whatever its metadata says."""

    def __init__(self, factor: int) -> None:
        self.factor = factor

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        for index in range(self.factor):
            emit(context.message_at(index, self.factor, payload, False, schema))


FANOUT_FORMAT = {"entry.format": "fanout"}


@pytest.mark.parametrize(("factor", "num_messages"), [(5, None), (1, 40), (3, 3)])
async def test_permits_stay_right_whatever_a_processor_makes(
    mclient: Client, broker: EmbeddedBroker, topic: str, factor: int, num_messages: int | None
) -> None:
    """The broker charges num_messages_in_batch per entry; the processor makes
    ``factor`` messages. With a queue of 4 the consumer would stall (fewer messages
    than charged) or overfill (more) if permits were counted by messages made."""
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       receiver_queue_size=4, payload_processor=Fanout(factor))
    producer = await mclient.create_producer(topic)
    entries = 30
    # Tagged foreign: the broker refuses a Pulsar batch whose count its payload lacks.
    await asyncio.gather(*(producer.send_entry_async(b"e%d" % i, num_messages=num_messages,
                                                     properties=FANOUT_FORMAT)
                           for i in range(entries)))
    seen = []
    for _ in range(entries * factor):
        msg = await consumer.receive(10)
        seen.append((msg.value, msg.message_id.batch_index))
        await consumer.acknowledge(msg)
    assert seen == [(b"e%d" % i, j) for i in range(entries) for j in range(factor)]
    await assert_nothing_more(consumer)
    # The broker may send no more than the queue holds: granted minus charged permits.
    assert broker.service is not None
    (broker_side,) = broker.service.topics[topic].subscriptions["s"].consumers
    assert broker_side.permits <= 4


class Failing:
    """Fails on entries whose payload starts with b"bad"; DEFAULT for the others."""

    def __init__(self) -> None:
        self.calls = 0

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        self.calls += 1
        if payload.copy().startswith(b"bad"):
            emit(context.as_single_message(payload, schema))  # dropped with the entry
            raise RuntimeError("cannot read this")
        DEFAULT_PROCESSOR.process(payload, context, schema, emit)


async def test_a_failing_processor_fails_only_its_entry(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared",
                                       initial_position="earliest", ack_group_time=0,
                                       negative_ack_redelivery_delay=0.2,
                                       payload_processor=Failing())
    producer = await mclient.create_producer(topic)
    await producer.send(b"one")
    bad_id = await producer.send(b"bad entry", properties={"p": "v"})
    await producer.send(b"two")
    assert (await consumer.receive(10)).value == b"one"
    with pytest.raises(PayloadProcessingError) as failure:
        await consumer.receive(10)
    error = failure.value
    assert isinstance(error.__cause__, RuntimeError)
    assert error.message_id == bad_id
    assert error.entry.value == b"bad entry" and error.entry.properties == {"p": "v"}
    assert (await consumer.receive(10)).value == b"two"  # the consumer keeps going
    consumer.negative_acknowledge(error.entry)
    with pytest.raises(PayloadProcessingError) as again:
        await consumer.receive(10)
    assert again.value.message_id == bad_id
    assert again.value.entry.redelivery_count == 1
    await consumer.acknowledge(again.value.entry)  # the application gives up on it
    await assert_nothing_more(consumer)


async def test_batch_receive_returns_messages_before_a_failed_entry(
    mclient: Client, topic: str
) -> None:
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       payload_processor=Failing())
    producer = await mclient.create_producer(topic)
    for value in (b"a", b"b", b"bad", b"c"):
        await producer.send(value)
    await asyncio.sleep(0.2)  # let them all arrive (a shorter wait only splits the batch)
    first = await consumer.batch_receive(10, timeout=2)
    assert [m.value for m in first] == [b"a", b"b"]
    with pytest.raises(PayloadProcessingError):
        await consumer.batch_receive(10, timeout=2)
    rest = await consumer.batch_receive(10, timeout=2)
    assert [m.value for m in rest] == [b"c"]


async def test_a_listener_outlives_a_failing_processor(mclient: Client, topic: str) -> None:
    got: list[bytes] = []
    done = asyncio.Event()

    async def listener(consumer: Any, msg: Message) -> None:
        got.append(msg.value)
        await consumer.acknowledge(msg)
        if msg.value == b"after":
            done.set()

    processor = Failing()
    await mclient.subscribe(topic, "s", initial_position="earliest", message_listener=listener,
                            subscription_type="shared", negative_ack_redelivery_delay=0.1,
                            payload_processor=processor)
    producer = await mclient.create_producer(topic)
    await producer.send(b"before")
    await producer.send(b"bad")
    await producer.send(b"after")
    await asyncio.wait_for(done.wait(), 10)
    assert got == [b"before", b"after"]
    await asyncio.sleep(0.5)
    assert processor.calls >= 4  # the failed entry was nacked and came again


class Nothing:
    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        if payload.copy() != b"skip":
            DEFAULT_PROCESSOR.process(payload, context, schema, emit)


async def test_an_entry_that_gives_no_message_is_acknowledged(
    mclient: Client, broker: EmbeddedBroker, topic: str
) -> None:
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       ack_group_time=0, payload_processor=Nothing())
    producer = await mclient.create_producer(topic)
    await producer.send_entry(b"skip", num_messages=3, properties=FANOUT_FORMAT)
    await producer.send(b"kept")
    msg = await consumer.receive(10)
    assert msg.value == b"kept"
    await consumer.acknowledge(msg)
    assert broker.service is not None
    loaded = broker.service.topics[topic]

    async def backlog() -> int:
        for _ in range(100):
            if not loaded.subscriptions["s"].backlog():
                return 0
            await asyncio.sleep(0.05)
        return loaded.subscriptions["s"].backlog()

    assert await backlog() == 0


def test_message_payload_views_without_copying() -> None:
    data = b"0123456789"
    payload = MessagePayload(data)
    assert payload.view.obj is data and len(payload) == 10
    assert payload.copy() == data and bytes(payload) == data
    part = MessagePayload(memoryview(data)[2:5])
    assert part.copy() == b"234"
    assert repr(PayloadProcessor.DEFAULT) == "PayloadProcessor.DEFAULT"
    assert PayloadProcessor.DEFAULT is DEFAULT_PROCESSOR


async def test_message_at_rejects_an_index_outside_its_batch(
    mclient: Client, topic: str
) -> None:
    class OutOfRange:
        def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                    emit: Any) -> None:
            emit(context.message_at(2, 2, payload, False, schema))

    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       payload_processor=OutOfRange())
    producer = await mclient.create_producer(topic)
    await producer.send(b"x")
    with pytest.raises(PayloadProcessingError) as failure:
        await consumer.receive(10)
    assert isinstance(failure.value.__cause__, IndexError)


class Recorder:
    def __init__(self) -> None:
        self.compressions: list[int] = []

    def process(self, payload: MessagePayload, context: EntryContext, schema: Any,
                emit: Any) -> None:
        self.compressions.append(context.metadata.compression)
        DEFAULT_PROCESSOR.process(payload, context, schema, emit)


async def test_send_entry_keeps_order_and_sends_the_payload_as_given(
    mclient: Client, topic: str
) -> None:
    recorder = Recorder()
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       payload_processor=recorder)
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=1.0,
                                             compression="lz4")
    first = [producer.send_async(b"a"), producer.send_async(b"b")]
    entry = producer.send_entry_async(b"raw " * 100, key="k", event_time=1_700_000_000_000)
    last = producer.send_async(b"c")
    ids = await asyncio.gather(*first, entry, last)
    assert ids[0].entry_id < ids[2].entry_id < ids[3].entry_id  # the batch went first
    assert ids[2].batch_index == -1
    msgs = [await consumer.receive(10) for _ in range(4)]
    assert [m.value for m in msgs] == [b"a", b"b", b"raw " * 100, b"c"]
    assert (msgs[2].key, msgs[2].event_time, msgs[2].message_id) == (
        "k", 1_700_000_000_000, ids[2])
    assert recorder.compressions == [LZ4, 0, LZ4]  # the entry is not compressed
    with pytest.raises(ValueError, match="at least 1"):
        producer.send_entry_async(b"x", num_messages=0)
    with pytest.raises(MessageTooBig):
        await producer.send_entry(b"x" * (5 * 1024 * 1024 + 1))


@pytest.mark.parametrize("processor", [DEFAULT_PROCESSOR, JavaDefault()],
                         ids=["DEFAULT", "message_at"])
async def test_a_processor_honours_the_brokers_ack_set(processor: Any) -> None:
    """PIP-54: a partly acknowledged batch comes with an ``ack_set`` (bits set: still
    unacked); the broker charged permits only for those. Driven without a broker: the
    consumer is built but never connects."""
    from magnetar.client.consuming.config import ConsumerConfig
    from magnetar.client.consuming.consumer import Consumer
    from magnetar.client.consuming.entries import RawEntry
    from magnetar.client.consuming.topic_consumer import TopicConsumer
    from magnetar.protocol.client_codec import encode_message_metadata, encode_single_metadata
    from magnetar.protocol.frames import build_entry
    from magnetar.protocol.pb import pb

    client = Client("pulsar://127.0.0.1:1")
    conf = ConsumerConfig(subscription="s", ack_group_time=60, payload_processor=processor)
    name = "persistent://public/default/t"
    parent = Consumer(client, [name], conf)
    sub = TopicConsumer(client, parent, name, -1, conf, 1000)
    singles = b"".join(
        len(one).to_bytes(4, "big") + one + b"m%d" % i
        for i, one in enumerate(encode_single_metadata(2) for _ in range(5)))
    body = build_entry(
        encode_message_metadata(b"p", 10, 1_700_000_000_000, num_messages_in_batch=5), singles)
    command = pb.CommandMessage(consumer_id=0)
    command.message_id.ledgerId = 7
    command.message_id.entryId = 3
    command.ack_set.append(0b01010)  # messages 1 and 3 are left
    permits = sub._permits
    msgs = sub.decode(RawEntry(sub, command, body))
    assert [(m.value, m.message_id.batch_index, m.message_id.batch_size) for m in msgs] == [
        (b"m1", 1, 5), (b"m3", 3, 5)]
    assert sub._permits == permits  # charged 2, handing out 2: nothing to give back
    sub.acknowledge_message(msgs[0])
    assert not sub._acks.pending
    sub.acknowledge_message(msgs[1])  # the last unacked one: the entry is acked
    assert sub._acks.pending
    await client.close()
