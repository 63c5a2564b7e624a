"""Readers (non-durable subscriptions), seek by id and by time, last message id."""

from __future__ import annotations

import time

import pulsar
import pytest

from .helpers import RECEIVE_MS, assert_nothing_more, mid_key

CT = pulsar.ConsumerType
Earliest = pulsar.InitialPosition.Earliest


def publish(producer: pulsar.Producer, payloads: list[bytes]) -> list[pulsar.MessageId]:
    ids: list[pulsar.MessageId | None] = [None] * len(payloads)

    def cb_for(i: int):
        def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            assert res == pulsar.Result.Ok
            ids[i] = msg_id

        return cb

    for i, p in enumerate(payloads):
        producer.send_async(p, cb_for(i))
    producer.flush()
    assert all(i is not None for i in ids)
    return ids  # type: ignore[return-value]


def read_n(reader: pulsar.Reader, n: int) -> list[bytes]:
    return [reader.read_next(timeout_millis=RECEIVE_MS).data() for _ in range(n)]


def assert_reader_done(reader: pulsar.Reader, timeout_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = reader.read_next(timeout_millis=timeout_ms)
        pytest.fail(f"unexpected extra message {msg.data()!r}")


PAYLOADS = [f"m{i}".encode() for i in range(10)]


@pytest.fixture(params=[False, True], ids=["unbatched", "batched"])
def filled(request: pytest.FixtureRequest, client: pulsar.Client, topic: str):
    """A topic holding m0..m9 (in batches of 5 when batched), and their ids."""
    batched = request.param
    producer = client.create_producer(
        topic,
        batching_enabled=batched,
        batching_max_messages=5,
        batching_max_publish_delay_ms=200,
    )
    ids = publish(producer, PAYLOADS)
    if batched:
        assert [i.batch_index() for i in ids] == [0, 1, 2, 3, 4] * 2
    return producer, ids


def test_reader_from_earliest(client: pulsar.Client, topic: str, filled) -> None:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read_n(reader, 10) == PAYLOADS
    assert_reader_done(reader)


def test_reader_from_latest(client: pulsar.Client, topic: str, filled) -> None:
    producer, _ = filled
    reader = client.create_reader(topic, pulsar.MessageId.latest)
    assert not reader.has_message_available()
    assert_reader_done(reader)
    publish(producer, [b"after"])
    assert read_n(reader, 1) == [b"after"]
    assert_reader_done(reader)


def test_reader_from_latest_inclusive(client: pulsar.Client, topic: str, filled) -> None:
    """start_message_id_inclusive with latest reads the last message of the topic."""
    reader = client.create_reader(topic, pulsar.MessageId.latest, start_message_id_inclusive=True)
    assert reader.has_message_available()
    assert read_n(reader, 1) == [b"m9"]
    assert not reader.has_message_available()


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_reader_from_message_id(client: pulsar.Client, topic: str, filled, inclusive: bool) -> None:
    _, ids = filled
    # first message, inside a batch, last of a batch, first of a batch, last message
    for index in (0, 3, 4, 5, 9):
        reader = client.create_reader(topic, ids[index], start_message_id_inclusive=inclusive)
        first = index if inclusive else index + 1
        expected = PAYLOADS[first:]
        assert reader.has_message_available() == bool(expected), index
        assert read_n(reader, len(expected)) == expected, index
        assert not reader.has_message_available()
        assert_reader_done(reader, 100)
        reader.close()


def test_reader_from_deserialized_id(client: pulsar.Client, topic: str, filled) -> None:
    _, ids = filled
    restored = pulsar.MessageId.deserialize(ids[5].serialize())
    reader = client.create_reader(topic, restored)
    assert read_n(reader, 4) == PAYLOADS[6:]


def test_has_message_available(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert not reader.has_message_available()  # empty topic
    producer.send(b"one")
    assert reader.has_message_available()
    assert read_n(reader, 1) == [b"one"]
    assert not reader.has_message_available()
    producer.send(b"two")
    producer.send(b"three")
    assert reader.has_message_available()
    assert read_n(reader, 2) == [b"two", b"three"]
    assert not reader.has_message_available()


def test_has_message_available_loop(client: pulsar.Client, topic: str, filled) -> None:
    """The usual "read to the end" idiom terminates with exactly the topic's content."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    deadline = time.monotonic() + 10
    while reader.has_message_available():
        assert time.monotonic() < deadline
        got.append(reader.read_next(timeout_millis=RECEIVE_MS).data())
    assert got == PAYLOADS


def test_readers_are_independent(client: pulsar.Client, topic: str, filled) -> None:
    r1 = client.create_reader(topic, pulsar.MessageId.earliest)
    r2 = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read_n(r1, 10) == PAYLOADS
    assert read_n(r2, 10) == PAYLOADS
    r1.close()
    r3 = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read_n(r3, 3) == PAYLOADS[:3]


def test_consumer_get_last_message_id(client: pulsar.Client, topic: str, filled) -> None:
    _, ids = filled
    consumer = client.subscribe(topic, "last-id")
    last = consumer.get_last_message_id()
    assert mid_key(last)[:2] == mid_key(ids[-1])[:2]
    assert last.batch_index() == ids[-1].batch_index()


def test_get_last_message_id_empty_topic(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "last-id-empty")
    last = consumer.get_last_message_id()
    assert last.entry_id() < 0 or last.ledger_id() < 0


# ---------------------------------------------------------------- seek


@pytest.mark.parametrize("inclusive", [False, True], ids=["exclusive", "inclusive"])
def test_consumer_seek_message_id(
    client: pulsar.Client, topic: str, filled, inclusive: bool
) -> None:
    """The broker rewinds to the sought entry; the client drops the sought message
    itself unless the consumer is start_message_id_inclusive (Pulsar's semantics)."""
    _, ids = filled
    consumer = client.subscribe(
        topic, "seek-id", initial_position=Earliest, start_message_id_inclusive=inclusive
    )
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    assert_nothing_more(consumer, 200)
    for index in (6, 0, 4, 9):
        consumer.seek(ids[index])
        expected = PAYLOADS[index if inclusive else index + 1 :]
        got = []
        for _ in expected:
            msg = consumer.receive(timeout_millis=RECEIVE_MS)
            consumer.acknowledge(msg)
            got.append(msg.data())
        assert got == expected, index
        assert_nothing_more(consumer, 200)


def test_consumer_seek_earliest_and_latest(client: pulsar.Client, topic: str, filled) -> None:
    producer, _ = filled
    consumer = client.subscribe(topic, "seek-ends", initial_position=Earliest)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    consumer.seek(pulsar.MessageId.earliest)
    assert [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(10)] == PAYLOADS
    consumer.seek(pulsar.MessageId.latest)
    assert_nothing_more(consumer, 500)
    publish(producer, [b"new"])
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"new"


def test_consumer_seek_publish_time(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    publish(producer, PAYLOADS[:5])
    time.sleep(0.1)
    boundary = int(time.time() * 1000)
    time.sleep(0.1)
    publish(producer, PAYLOADS[5:])
    consumer = client.subscribe(topic, "seek-time", initial_position=Earliest)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    consumer.seek(boundary)
    got = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(5)]
    assert [m.data() for m in got] == PAYLOADS[5:]
    assert all(m.publish_timestamp() >= boundary for m in got)
    assert_nothing_more(consumer)
    # A time before everything goes back to the start; after everything, to the end.
    consumer.seek(boundary - 60_000)
    assert [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(10)] == PAYLOADS
    consumer.seek(int(time.time() * 1000) + 60_000)
    assert_nothing_more(consumer, 500)


@pytest.mark.parametrize("sub_type", [CT.Shared, CT.Failover], ids=str)
def test_seek_other_subscription_types(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    producer = client.create_producer(topic)
    ids = publish(producer, PAYLOADS)
    consumer = client.subscribe(
        topic, "seek-typed", consumer_type=sub_type, initial_position=Earliest
    )
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    consumer.seek(ids[2])
    got = sorted(consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(7))
    assert got == sorted(PAYLOADS[3:])
    assert_nothing_more(consumer)


def test_reader_seek(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = publish(producer, PAYLOADS[:5])
    time.sleep(0.1)
    boundary = int(time.time() * 1000)
    time.sleep(0.1)
    publish(producer, PAYLOADS[5:])
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert read_n(reader, 10) == PAYLOADS
    reader.seek(ids[3])  # like a reader's start id: exclusive by default
    assert read_n(reader, 6) == PAYLOADS[4:]
    reader.seek(boundary)
    assert read_n(reader, 5) == PAYLOADS[5:]
    assert_reader_done(reader)


def test_seek_persists_for_durable_subscription(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    ids = publish(producer, PAYLOADS)
    consumer = client.subscribe(topic, "seek-durable", initial_position=Earliest)
    for _ in range(10):
        consumer.acknowledge(consumer.receive(timeout_millis=RECEIVE_MS))
    consumer.seek(ids[7])
    consumer.close()
    # A new consumer has no client-side seek filter: the broker's cursor decides.
    consumer = client.subscribe(topic, "seek-durable")
    assert [consumer.receive(timeout_millis=RECEIVE_MS).data() for _ in range(3)] == PAYLOADS[7:]
    assert_nothing_more(consumer)
