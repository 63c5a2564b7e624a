"""Reconnection: producers and consumers survive a broker restart without losing messages."""

from __future__ import annotations

import asyncio
from pathlib import Path

from magnetar.client import Client, MessageId
from magnetar.testing import EmbeddedBroker


async def test_producer_and_consumer_survive_broker_restart(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    client = Client(broker.service_url, operation_timeout=10, max_backoff=0.5)
    try:
        topic = "restart-topic"
        consumer = await client.subscribe(topic, "durable", subscription_type="shared")
        producer = await client.create_producer(topic, producer_name="survivor")
        futures: list[asyncio.Future[MessageId]] = []
        for i in range(100):
            futures.append(producer.send_async(b"before-%d" % i))
        await asyncio.gather(*futures)
        received: set[bytes] = set()
        for _ in range(50):
            msg = await consumer.receive(5)
            received.add(msg.value)
            await consumer.acknowledge(msg)
        await consumer.flush_acks()

        restart = asyncio.ensure_future(asyncio.to_thread(broker.restart))
        # Keep sending while the broker goes away and comes back.
        for i in range(100):
            futures.append(producer.send_async(b"during-%d" % i))
            await asyncio.sleep(0.005)
        await restart
        for i in range(100):
            futures.append(producer.send_async(b"after-%d" % i))
        ids = await asyncio.wait_for(asyncio.gather(*futures), 20)
        assert len(ids) == 300
        assert producer.producer_name == "survivor"
        assert producer.is_connected()

        expected = {b"before-%d" % i for i in range(100)} | {
            b"during-%d" % i for i in range(100)} | {b"after-%d" % i for i in range(100)}
        while received != expected:
            msg = await consumer.receive(10)
            received.add(msg.value)
            await consumer.acknowledge(msg)
        assert consumer.is_connected()
    finally:
        await client.close()
        broker.close()


async def test_pending_sends_are_resent_with_same_sequence_ids(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    client = Client(broker.service_url, operation_timeout=10, max_backoff=0.3)
    try:
        producer = await client.create_producer("resend", producer_name="resender")
        await producer.send(b"first")
        part = producer._partitions[0]
        await asyncio.to_thread(broker.stop)
        futures = [producer.send_async(b"queued-%d" % i) for i in range(5)]
        await asyncio.sleep(0.3)
        assert [op.sequence_id for op in part._pending] == [1, 2, 3, 4, 5]
        assert not any(f.done() for f in futures)
        await asyncio.to_thread(broker.start)
        await asyncio.wait_for(asyncio.gather(*futures), 15)
        assert producer.last_sequence_id == 5
        reader = await client.create_reader("resend", MessageId(-1, -1))
        got = [await reader.read_next(5) for _ in range(6)]
        assert [m.value for m in got] == [b"first"] + [b"queued-%d" % i for i in range(5)]
        assert [m.sequence_id for m in got] == list(range(6))
    finally:
        await client.close()
        broker.close()


async def test_reader_resumes_after_restart_without_gaps_or_repeats(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    client = Client(broker.service_url, operation_timeout=10, max_backoff=0.3)
    try:
        producer = await client.create_producer("reader-restart")
        await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(10)))
        reader = await client.create_reader("reader-restart", MessageId(-1, -1))
        first = [(await reader.read_next(5)).value for _ in range(4)]
        await asyncio.to_thread(broker.restart)
        rest = [(await reader.read_next(10)).value for _ in range(6)]
        assert first + rest == [b"%d" % i for i in range(10)]
        assert not await reader.has_message_available()
    finally:
        await client.close()
        broker.close()


async def test_consumer_gets_unacked_messages_again_after_restart(tmp_path: Path) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path / "data").start()
    client = Client(broker.service_url, operation_timeout=10, max_backoff=0.3)
    try:
        consumer = await client.subscribe("redeliver-restart", "sub",
                                          initial_position="earliest")
        producer = await client.create_producer("redeliver-restart", batching=True)
        await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(6)))
        msgs = [await consumer.receive(5) for _ in range(6)]
        for m in msgs[:2]:
            await consumer.acknowledge(m)
        await consumer.flush_acks()
        await asyncio.to_thread(broker.restart)
        again = [(await consumer.receive(10)).value for _ in range(4)]
        # The two acked messages of the batch are not handed out twice.
        assert again == [b"2", b"3", b"4", b"5"]
    finally:
        await client.close()
        broker.close()
