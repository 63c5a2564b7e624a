"""Messages go through magnetar unchanged: payload, metadata, batching, compression."""

from __future__ import annotations

import os
import threading
import time

import pulsar
import pytest

from .helpers import RECEIVE_MS, assert_nothing_more, mid_key, receive_n

COMPRESSIONS = [
    pulsar.CompressionType.LZ4,
    pulsar.CompressionType.ZLib,
    pulsar.CompressionType.ZSTD,
    pulsar.CompressionType.SNAPPY,
]


def earliest(client: pulsar.Client, topic: str, sub: str = "sub", **kw: object) -> pulsar.Consumer:
    return client.subscribe(topic, sub, initial_position=pulsar.InitialPosition.Earliest, **kw)


def test_payload_key_properties_event_time_ordering_key(client: pulsar.Client, topic: str) -> None:
    consumer = earliest(client, topic)
    producer = client.create_producer(topic, producer_name="rt-producer")
    sent_id = producer.send(
        b"\x00hello\xffworld",
        properties={"a": "1", "unicode": "h\u00e9llo", "empty": ""},
        partition_key="key-1",
        ordering_key="order-1",
        event_timestamp=1_700_000_000_123,
    )
    before = int(time.time() * 1000)
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    consumer.acknowledge(msg)
    assert msg.data() == b"\x00hello\xffworld"
    assert msg.properties() == {"a": "1", "unicode": "h\u00e9llo", "empty": ""}
    assert msg.partition_key() == "key-1"
    assert msg.ordering_key() == "order-1"
    assert msg.event_timestamp() == 1_700_000_000_123
    assert msg.producer_name() == "rt-producer"
    assert abs(msg.publish_timestamp() - before) < 60_000
    assert msg.redelivery_count() == 0
    assert mid_key(msg.message_id()) == mid_key(sent_id)
    assert msg.topic_name() == topic

    # A message without any metadata extras comes back without them.
    producer.send(b"plain")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b"plain"
    assert msg.properties() == {}
    assert msg.partition_key() == ""
    assert msg.event_timestamp() == 0
    # An empty payload is a message too.
    producer.send(b"")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == b""
    assert_nothing_more(consumer)


@pytest.mark.parametrize(
    "batching",
    [
        {"batching_enabled": False},
        {"batching_enabled": True, "batching_max_messages": 10},
        {
            "batching_enabled": True,
            "batching_max_messages": 1000,
            "batching_max_publish_delay_ms": 50,
        },
        {
            "batching_enabled": True,
            "batching_max_messages": 1000,
            "batching_max_allowed_size_in_bytes": 1024,
            "batching_max_publish_delay_ms": 5,
        },
    ],
    ids=["off", "batch10", "delay50", "size1k"],
)
def test_batching_order_and_metadata(client: pulsar.Client, topic: str, batching: dict) -> None:
    consumer = earliest(client, topic)
    producer = client.create_producer(topic, **batching)
    n = 200
    results: list[tuple[pulsar.Result, pulsar.MessageId]] = [None] * n  # type: ignore[list-item]
    done = threading.Event()
    remaining = [n]
    lock = threading.Lock()

    def callback_for(i: int):
        def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            results[i] = (res, msg_id)
            with lock:
                remaining[0] -= 1
                if remaining[0] == 0:
                    done.set()

        return cb

    for i in range(n):
        producer.send_async(
            f"msg-{i}".encode() * 3,
            callback_for(i),
            properties={"i": str(i)},
            partition_key=f"k{i % 7}",
        )
    producer.flush()
    assert done.wait(10), "not every send callback fired"
    assert all(r[0] == pulsar.Result.Ok for r in results)
    sent_ids = [mid_key(r[1]) for r in results]
    assert sent_ids == sorted(sent_ids)
    assert len(set(sent_ids)) == n

    msgs = receive_n(consumer, n)
    assert [m.data() for m in msgs] == [f"msg-{i}".encode() * 3 for i in range(n)]
    assert [m.properties()["i"] for m in msgs] == [str(i) for i in range(n)]
    assert [m.partition_key() for m in msgs] == [f"k{i % 7}" for i in range(n)]
    received_ids = [mid_key(m.message_id()) for m in msgs]
    assert received_ids == sent_ids
    assert all(m.redelivery_count() == 0 for m in msgs)
    if batching["batching_enabled"]:
        # Batching really happened: several messages share an entry.
        assert len({(lg, e) for lg, e, _ in received_ids}) < n
        assert any(b >= 1 for _, _, b in received_ids)
    else:
        assert all(b == -1 for _, _, b in received_ids)
    assert_nothing_more(consumer)


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
@pytest.mark.parametrize("compression", COMPRESSIONS, ids=lambda c: str(c).split(".")[-1])
def test_compression(
    client: pulsar.Client, topic: str, compression: pulsar.CompressionType, batching: bool
) -> None:
    consumer = earliest(client, topic)
    producer = client.create_producer(
        topic,
        compression_type=compression,
        batching_enabled=batching,
        batching_max_publish_delay_ms=20,
    )
    payloads = [(f"compressible-{i}-".encode() * 200) for i in range(20)]
    payloads.append(os.urandom(5000))  # incompressible
    payloads.append(b"x")
    # No empty payload here: the C++ client itself cannot decode an empty
    # ZLib-compressed message (CompressionCodecZLib fails on uncompressed size 0).
    for p in payloads:
        producer.send_async(p, None, properties={"len": str(len(p))})
    producer.flush()
    msgs = receive_n(consumer, len(payloads))
    assert [m.data() for m in msgs] == payloads
    assert [m.properties()["len"] for m in msgs] == [str(len(p)) for p in payloads]
    assert_nothing_more(consumer)


def test_small_receiver_queue_and_big_batches(client: pulsar.Client, topic: str) -> None:
    """Flow control: batches larger than the consumer's receiver queue still arrive,
    in order, and permits keep the stream going."""
    consumer = earliest(client, topic, receiver_queue_size=5)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=100, batching_max_publish_delay_ms=50
    )
    n = 1000
    for i in range(n):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    msgs = receive_n(consumer, n)
    assert [int(m.data()) for m in msgs] == list(range(n))
    assert_nothing_more(consumer)


def test_send_async_callbacks(client: pulsar.Client, topic: str) -> None:
    consumer = earliest(client, topic)
    producer = client.create_producer(topic)
    n = 100
    got: dict[int, tuple[pulsar.Result, pulsar.MessageId]] = {}
    done = threading.Event()
    lock = threading.Lock()
    order: list[int] = []

    def make_cb(i: int):
        def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            with lock:
                got[i] = (res, msg_id)
                order.append(i)
                if len(got) == n:
                    done.set()

        return cb

    for i in range(n):
        producer.send_async(str(i).encode(), make_cb(i))
    assert done.wait(10), f"only {len(got)} of {n} callbacks fired"
    assert all(res == pulsar.Result.Ok for res, _ in got.values())
    # Callbacks complete in send order, with increasing ids.
    assert order == list(range(n))
    ids = [mid_key(got[i][1]) for i in range(n)]
    assert ids == sorted(ids) and len(set(ids)) == n
    msgs = receive_n(consumer, n)
    assert [int(m.data()) for m in msgs] == list(range(n))
    assert [mid_key(m.message_id()) for m in msgs] == ids


@pytest.mark.parametrize("batching", [False, True], ids=["unbatched", "batched"])
def test_large_messages(client: pulsar.Client, topic: str, batching: bool) -> None:
    consumer = earliest(client, topic, receiver_queue_size=10)
    producer = client.create_producer(
        topic,
        batching_enabled=batching,
        compression_type=pulsar.CompressionType.NONE,
    )
    payloads = [os.urandom(1024 * 1024) for _ in range(3)]
    payloads.append(b"small")
    payloads.append(os.urandom(1024 * 1024 - 100))
    for p in payloads:
        producer.send(p)
    msgs = receive_n(consumer, len(payloads))
    assert [m.data() for m in msgs] == payloads


def send_bounded(producer: pulsar.Producer, payload: bytes, timeout: float = 8.0, **kw: object):
    """producer.send, but failing after ``timeout`` instead of hanging."""
    done = threading.Event()
    result: list[object] = []

    def cb(res: pulsar.Result, msg_id: pulsar.MessageId) -> None:
        result.extend((res, msg_id))
        done.set()

    producer.send_async(payload, cb, **kw)
    assert done.wait(timeout), f"send of {len(payload)} bytes did not complete in {timeout}s"
    assert result[0] == pulsar.Result.Ok, result[0]
    return result[1]


def test_largest_message_the_client_accepts(client: pulsar.Client, topic: str) -> None:
    """The client accepts a message whose metadata + payload fit in the max message
    size the broker announced (5 MB); the broker must take every such message (its
    frame is a few bytes larger: magic, checksum, sizes), not refuse it."""
    consumer = earliest(client, topic, receiver_queue_size=2)
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=10_000)
    limit = 5 * 1024 * 1024
    for shortfall in range(0, 200, 2):
        payload = os.urandom(limit - shortfall)
        done = threading.Event()
        result: list[pulsar.Result] = []

        def cb(
            res: pulsar.Result,
            msg_id: pulsar.MessageId,
            result: list[pulsar.Result] = result,
            done: threading.Event = done,
        ) -> None:
            result.append(res)
            done.set()

        producer.send_async(payload, cb)
        assert done.wait(8), f"send of {len(payload)} bytes hangs"
        if result[0] == pulsar.Result.MessageTooBig:
            continue  # refused by the client itself: too big with its metadata
        assert result[0] == pulsar.Result.Ok, result[0]
        break
    else:
        pytest.fail("the client refused every size")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.data() == payload


def test_chunked_message(client: pulsar.Client, topic: str) -> None:
    """A message above the broker's max message size travels in chunks (client-side
    chunking; the broker stores and dispatches the chunks as ordinary entries)."""
    consumer = earliest(client, topic)
    producer = client.create_producer(
        topic, chunking_enabled=True, batching_enabled=False, send_timeout_millis=10_000
    )
    big = os.urandom(6 * 1024 * 1024)
    send_bounded(producer, b"before")
    send_bounded(producer, big, properties={"kind": "big"})
    send_bounded(producer, b"after")
    msgs = receive_n(consumer, 3)
    assert msgs[0].data() == b"before"
    assert msgs[1].data() == big
    assert msgs[1].properties() == {"kind": "big"}
    assert msgs[2].data() == b"after"
    assert_nothing_more(consumer)


def test_message_ids_monotonic_across_producers(client: pulsar.Client, topic: str) -> None:
    consumer = earliest(client, topic)
    p1 = client.create_producer(topic)
    p2 = client.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    sent = []
    for i in range(30):
        producer = p1 if i % 2 == 0 else p2
        sent.append(mid_key(producer.send(f"m{i}".encode())))
    assert sent == sorted(sent)
    assert len(set(sent)) == len(sent)
    msgs = receive_n(consumer, 30)
    received = [mid_key(m.message_id()) for m in msgs]
    assert received == sorted(received)
    assert [m.data() for m in msgs] == [f"m{i}".encode() for i in range(30)]


def test_redelivery_count_zero_on_first_delivery(client: pulsar.Client, topic: str) -> None:
    shared = earliest(client, topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
    exclusive = earliest(client, topic, "excl")
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(10):
        producer.send_async(str(i).encode(), None)
    producer.flush()
    for consumer in (shared, exclusive):
        msgs = receive_n(consumer, 10)
        assert [m.redelivery_count() for m in msgs] == [0] * 10


def test_producer_sequence_ids(client: pulsar.Client, topic: str) -> None:
    """Explicit sequence ids are accepted and messages still arrive in order."""
    consumer = earliest(client, topic)
    producer = client.create_producer(topic, initial_sequence_id=100)
    for i in range(5):
        producer.send(f"s{i}".encode(), sequence_id=200 + i)
    msgs = receive_n(consumer, 5)
    assert [m.data() for m in msgs] == [f"s{i}".encode() for i in range(5)]
