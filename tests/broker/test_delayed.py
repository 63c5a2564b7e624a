"""Delayed delivery: deliver_after / deliver_at on Shared and Key_Shared subscriptions;
Exclusive and Failover subscriptions deliver at once (as Pulsar does)."""

from __future__ import annotations

import time
from datetime import timedelta

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

CT = pulsar.ConsumerType
DELAY_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


def assert_nothing_for(consumer: pulsar.Consumer, timeout_ms: int) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        pytest.fail(f"received {msg.data()!r} too early")


@pytest.mark.parametrize("sub_type", [CT.Shared, CT.KeyShared], ids=str)
@pytest.mark.parametrize("how", ["deliver_after", "deliver_at"])
def test_delayed_message_waits(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType, how: str
) -> None:
    consumer = client.subscribe(topic, "delayed", consumer_type=sub_type)
    producer = client.create_producer(topic)
    start = time.monotonic()
    if how == "deliver_after":
        producer.send(b"later", partition_key="k", deliver_after=timedelta(seconds=DELAY_S))
    else:
        producer.send(b"later", partition_key="k", deliver_at=now_ms() + int(DELAY_S * 1000))
    # A message without delay, sent afterwards, is not held back by the delayed one.
    producer.send(b"now", partition_key="other")
    msg = consumer.receive(timeout_millis=700)
    assert msg.data() == b"now"
    consumer.acknowledge(msg)
    remaining_ms = int((DELAY_S - (time.monotonic() - start)) * 1000) - 100
    if remaining_ms > 0:
        assert_nothing_for(consumer, remaining_ms)
    msg = consumer.receive(timeout_millis=3000)
    elapsed = time.monotonic() - start
    assert msg.data() == b"later"
    assert elapsed >= DELAY_S - 0.1, elapsed
    assert elapsed < DELAY_S + 1.5, elapsed
    assert msg.redelivery_count() == 0
    consumer.acknowledge(msg)
    assert_nothing_for(consumer, 200)


def test_delayed_messages_come_out_in_due_order(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "due-order", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    producer.send(b"d1.2", deliver_after=timedelta(milliseconds=1200))
    producer.send(b"d0.6", deliver_after=timedelta(milliseconds=600))
    producer.send(b"d0.9", deliver_after=timedelta(milliseconds=900))
    start = time.monotonic()
    got = []
    for _ in range(3):
        msg = consumer.receive(timeout_millis=3000)
        consumer.acknowledge(msg)
        got.append((msg.data(), time.monotonic() - start))
    assert [d for d, _ in got] == [b"d0.6", b"d0.9", b"d1.2"]
    for data, at in got:
        due = float(data[1:].decode())
        assert at >= due - 0.15, (data, at)


def test_delay_in_the_past_delivers_at_once(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "past", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    producer.send(b"past", deliver_at=now_ms() - 10_000)
    assert consumer.receive(timeout_millis=1000).data() == b"past"


def test_delayed_survives_consumer_reconnect(client: pulsar.Client, topic: str) -> None:
    consumer = client.subscribe(topic, "reconnect", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    start = time.monotonic()
    producer.send(b"later", deliver_after=timedelta(seconds=DELAY_S))
    consumer.close()
    consumer = client.subscribe(topic, "reconnect", consumer_type=CT.Shared)
    remaining_ms = int((DELAY_S - (time.monotonic() - start)) * 1000) - 100
    if remaining_ms > 0:
        assert_nothing_for(consumer, remaining_ms)
    msg = consumer.receive(timeout_millis=3000)
    assert msg.data() == b"later"
    assert time.monotonic() - start >= DELAY_S - 0.1


def test_delayed_with_several_shared_consumers(client: pulsar.Client, topic: str) -> None:
    consumers = [client.subscribe(topic, "many", consumer_type=CT.Shared) for _ in range(2)]
    producer = client.create_producer(topic)
    start = time.monotonic()
    for i in range(10):
        producer.send_async(f"{i}".encode(), None, deliver_after=timedelta(seconds=DELAY_S))
    producer.flush()
    got = []
    deadline = time.monotonic() + DELAY_S + 3
    while len(got) < 10 and time.monotonic() < deadline:
        for c in consumers:
            try:
                msg = c.receive(timeout_millis=100)
            except pulsar.Timeout:
                continue
            got.append((int(msg.data()), time.monotonic() - start))
            c.acknowledge(msg)
    assert sorted(i for i, _ in got) == list(range(10))
    assert min(at for _, at in got) >= DELAY_S - 0.1


@pytest.mark.parametrize("sub_type", [CT.Exclusive, CT.Failover], ids=str)
def test_single_active_subscriptions_ignore_delay(
    client: pulsar.Client, topic: str, sub_type: pulsar.ConsumerType
) -> None:
    consumer = client.subscribe(topic, "no-delay", consumer_type=sub_type)
    shared = client.subscribe(topic, "with-delay", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    start = time.monotonic()
    producer.send(b"later", deliver_after=timedelta(seconds=DELAY_S))
    producer.send(b"at", deliver_at=now_ms() + int(DELAY_S * 1000))
    assert consumer.receive(timeout_millis=500).data() == b"later"
    assert consumer.receive(timeout_millis=500).data() == b"at"
    assert time.monotonic() - start < DELAY_S * 0.8
    # Meanwhile the Shared subscription of the same topic waits.
    assert_nothing_for(shared, 300)
    assert sorted(shared.receive(timeout_millis=3000).data() for _ in range(2)) == [
        b"at",
        b"later",
    ]


def test_delayed_on_partitioned_topic(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    consumer = client.subscribe(topic, "delayed-parts", consumer_type=CT.Shared)
    producer = client.create_producer(topic)
    start = time.monotonic()
    for i in range(6):
        producer.send(
            f"{i}".encode(), partition_key=f"k{i}", deliver_after=timedelta(seconds=DELAY_S)
        )
    producer.send(b"now")
    assert consumer.receive(timeout_millis=700).data() == b"now"
    remaining_ms = int((DELAY_S - (time.monotonic() - start)) * 1000) - 100
    if remaining_ms > 0:
        assert_nothing_for(consumer, remaining_ms)
    got = sorted(consumer.receive(timeout_millis=3000).data() for _ in range(6))
    assert got == [f"{i}".encode() for i in range(6)]
    assert time.monotonic() - start >= DELAY_S - 0.1


def test_a_long_run_of_delayed_entries_is_walked_in_bounded_rounds(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    """Many delayed entries in a row: each dispatch round passes over a bounded number
    of them and yields, so other connections are served meanwhile; the message after
    the run is still delivered at once."""
    import asyncio

    from magnetar.broker.topics import dispatch_round as rounds

    consumer = client.subscribe(topic, "many-delayed", consumer_type=CT.Shared)
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    count = rounds.MAX_SKIPPED_PER_ROUND * 2 + 10
    for _ in range(count):
        producer.send_async(b"later", None, deliver_after=timedelta(seconds=600))
    producer.flush()
    producer.send(b"now")
    assert consumer.receive(timeout_millis=10_000).data() == b"now"
    assert broker.service is not None and broker._loop is not None
    sub = broker.service.topics[topic].subscriptions["many-delayed"]

    async def one_round() -> tuple[bool, int]:
        sub.read_position = 0
        sub.delayed.clear()
        more = rounds.dispatch_round(sub)
        return more, sub.read_position

    more, position = asyncio.run_coroutine_threadsafe(one_round(), broker._loop).result(30)
    assert more and position == rounds.MAX_SKIPPED_PER_ROUND


def test_delayed_messages_past_the_tracker_capacity_are_found_again_in_the_log(
    tmp_path, client_factory  # type: ignore[no-untyped-def]
) -> None:
    capacity = 50
    with EmbeddedBroker(data_dir=tmp_path, delayed_delivery_max_tracked=capacity) as broker:
        client = client_factory(broker.service_url)
        topic = "persistent://public/default/many-later"
        consumer = client.subscribe(topic, "s", consumer_type=CT.Shared)
        producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
        count = capacity * 4
        for i in range(count):
            producer.send_async(f"later-{i}".encode(), None, deliver_after=timedelta(seconds=2))
        producer.flush()
        producer.send(b"now")
        assert consumer.receive(timeout_millis=10_000).data() == b"now"
        assert broker.service is not None
        sub = broker.service.topics[topic].subscriptions["s"]
        assert len(sub.delayed) <= capacity
        got = set()
        for _ in range(count):
            msg = consumer.receive(timeout_millis=30_000)
            consumer.acknowledge(msg)
            got.add(msg.data())
        assert got == {f"later-{i}".encode() for i in range(count)}
        assert sub.delayed.overflow_from is None and len(sub.delayed) == 0
