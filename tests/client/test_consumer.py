"""Consumer features: subscription types, acks, nacks, ack timeout, seek, multi-topic."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from magnetar.client import (
    Client,
    ConsumerBusy,
    Message,
    MultiplierRedeliveryBackoff,
    TimeoutError,
)
from magnetar.client.consuming.config import ConsumerConfig
from magnetar.client.errors import AlreadyClosed
from magnetar.testing import EmbeddedBroker


async def _send(client: Client, topic: str, n: int, **kw: object) -> list:
    producer = await client.create_producer(topic, **kw)  # type: ignore[arg-type]
    ids = await asyncio.gather(*(producer.send_async(b"m%d" % i) for i in range(n)))
    await producer.close()
    return list(ids)


async def _drain(consumer, timeout: float = 0.3) -> list[Message]:  # type: ignore[no-untyped-def]
    out = []
    while True:
        try:
            out.append(await consumer.receive(timeout))
        except TimeoutError:
            return out


async def test_initial_position_latest_and_earliest(mclient: Client, topic: str) -> None:
    await _send(mclient, topic, 3)
    latest = await mclient.subscribe(topic, "latest")
    earliest = await mclient.subscribe(topic, "earliest", initial_position="earliest")
    await _send(mclient, topic, 1)
    assert [m.value for m in await _drain(latest)] == [b"m0"]
    assert [m.value for m in await _drain(earliest)] == [b"m0", b"m1", b"m2", b"m0"]


async def test_receive_timeout_and_iteration(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "s")
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        await consumer.receive(0.2)
    assert time.monotonic() - started >= 0.19
    await _send(mclient, topic, 3)
    seen = []
    async for msg in consumer:
        seen.append(msg.value)
        if len(seen) == 3:
            await consumer.close()
    assert seen == [b"m0", b"m1", b"m2"]
    with pytest.raises(AlreadyClosed):
        await consumer.receive(0.1)


async def test_exclusive_subscription_refuses_second_consumer(mclient: Client,
                                                              topic: str) -> None:
    await mclient.subscribe(topic, "excl")
    with pytest.raises(ConsumerBusy):
        await mclient.subscribe(topic, "excl")


async def test_shared_subscription_spreads_messages(mclient: Client, topic: str) -> None:
    c1 = await mclient.subscribe(topic, "sh", subscription_type="shared", receiver_queue_size=10)
    c2 = await mclient.subscribe(topic, "sh", subscription_type="shared", receiver_queue_size=10)
    await _send(mclient, topic, 40)
    got1 = await _drain(c1)
    got2 = await _drain(c2)
    assert len(got1) + len(got2) == 40
    assert got1 and got2
    assert {m.value for m in got1} | {m.value for m in got2} == {b"m%d" % i for i in range(40)}


async def test_failover_and_key_shared_subscribe(mclient: Client, topic: str) -> None:
    f1 = await mclient.subscribe(topic, "fo", subscription_type="failover", consumer_name="a")
    await mclient.subscribe(topic, "fo", subscription_type="failover", consumer_name="b")
    k1 = await mclient.subscribe(topic, "ks", subscription_type="key_shared")
    k2 = await mclient.subscribe(topic, "ks", subscription_type="key_shared")
    producer = await mclient.create_producer(topic)
    for i in range(30):
        await producer.send(b"v", key=f"key-{i % 6}")
    got_f = await _drain(f1)
    assert len(got_f) in (0, 30)
    keys1 = {m.key for m in await _drain(k1)}
    keys2 = {m.key for m in await _drain(k2)}
    assert keys1.isdisjoint(keys2) and len(keys1 | keys2) == 6


async def test_flow_control_with_small_receiver_queue(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "s", receiver_queue_size=4)
    await _send(mclient, topic, 50)
    await asyncio.sleep(0.1)
    assert len(consumer._queue) <= 4  # the broker respects the permits
    got = [await consumer.receive(5) for _ in range(50)]
    assert [m.value for m in got] == [b"m%d" % i for i in range(50)]


async def test_batch_receive(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "s")
    assert await consumer.batch_receive(10, timeout=0.05) == []
    await _send(mclient, topic, 25, batching=True)
    batch = await consumer.batch_receive(10, timeout=2)
    assert len(batch) == 10
    rest = await consumer.batch_receive(100, timeout=0.3)
    assert len(rest) == 15


async def test_message_listener(mclient: Client, topic: str) -> None:
    received: list[bytes] = []
    done = asyncio.Event()

    async def listener(consumer, msg: Message) -> None:  # type: ignore[no-untyped-def]
        received.append(msg.value)
        await consumer.acknowledge(msg)
        if len(received) == 5:
            done.set()

    await mclient.subscribe(topic, "s", message_listener=listener)
    await _send(mclient, topic, 5)
    await asyncio.wait_for(done.wait(), 5)
    assert received == [b"m%d" % i for i in range(5)]


async def test_acks_survive_resubscribe(mclient: Client, topic: str) -> None:
    await _send(mclient, topic, 6)
    consumer = await mclient.subscribe(topic, "acks", initial_position="earliest")
    msgs = [await consumer.receive(5) for _ in range(6)]
    for m in msgs[:3]:
        await consumer.acknowledge(m)
    await consumer.acknowledge(msgs[4].message_id)  # by id works on one topic
    await consumer.close()  # flushes the grouped acks
    again = await mclient.subscribe(topic, "acks")
    assert [m.value for m in await _drain(again)] == [b"m3", b"m5"]


async def test_cumulative_ack(mclient: Client, topic: str) -> None:
    await _send(mclient, topic, 5)
    consumer = await mclient.subscribe(topic, "cum", initial_position="earliest")
    msgs = [await consumer.receive(5) for _ in range(5)]
    await consumer.acknowledge_cumulative(msgs[2])
    await consumer.flush_acks()
    await consumer.close()
    again = await mclient.subscribe(topic, "cum")
    assert [m.value for m in await _drain(again)] == [b"m3", b"m4"]
    shared = await mclient.subscribe(topic, "sh", subscription_type="shared")
    with pytest.raises(ValueError):
        await shared.acknowledge_cumulative(msgs[0].message_id)


async def test_batch_aware_individual_acks(mclient: Client, topic: str) -> None:
    ids = await _send(mclient, topic, 4, batching=True, batching_max_delay=0.2)
    assert len({(i.ledger_id, i.entry_id) for i in ids}) == 1
    consumer = await mclient.subscribe(topic, "b", initial_position="earliest")
    msgs = [await consumer.receive(5) for _ in range(4)]
    for m in msgs[:3]:
        await consumer.acknowledge(m)
    sub = consumer._subs[topic]
    assert not sub._acks.pending  # the entry is not acked while one message is open
    await consumer.close()
    again = await mclient.subscribe(topic, "b")
    # The broker redelivers the whole entry; nothing was lost.
    assert len(await _drain(again)) == 4
    await again.close()


async def test_batch_cumulative_ack_acks_previous_entry(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=0.2)
    await producer.send(b"single")  # entry 0 (batch of 1)
    await asyncio.gather(*(producer.send_async(b"b%d" % i) for i in range(3)))  # entry 1
    consumer = await mclient.subscribe(topic, "bc", initial_position="earliest")
    msgs = [await consumer.receive(5) for _ in range(4)]
    await consumer.acknowledge_cumulative(msgs[2])  # middle of the second batch
    sub = consumer._subs[topic]
    assert sub._acks._pending_cumulative == (msgs[0].message_id.ledger_id,
                                             msgs[0].message_id.entry_id)
    await consumer.acknowledge_cumulative(msgs[3])
    assert sub._acks._pending_cumulative == (msgs[3].message_id.ledger_id,
                                             msgs[3].message_id.entry_id)
    await consumer.close()
    again = await mclient.subscribe(topic, "bc")
    assert await _drain(again) == []


async def test_negative_ack_redelivers_after_delay(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "n", subscription_type="shared",
                                       negative_ack_redelivery_delay=0.3)
    await _send(mclient, topic, 2)
    first = await consumer.receive(5)
    second = await consumer.receive(5)
    started = time.monotonic()
    consumer.negative_acknowledge(first)
    await consumer.acknowledge(second)
    again = await consumer.receive(5)
    assert again.value == first.value
    assert again.redelivery_count == 1
    assert time.monotonic() - started >= 0.25


async def test_negative_ack_backoff_grows(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(
        topic, "nb", subscription_type="shared",
        negative_ack_redelivery_backoff=MultiplierRedeliveryBackoff(0.1, 1.0, 3),
    )
    await _send(mclient, topic, 1)
    msg = await consumer.receive(5)
    gaps = []
    for expected_count in (1, 2, 3):
        started = time.monotonic()
        consumer.negative_acknowledge(msg)
        msg = await consumer.receive(5)
        gaps.append(time.monotonic() - started)
        assert msg.redelivery_count == expected_count
    # 0.1 * 3**n seconds: 0.1, 0.3, 0.9
    assert gaps[0] < gaps[1] < gaps[2]
    assert gaps[2] >= 0.8


async def test_fixed_nack_delay_and_backoff_together_are_refused(mclient: Client,
                                                                  topic: str) -> None:
    backoff = MultiplierRedeliveryBackoff(0.1, 1.0, 2)
    with pytest.raises(ValueError, match="either negative_ack_redelivery_delay or"):
        await mclient.subscribe(topic, "both", negative_ack_redelivery_delay=5.0,
                                negative_ack_redelivery_backoff=backoff)
    with pytest.raises(ValueError, match="either negative_ack_redelivery_delay or"):
        ConsumerConfig("both", negative_ack_redelivery_delay=5.0,
                       negative_ack_redelivery_backoff=backoff)
    # Either one alone is fine; without both the default fixed delay applies.
    await mclient.subscribe(topic, "backoff", negative_ack_redelivery_backoff=backoff)
    await mclient.subscribe(topic, "fixed", negative_ack_redelivery_delay=5.0)
    default = await mclient.subscribe(topic, "default")
    assert next(iter(default._subs.values()))._nacks.delay_for(3) == 60.0


async def test_negative_ack_on_exclusive_redelivers_in_order(mclient: Client,
                                                             topic: str) -> None:
    consumer = await mclient.subscribe(topic, "ne", negative_ack_redelivery_delay=0.1)
    await _send(mclient, topic, 3)
    msgs = [await consumer.receive(5) for _ in range(3)]
    consumer.negative_acknowledge(msgs[1])
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2])
    again = await consumer.receive(5)
    assert again.value == b"m1"


@pytest.mark.parametrize("subscription_type", ["exclusive", "failover"])
async def test_nack_on_exclusive_counts_only_the_nacked_message(
    mclient: Client, topic: str, subscription_type: str
) -> None:
    """PIP-106: what sat unseen in the receiver queue comes again with count 0."""
    await _send(mclient, topic, 5)
    consumer = await mclient.subscribe(topic, "nc", subscription_type=subscription_type,
                                       initial_position="earliest", receiver_queue_size=10,
                                       negative_ack_redelivery_delay=0.05)
    first = await consumer.receive(5)  # the other four wait in the receiver queue
    consumer.negative_acknowledge(first)
    await asyncio.sleep(0.2)  # the redelivery (due in 0.05 s on this loop) comes first
    again = [await consumer.receive(5) for _ in range(5)]
    assert [(m.value, m.redelivery_count) for m in again] == [
        (b"m0", 1), (b"m1", 0), (b"m2", 0), (b"m3", 0), (b"m4", 0)]
    consumer.negative_acknowledge(again[0])
    consumer.negative_acknowledge(again[2])
    await asyncio.sleep(0.2)
    third = [await consumer.receive(5) for _ in range(5)]
    assert [(m.value, m.redelivery_count) for m in third] == [
        (b"m0", 2), (b"m1", 0), (b"m2", 1), (b"m3", 0), (b"m4", 0)]
    for msg in third:
        await consumer.acknowledge(msg)
    assert await _drain(consumer) == []


async def test_nack_on_exclusive_does_not_bring_back_what_was_acked(mclient: Client,
                                                                    topic: str) -> None:
    await _send(mclient, topic, 3)
    consumer = await mclient.subscribe(topic, "na", initial_position="earliest",
                                       negative_ack_redelivery_delay=0.05,
                                       ack_group_time=10.0)  # acks would wait to be sent
    first = await consumer.receive(5)
    second = await consumer.receive(5)
    await consumer.acknowledge(first)
    consumer.negative_acknowledge(second)
    await asyncio.sleep(0.2)  # the redelivery (due in 0.05 s on this loop) comes first
    assert [(m.value, m.redelivery_count) for m in await _drain(consumer, 1.0)] == [
        (b"m1", 1), (b"m2", 0)]


async def test_redelivery_gives_back_the_permits_of_dropped_batches(
    broker: EmbeddedBroker, mclient: Client, topic: str
) -> None:
    import aiohttp

    producer = await mclient.create_producer(topic, batching=True, batching_max_messages=4,
                                             batching_max_delay=1.0)
    await asyncio.gather(*(producer.send_async(b"b%d" % i) for i in range(16)))
    consumer = await mclient.subscribe(topic, "nb", initial_position="earliest",
                                       receiver_queue_size=8,
                                       negative_ack_redelivery_delay=0.05)
    first = await consumer.receive(5)
    for _ in range(3):
        consumer.negative_acknowledge(first)
        await asyncio.sleep(0.2)  # the redelivery (due in 0.05 s on this loop) comes first
        first = await consumer.receive(5)
        assert first.value == b"b0"
    # (b0 came after the broker had the FLOW that went out with the redelivery.)
    # Permits count messages: a dropped batch of four gives back four (it gave back
    # one, and the broker's count of what the client may take went below zero).
    local = topic.split("://", 1)[1]
    async with aiohttp.ClientSession() as http:
        url = f"{broker.admin_url}/admin/v2/persistent/{local}/stats"
        async with http.get(url) as response:
            stats = await response.json()
    (stats_consumer,) = stats["subscriptions"]["nb"]["consumers"]
    assert stats_consumer["availablePermits"] == 0  # 8 asked for, 2 batches of 4 sent
    values = [first.value] + [m.value for m in await _drain(consumer, 1.0)]
    assert values == [b"b%d" % i for i in range(16)]


async def test_ack_timeout_redelivers(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "at", subscription_type="shared", ack_timeout=0.3)
    await _send(mclient, topic, 1)
    msg = await consumer.receive(5)
    again = await consumer.receive(5)
    assert again.value == msg.value and again.redelivery_count >= 1
    await consumer.acknowledge(again)
    with pytest.raises(TimeoutError):
        await consumer.receive(0.6)


async def test_seek_by_message_id_and_time(mclient: Client, topic: str) -> None:
    ids = await _send(mclient, topic, 5)
    consumer = await mclient.subscribe(topic, "seek", initial_position="earliest")
    msgs = [await consumer.receive(5) for _ in range(5)]
    for m in msgs:
        await consumer.acknowledge(m)
    await consumer.seek(ids[2])
    assert [m.value for m in await _drain(consumer, 0.5)] == [b"m2", b"m3", b"m4"]
    await consumer.seek(msgs[0].publish_time)
    assert next(m.value for m in await _drain(consumer, 0.5)) == b"m0"


async def test_unsubscribe(mclient: Client, topic: str) -> None:
    await _send(mclient, topic, 2)
    consumer = await mclient.subscribe(topic, "gone", initial_position="earliest")
    await consumer.receive(5)
    await consumer.unsubscribe()
    with pytest.raises(AlreadyClosed):
        await consumer.receive(0.1)
    fresh = await mclient.subscribe(topic, "gone")  # a new subscription starts at latest
    assert await _drain(fresh) == []


async def test_multi_topic_subscription(mclient: Client) -> None:
    topics = [f"multi-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    consumer = await mclient.subscribe(topics, "m", initial_position="earliest")
    for i, t in enumerate(topics):
        producer = await mclient.create_producer(t)
        await producer.send(b"from-%d" % i)
    got = await _drain(consumer)
    assert sorted(m.value for m in got) == [b"from-0", b"from-1", b"from-2"]
    assert {m.topic for m in got} == {f"persistent://public/default/{t}" for t in topics}
    for m in got:
        await consumer.acknowledge(m)
    with pytest.raises(ValueError):
        await consumer.acknowledge(got[0].message_id)


async def test_pattern_subscription_discovers_topics(mclient: Client) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    for i in range(2):
        producer = await mclient.create_producer(f"{prefix}-{i}")
        await producer.send(b"x")
    consumer = await mclient.subscribe(
        re.compile(f"persistent://public/default/{prefix}-.*"), "p",
        initial_position="earliest", pattern_auto_discovery_period=0.2,
    )
    assert len(consumer.topics) == 2
    assert len(await _drain(consumer)) == 2
    producer = await mclient.create_producer(f"{prefix}-late")
    await asyncio.sleep(0.6)  # discovery picks up the new topic
    await producer.send(b"late")
    assert [m.value for m in await _drain(consumer, 1.0)] == [b"late"]


async def test_partitioned_topic_routing_and_consumption(broker: EmbeddedBroker,
                                                         mclient: Client) -> None:
    name = f"persistent://public/default/part-{uuid.uuid4().hex[:8]}"
    broker.create_partitioned_topic(name, 4)
    assert len(await mclient.get_topic_partitions(name)) == 4
    consumer = await mclient.subscribe(name, "p", initial_position="earliest")
    assert len(consumer.topics) == 4
    producer = await mclient.create_producer(name, message_routing="round_robin")
    ids = [await producer.send(b"rr%d" % i) for i in range(8)]
    assert sorted(i.partition for i in ids) == [0, 0, 1, 1, 2, 2, 3, 3]
    keyed = await mclient.create_producer(name, message_routing="key_hash")
    from magnetar.protocol.murmur3 import key_hash

    for key in ("alpha", "beta", "gamma"):
        mid = await keyed.send(b"k", key=key)
        assert mid.partition == key_hash(key) % 4
    single = {(await keyed.send(b"nokey")).partition for _ in range(4)}
    assert len(single) == 1
    got = await _drain(consumer, 0.5)
    assert len(got) == 8 + 3 + 4
    for m in got:
        assert m.topic.endswith(f"-partition-{m.message_id.partition}")
        await consumer.acknowledge(m.message_id)  # ids name their partition


async def test_terminated_topic(broker: EmbeddedBroker, mclient: Client, topic: str) -> None:
    import aiohttp

    from magnetar.client import TopicTerminated

    producer = await mclient.create_producer(topic)
    consumer = await mclient.subscribe(topic, "end", initial_position="earliest")
    await producer.send(b"last words")
    local = topic.split("://", 1)[1]
    async with aiohttp.ClientSession() as http:
        url = f"{broker.admin_url}/admin/v2/persistent/{local}/terminate"
        async with http.post(url) as response:
            assert response.status == 200
    assert (await consumer.receive(5)).value == b"last words"
    for _ in range(50):
        if consumer.has_reached_end_of_topic():
            break
        await asyncio.sleep(0.05)
    assert consumer.has_reached_end_of_topic()
    with pytest.raises(TopicTerminated):
        await asyncio.wait_for(producer.send(b"too late"), 5)
    with pytest.raises(TopicTerminated):
        await mclient.create_producer(topic)
