"""Redelivery: negative acks, consumers that leave, cumulative acks, ack timeouts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS, assert_nothing_more, receive_n

CT = pulsar.ConsumerType
Earliest = pulsar.InitialPosition.Earliest


@pytest.mark.parametrize("sub_type", [CT.Shared, CT.KeyShared, CT.Exclusive, CT.Failover], ids=str)
def test_negative_ack_counts_grow(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    """Note: Apache Pulsar tracks redelivery counts only on Shared and Key_Shared
    (its single-active dispatchers use RedeliveryTrackerDisabled, so Exclusive and
    Failover report 0). magnetar tracks them on every type (DESIGN: PIP-106 counts
    kept by the broker); the Exclusive/Failover cases pin that extension down."""
    consumer = client.subscribe(
        topic, "nack", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    producer.send(b"poison", partition_key="k")
    counts = []
    start = time.monotonic()
    for _ in range(4):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        assert msg.data() == b"poison"
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2, 3]
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.redelivery_count() == 4
    consumer.acknowledge(msg)
    assert time.monotonic() - start < 4.0
    assert_nothing_more(consumer, 200)


@pytest.mark.parametrize("sub_type", [CT.Exclusive, CT.Failover], ids=str)
def test_negative_ack_keeps_order_on_single_active(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    """On Exclusive/Failover a nack rewinds to the first unacked message: order holds."""
    consumer = client.subscribe(
        topic, "nack-order", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    msgs = receive_n(consumer, 4, ack=False)
    for m in msgs[:3]:
        consumer.acknowledge(m)
    consumer.negative_acknowledge(msgs[3])
    got = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=700)
        except pulsar.Timeout:
            break
        consumer.acknowledge(msg)
        got.append((msg.data(), msg.redelivery_count()))
    # The C++ client keeps what it had prefetched (m4..m9, delivered once). The broker
    # rewinds to the first unacked message: m3 comes again, then whichever of m4..m9
    # were not yet acked when the redelivery request arrived -- in order.
    data = [d for d, _ in got]
    first_m3 = data.index(b"m3")
    assert data[:first_m3] == [f"m{i}".encode() for i in range(4, 10)]
    again = got[first_m3:]
    assert again[0] == (b"m3", 1)
    rest = [int(d[1:]) for d, _ in again[1:]]
    assert rest == sorted(set(rest)) and set(rest) <= set(range(4, 10))
    assert all(count == 1 for _, count in again)
    assert not {b"m0", b"m1", b"m2"} & {d for d, _ in got}


def test_key_shared_consumer_leaves_keys_stay_ordered(client: pulsar.Client, topic: str) -> None:
    a = client.subscribe(topic, "ks-leave", consumer_type=CT.KeyShared, consumer_name="a")
    b = client.subscribe(topic, "ks-leave", consumer_type=CT.KeyShared, consumer_name="b")
    producer = client.create_producer(topic)
    keys = [f"key-{i}" for i in range(20)]
    for i in range(200):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % 20])
    producer.flush()
    held = []
    while True:  # a takes its share and acks nothing
        try:
            held.append(a.receive(timeout_millis=500))
        except pulsar.Timeout:
            break
    got_b = []
    while True:
        try:
            msg = b.receive(timeout_millis=500)
        except pulsar.Timeout:
            break
        b.acknowledge(msg)
        got_b.append(msg)
    assert held and got_b
    assert len(held) + len(got_b) == 200
    a.close()
    for i in range(200, 240):
        producer.send_async(f"{i}".encode(), None, partition_key=keys[i % 20])
    producer.flush()
    after = []
    while True:
        try:
            msg = b.receive(timeout_millis=700)
        except pulsar.Timeout:
            break
        b.acknowledge(msg)
        after.append(msg)
    values = sorted(int(m.data()) for m in got_b + after)
    assert values == list(range(240))
    per_key: dict[str, list[int]] = {}
    for m in after:
        per_key.setdefault(m.partition_key(), []).append(int(m.data()))
    for key, seq in per_key.items():
        assert seq == sorted(seq), f"key {key} out of order after a consumer left: {seq}"
    held_data = {m.data() for m in held}
    assert all(m.redelivery_count() >= 1 for m in after if m.data() in held_data)


def test_negative_ack_only_the_nacked_message_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic, "nack-some", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    msgs = receive_n(consumer, 6, ack=False)
    for msg in msgs:
        if int(msg.data()[1:]) % 2:
            consumer.negative_acknowledge(msg)
        else:
            consumer.acknowledge(msg)
    again = receive_n(consumer, 3)
    assert sorted(m.data() for m in again) == [b"m1", b"m3", b"m5"]
    assert [m.redelivery_count() for m in again] == [1, 1, 1]
    assert_nothing_more(consumer, 500)


def test_negative_ack_batched_message(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(
        topic, "nack-batch", consumer_type=CT.Shared, negative_ack_redelivery_delay_ms=100
    )
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(5):
        producer.send_async(f"b{i}".encode(), None)
    producer.flush()
    msgs = receive_n(consumer, 5, ack=False)
    assert len({(m.message_id().ledger_id(), m.message_id().entry_id()) for m in msgs}) == 1
    for msg in msgs:
        consumer.negative_acknowledge(msg)
    again = receive_n(consumer, 5)
    assert [m.data() for m in again] == [f"b{i}".encode() for i in range(5)]
    assert all(m.redelivery_count() == 1 for m in again)
    assert_nothing_more(consumer, 500)


def test_closed_consumer_unacked_go_to_other_shared_consumer(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    c1_client = client_factory(broker.service_url)
    c2_client = client_factory(broker.service_url)
    c1 = c1_client.subscribe(topic, "handover", consumer_type=CT.Shared, consumer_name="c1")
    producer = c1_client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    first = receive_n(c1, 10, ack=False)
    for msg in first[:4]:
        c1.acknowledge(msg)
    time.sleep(0.3)  # the client groups acks for 100 ms
    c2 = c2_client.subscribe(topic, "handover", consumer_type=CT.Shared, consumer_name="c2")
    assert_nothing_more(c2, 300)  # everything is in flight on c1
    c1.close()
    got = receive_n(c2, 6)
    assert sorted(m.data() for m in got) == [f"m{i}".encode() for i in range(4, 10)]
    assert all(m.redelivery_count() >= 1 for m in got), [m.redelivery_count() for m in got]
    assert_nothing_more(c2)


def test_client_disconnect_unacked_go_to_other_shared_consumer(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    """As above, but the whole connection goes away (client closed)."""
    c1_client = client_factory(broker.service_url)
    c2_client = client_factory(broker.service_url)
    c1 = c1_client.subscribe(topic, "dropped", consumer_type=CT.Shared)
    c2 = c2_client.subscribe(topic, "dropped", consumer_type=CT.Shared, receiver_queue_size=1)
    producer = c2_client.create_producer(topic)
    for i in range(20):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    # c1 never acks; c2 acks what it gets.
    seen_c1 = {m.data() for m in receive_n(c1, 5, ack=False)}
    c1_client.close()
    got = []
    while True:
        try:
            msg = c2.receive(timeout_millis=1000)
        except pulsar.Timeout:
            break
        c2.acknowledge(msg)
        got.append(msg)
    datas = [m.data() for m in got]
    assert len(datas) == len(set(datas))
    # c2 ends up with everything c2 did not already ack, including what c1 had.
    assert seen_c1 <= set(datas)
    assert {f"m{i}".encode() for i in range(20)} == set(datas)
    for m in got:
        if m.data() in seen_c1:
            assert m.redelivery_count() >= 1


@pytest.mark.parametrize("reconnect", ["close-consumer", "close-client"])
def test_cumulative_ack_then_reconnect(
    client_factory: Callable[..., pulsar.Client],
    broker: EmbeddedBroker,
    topic: str,
    reconnect: str,
) -> None:
    client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "cumul", consumer_type=CT.Exclusive)
    producer = client.create_producer(topic)
    for i in range(10):
        producer.send(f"m{i}".encode())
    msgs = receive_n(consumer, 10, ack=False)
    consumer.acknowledge_cumulative(msgs[5])
    if reconnect == "close-consumer":
        consumer.close()
    else:
        client.close()
        client = client_factory(broker.service_url)
    consumer = client.subscribe(topic, "cumul", consumer_type=CT.Exclusive)
    again = receive_n(consumer, 4)
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(6, 10)]
    assert_nothing_more(consumer)


def test_cumulative_ack_inside_a_batch(client: pulsar.Client, topic: str) -> None:
    """Without batch-index acks, a cumulative ack in the middle of a batch acknowledges
    everything before that batch; the batch itself comes back on reconnect."""
    consumer = client.subscribe(topic, "cumul-batch", consumer_type=CT.Exclusive)
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=200
    )
    for i in range(15):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    msgs = receive_n(consumer, 15, ack=False)
    assert [m.message_id().batch_index() for m in msgs] == [0, 1, 2, 3, 4] * 3
    consumer.acknowledge_cumulative(msgs[7])  # inside the second batch
    consumer.close()
    consumer = client.subscribe(topic, "cumul-batch", consumer_type=CT.Exclusive)
    again = [m.data() for m in receive_n(consumer, 10)]
    assert again == [f"m{i}".encode() for i in range(5, 15)]
    assert_nothing_more(consumer)


def test_cumulative_ack_failover(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "cumul-fo", consumer_type=CT.Failover)
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    msgs = receive_n(consumer, 6, ack=False)
    consumer.acknowledge_cumulative(msgs[2])
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 3)
    assert [m.data() for m in again] == [b"m3", b"m4", b"m5"]
    assert_nothing_more(consumer)


def test_cumulative_ack_refused_on_shared(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "cumul-shared", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    producer.send(b"x")
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    with pytest.raises(pulsar.PulsarException):
        consumer.acknowledge_cumulative(msg)


def test_redeliver_unacknowledged_messages(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "redeliver", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    for i in range(5):
        producer.send(f"m{i}".encode())
    msgs = receive_n(consumer, 5, ack=False)
    consumer.acknowledge(msgs[0])
    consumer.acknowledge(msgs[1])
    time.sleep(0.3)  # let the grouped acks reach the broker
    consumer.redeliver_unacknowledged_messages()
    again = receive_n(consumer, 3)
    assert sorted(m.data() for m in again) == [b"m2", b"m3", b"m4"]
    assert all(m.redelivery_count() == 1 for m in again)
    assert_nothing_more(consumer)


def test_dead_letter_policy(client: pulsar.Client, topic: str) -> None:
    """The client's DLQ relies on the broker's redelivery count."""
    dlq_topic = f"{topic}-dlq"
    dlq = client.subscribe(dlq_topic, "dlq-reader", initial_position=Earliest)
    consumer = client.subscribe(
        topic,
        "with-dlq",
        consumer_type=CT.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq_topic
        ),
    )
    producer = client.create_producer(topic)
    producer.send(b"bad", properties={"p": "1"})
    producer.send(b"good")
    counts = []
    good_seen = False
    deadline = time.monotonic() + 8
    while time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=700)
        except pulsar.Timeout:
            break
        if msg.data() == b"good":
            consumer.acknowledge(msg)
            good_seen = True
        else:
            counts.append(msg.redelivery_count())
            consumer.negative_acknowledge(msg)
    assert good_seen
    assert counts == [0, 1, 2]
    dead = dlq.receive(timeout_millis=RECEIVE_MS)
    assert dead.data() == b"bad"
    assert dead.properties().get("p") == "1"


def test_ack_timeout_redelivery(client: pulsar.Client, topic: str) -> None:
    """Shared (redelivers by message id) and Exclusive (redelivers everything unacked)
    share one 10 s wait: 10 s is the smallest ack timeout the client accepts.
    (The Exclusive count of 1 is magnetar's: Pulsar reports 0 on single-active types.)"""
    consumers = {
        sub_type: client.subscribe(
            topic,
            f"ack-timeout-{sub_type}",
            consumer_type=sub_type,
            unacked_messages_timeout_ms=10_000,
        )
        for sub_type in (CT.Shared, CT.Exclusive)
    }
    producer = client.create_producer(topic)
    producer.send(b"slow-0")
    producer.send(b"fast-1")
    start = time.monotonic()
    for consumer in consumers.values():
        slow = consumer.receive(timeout_millis=RECEIVE_MS)
        fast = consumer.receive(timeout_millis=RECEIVE_MS)
        assert (slow.data(), fast.data()) == (b"slow-0", b"fast-1")
        consumer.acknowledge(fast)
    for sub_type, consumer in consumers.items():
        again = consumer.receive(timeout_millis=20_000)
        elapsed = time.monotonic() - start
        assert again.data() == b"slow-0", sub_type
        assert again.redelivery_count() == 1, sub_type
        assert 9.0 <= elapsed <= 15.0, (sub_type, elapsed)
        consumer.acknowledge(again)
    for consumer in consumers.values():
        assert_nothing_more(consumer, 500)
