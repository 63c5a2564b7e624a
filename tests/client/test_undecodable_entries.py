"""An entry magnetar's client cannot decode is acknowledged unread, its permits given
back, counted on the consumer and logged once; the consumer goes on.

Such entries can no longer come from a SEND (the broker checks a batch's count against
its payload) but can be in a log already, written before that check or by a protocol
handler: they are appended here straight to the topic, as storage holds them. Before,
the consumer gave back one permit for an entry the broker charged N for: with N = 999,
5,000 or 2**31-1 it received nothing more, ever.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from magnetar.broker.topic_name import TopicName
from magnetar.broker.topics.entry_info import info_from_metadata
from magnetar.client import Client
from magnetar.protocol.compression import LZ4
from magnetar.protocol.frames import build_entry
from magnetar.protocol.pb import pb
from magnetar.testing import EmbeddedBroker

QUEUE = 10  # receiver queue: the messages after the bad entry need several FLOWs
AFTER = 3 * QUEUE


def store_entry(broker: EmbeddedBroker, topic: str, metadata: pb.MessageMetadata,
                payload: bytes) -> None:
    """Append an entry to ``topic``'s log as it is, no SEND and no check on the way."""
    service = broker.service
    assert service is not None

    async def append() -> None:
        loaded = await service.load_topic(TopicName.parse(topic))
        durable: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_durable(entry_id: int) -> None:
            if not durable.done():
                durable.set_result(entry_id)

        loaded.append_entry(build_entry(metadata.SerializeToString(), payload),
                            info_from_metadata(metadata), on_durable)
        await durable

    asyncio.run_coroutine_threadsafe(append(), service.loop).result(10)


def lying_batch(n: int) -> tuple[pb.MessageMetadata, bytes]:
    """Metadata that says ``n`` batched messages around a payload that is no batch."""
    md = pb.MessageMetadata(producer_name="liar", sequence_id=0, publish_time=1,
                            num_messages_in_batch=n)
    return md, b"\xff\xff\xff\xf0 this is not a batch of messages"


def garbage_lz4(n: int) -> tuple[pb.MessageMetadata, bytes]:
    """A batch of ``n`` whose payload does not decompress."""
    md = pb.MessageMetadata(producer_name="liar", sequence_id=0, publish_time=1,
                            num_messages_in_batch=n, compression=LZ4, uncompressed_size=1000)
    return md, b"\x00" * 40


@pytest.mark.parametrize(("bad", "n"), [
    (lying_batch, 2), (lying_batch, 999), (lying_batch, 5000), (lying_batch, 2**31 - 1),
    (garbage_lz4, 50),
])
async def test_an_undecodable_entry_is_acked_and_its_permits_come_back(
    broker: EmbeddedBroker, mclient: Client, topic: str, bad: object, n: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    producer = await mclient.create_producer(topic)
    await producer.send(b"before")
    metadata, payload = bad(n)  # type: ignore[operator]
    store_entry(broker, topic, metadata, payload)
    for i in range(AFTER):
        await producer.send(b"after-%d" % i)
    consumer = await mclient.subscribe(topic, "s", initial_position="earliest",
                                       receiver_queue_size=QUEUE)
    with caplog.at_level(logging.ERROR, logger="magnetar"):
        got = []
        for _ in range(1 + AFTER):
            msg = await consumer.receive(timeout=20.0)
            await consumer.acknowledge(msg)
            got.append(msg.value)
    assert got == [b"before"] + [b"after-%d" % i for i in range(AFTER)]
    assert consumer.discarded_entries == 1
    logged = [r for r in caplog.records if "discarding it" in r.getMessage()]
    assert len(logged) == 1
    await consumer.close()
    # Acknowledged: a new consumer of the subscription does not get it again.
    consumer = await mclient.subscribe(topic, "s", receiver_queue_size=QUEUE)
    await producer.send(b"later")
    assert (await consumer.receive(timeout=20.0)).value == b"later"
    assert consumer.discarded_entries == 0


async def test_an_entry_over_the_frame_limit_is_acked_and_its_permits_come_back(
    tmp_path: Path,
) -> None:
    """An entry stored before the broker judged whole frames: its MESSAGE frame is
    over the client's limit (max_message_size + 10 KiB). The client closed its
    connection on it and got it again, forever."""
    limit = 64 * 1024
    with EmbeddedBroker(data_dir=tmp_path, max_message_size=limit) as small:
        topic = "persistent://public/default/oversized"
        async with Client(small.service_url, operation_timeout=10.0) as client:
            producer = await client.create_producer(topic)
            await producer.send(b"before")
            md = pb.MessageMetadata(producer_name="old", sequence_id=0, publish_time=1,
                                    num_messages_in_batch=50)
            md.properties.add(key="pad", value="p" * 12_000)
            store_entry(small, topic, md, b"x" * limit)
            for i in range(AFTER):
                await producer.send(b"after-%d" % i)
            consumer = await client.subscribe(topic, "s", initial_position="earliest",
                                              receiver_queue_size=QUEUE)
            got = []
            for _ in range(1 + AFTER):
                msg = await consumer.receive(timeout=20.0)
                await consumer.acknowledge(msg)
                got.append(msg.value)
            assert got == [b"before"] + [b"after-%d" % i for i in range(AFTER)]
            assert consumer.discarded_entries == 1
