"""Producing and consuming with magnetar's client against the embedded broker."""

from __future__ import annotations

import asyncio
import time

import pytest

from magnetar.client import (
    Client,
    MessageId,
    ProducerQueueIsFull,
    TimeoutError,
)
from magnetar.client.errors import AlreadyClosed
from magnetar.testing import EmbeddedBroker


async def test_send_receive_roundtrip_with_all_fields(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "sub", initial_position="earliest")
    producer = await mclient.create_producer(topic, producer_name="p-fields")
    assert producer.topic == topic and producer.producer_name == "p-fields"
    assert producer.last_sequence_id == -1
    event_time = int(time.time() * 1000) - 5000
    mid = await producer.send(
        b"hello", key="k1", ordering_key=b"ord", properties={"a": "1", "b": "2"},
        event_time=event_time,
    )
    assert isinstance(mid, MessageId) and mid.batch_index == -1
    assert producer.last_sequence_id == 0
    msg = await consumer.receive(5)
    assert msg.value == b"hello" and msg.data() == b"hello"
    assert msg.key == "k1" and msg.ordering_key == b"ord"
    assert msg.properties == {"a": "1", "b": "2"}
    assert msg.event_time == event_time
    assert abs(msg.publish_time - time.time() * 1000) < 10_000
    assert msg.message_id == mid
    assert msg.redelivery_count == 0
    assert msg.topic == topic
    assert msg.producer_name == "p-fields"
    assert msg.sequence_id == 0
    await consumer.acknowledge(msg)


async def test_short_names_and_str_values(mclient: Client, topic: str) -> None:
    short = topic.rsplit("/", 1)[1]
    producer = await mclient.create_producer(short)
    assert producer.topic == topic
    consumer = await mclient.subscribe(f"public/default/{short}", "s",
                                       initial_position="earliest")
    await producer.send("text")
    msg = await consumer.receive(5)
    assert msg.value == b"text" and msg.key is None and msg.event_time is None


async def test_send_async_returns_futures_in_order(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic)
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest")
    futures = [producer.send_async(b"m%d" % i) for i in range(200)]
    assert all(isinstance(f, asyncio.Future) for f in futures)
    ids = await asyncio.gather(*futures)
    assert ids == sorted(ids) and len(set(ids)) == 200
    got = [(await consumer.receive(5)).value for _ in range(200)]
    assert got == [b"m%d" % i for i in range(200)]


async def test_sequence_ids_user_given_and_resumed(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, producer_name="seq-p")
    await producer.send(b"a", sequence_id=100)
    await producer.send(b"b")
    assert producer.last_sequence_id == 101
    await producer.close()
    again = await mclient.create_producer(topic, producer_name="seq-p")
    # The broker tells a returning producer where it was.
    assert again.last_sequence_id in (-1, 101)


@pytest.mark.parametrize("compression", [None, "lz4", "zlib", "zstd", "snappy"])
async def test_batching_and_compression(mclient: Client, topic: str,
                                        compression: str | None) -> None:
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest")
    producer = await mclient.create_producer(
        topic, batching=True, batching_max_messages=10, batching_max_delay=0.05,
        compression=compression,
    )
    payloads = [(b"payload-%03d-" % i) * 20 for i in range(25)]
    ids = await asyncio.gather(*(producer.send_async(p, key=f"k{i}", properties={"i": str(i)})
                                 for i, p in enumerate(payloads)))
    # 25 messages, at most 10 a batch: three entries, batch indexes restart per entry.
    assert len({(m.ledger_id, m.entry_id) for m in ids}) == 3
    assert [m.batch_index for m in ids[:10]] == list(range(10))
    assert ids[0].batch_size == 10 and ids[-1].batch_size == 5
    got = []
    for _ in payloads:
        msg = await consumer.receive(5)
        got.append(msg)
        await consumer.acknowledge(msg)
    assert [m.value for m in got] == payloads
    assert [m.message_id for m in got] == ids
    assert got[7].key == "k7" and got[7].properties == {"i": "7"}
    assert [m.sequence_id for m in got] == list(range(25))


async def test_batching_flushes_on_delay_and_bytes(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(
        topic, batching=True, batching_max_messages=1000, batching_max_bytes=1000,
        batching_max_delay=0.05,
    )
    started = time.monotonic()
    mid = await producer.send(b"x")  # alone: goes when the delay expires
    assert 0.04 <= time.monotonic() - started < 2
    assert mid.batch_index == 0 and mid.batch_size == 1
    ids = await asyncio.gather(*(producer.send_async(b"y" * 300) for _ in range(6)))
    # ~300 bytes each and a 1000-byte batch: entries hold at most 3.
    per_entry: dict[tuple[int, int], int] = {}
    for m in ids:
        per_entry[(m.ledger_id, m.entry_id)] = per_entry.get((m.ledger_id, m.entry_id), 0) + 1
    assert max(per_entry.values()) <= 3 and len(per_entry) >= 2


async def test_flush_sends_open_batch(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=30)
    futures = [producer.send_async(b"z") for _ in range(5)]
    await asyncio.sleep(0.05)
    assert not any(f.done() for f in futures)
    await producer.flush()
    assert all(f.done() and f.exception() is None for f in futures)


async def test_pending_queue_full_fails_without_blocking(broker: EmbeddedBroker,
                                                         topic: str) -> None:
    client = Client(broker.service_url)
    try:
        producer = await client.create_producer(
            topic, max_pending_messages=5, block_if_queue_full=False
        )
        futures = [producer.send_async(b"q") for _ in range(8)]
        results = await asyncio.gather(*futures, return_exceptions=True)
        full = [r for r in results if isinstance(r, ProducerQueueIsFull)]
        assert len(full) == 3
        assert all(isinstance(r, MessageId) for r in results[:5])
    finally:
        await client.close()


async def test_pending_queue_full_blocks_and_keeps_order(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, max_pending_messages=3,
                                             block_if_queue_full=True)
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest")
    futures = [producer.send_async(b"%d" % i) for i in range(20)]
    assert producer._partitions[0].pending_count <= 3
    ids = await asyncio.gather(*futures)
    assert ids == sorted(ids)
    got = [(await consumer.receive(5)).value for _ in range(20)]
    assert got == [b"%d" % i for i in range(20)]


async def test_send_timeout_when_broker_never_answers(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, send_timeout=0.3)
    part = producer._partitions[0]
    part._ready = False  # hold the frames back, as if the connection were stuck
    with pytest.raises(TimeoutError):
        await producer.send(b"never")
    part._ready = True


async def test_producer_close_rejects_sends(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic)
    await producer.send(b"1")
    await producer.close()
    with pytest.raises(AlreadyClosed):
        await producer.send(b"2")


async def test_message_too_big(broker: EmbeddedBroker, topic: str) -> None:
    from magnetar.client.errors import MessageTooBig

    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic)
        with pytest.raises(MessageTooBig):
            await producer.send(b"x" * (6 * 1024 * 1024))
        await producer.send(b"still fine")


async def test_deliver_after_delays_delivery(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic, batching=True)
    consumer = await mclient.subscribe(topic, "s", subscription_type="shared",
                                       initial_position="earliest")
    started = time.monotonic()
    await producer.send(b"later", deliver_after=0.6)
    await producer.send(b"now")
    first = await consumer.receive(5)
    assert first.value == b"now"
    second = await consumer.receive(5)
    assert second.value == b"later"
    assert time.monotonic() - started >= 0.5


async def test_close_while_broker_is_away_fails_pending_at_once(tmp_path) -> None:  # type: ignore[no-untyped-def]
    broker = EmbeddedBroker(data_dir=tmp_path / "d").start()
    client = Client(broker.service_url, max_backoff=0.2)
    try:
        producer = await client.create_producer("away")
        await asyncio.to_thread(broker.stop)
        pending = producer.send_async(b"stranded")
        await asyncio.sleep(0.1)
        started = time.monotonic()
        await producer.close()
        assert time.monotonic() - started < 2
        with pytest.raises(AlreadyClosed):
            await pending
    finally:
        await client.close()
        broker.close()
