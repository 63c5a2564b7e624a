"""Interoperability with the official Pulsar client (pulsar-client 3.x), both ways."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pulsar
import pytest

from magnetar.client import Client, MessageId
from magnetar.testing import EmbeddedBroker

CODECS = {
    None: pulsar.CompressionType.NONE,
    "lz4": pulsar.CompressionType.LZ4,
    "zlib": pulsar.CompressionType.ZLib,
    "zstd": pulsar.CompressionType.ZSTD,
    "snappy": pulsar.CompressionType.SNAPPY,
}
N = 12


def _same_id(ours: MessageId, theirs: pulsar.MessageId) -> bool:
    return (ours.ledger_id, ours.entry_id, ours.batch_index, ours.partition) == (
        theirs.ledger_id(), theirs.entry_id(), theirs.batch_index(), theirs.partition()
    )


@pytest.mark.parametrize("batching", [False, True], ids=["plain", "batched"])
@pytest.mark.parametrize("compression", list(CODECS), ids=lambda c: c or "none")
async def test_ours_produce_official_consumes(
    mclient: Client, client: pulsar.Client, topic: str, compression: str | None, batching: bool
) -> None:
    official = client.subscribe(topic, "interop", initial_position=pulsar.InitialPosition.Earliest)
    producer = await mclient.create_producer(
        topic, batching=batching, batching_max_delay=0.05, compression=compression
    )
    event_time = int(time.time() * 1000) - 1000
    payloads = [(b"magnetar-%02d " % i) * 30 for i in range(N)]
    ids = await asyncio.gather(*(
        producer.send_async(p, key=f"k{i}", properties={"n": str(i)}, event_time=event_time)
        for i, p in enumerate(payloads)
    ))
    if batching:
        assert any(i.batch_index > 0 for i in ids)
    for i, payload in enumerate(payloads):
        msg = official.receive(5000)
        assert msg.data() == payload
        assert msg.partition_key() == f"k{i}"
        assert msg.properties() == {"n": str(i)}
        assert msg.event_timestamp() == event_time
        assert _same_id(ids[i], msg.message_id())
        # The official serialization is readable by ours and means the same message.
        assert MessageId.deserialize(msg.message_id().serialize()) == ids[i]
        official.acknowledge(msg)


@pytest.mark.parametrize("batching", [False, True], ids=["plain", "batched"])
@pytest.mark.parametrize("compression", list(CODECS), ids=lambda c: c or "none")
async def test_official_produce_ours_consume(
    mclient: Client, client: pulsar.Client, topic: str, compression: str | None, batching: bool
) -> None:
    consumer = await mclient.subscribe(topic, "interop", initial_position="earliest")
    official = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=50,
        compression_type=CODECS[compression],
    )
    payloads = [(b"official-%02d " % i) * 30 for i in range(N)]
    sent: list[pulsar.MessageId] = [None] * N  # type: ignore[list-item]

    def keep(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
        def callback(result: pulsar.Result, msg_id: pulsar.MessageId) -> None:
            assert result == pulsar.Result.Ok
            sent[i] = msg_id
        return callback

    for i, payload in enumerate(payloads):
        official.send_async(payload, keep(i), partition_key=f"k{i}", properties={"n": str(i)},
                            event_timestamp=1234 + i)
    official.flush()
    for i, payload in enumerate(payloads):
        msg = await consumer.receive(5)
        assert msg.value == payload
        assert msg.key == f"k{i}"
        assert msg.properties == {"n": str(i)}
        assert msg.event_time == 1234 + i
        assert msg.producer_name == official.producer_name()
        assert _same_id(msg.message_id, sent[i])
        # Our serialization is readable by the official client.
        theirs = pulsar.MessageId.deserialize(msg.message_id.serialize())
        assert _same_id(msg.message_id, theirs)
        await consumer.acknowledge(msg)
    if batching:
        assert any(s.batch_index() > 0 for s in sent)


async def test_official_consumer_acks_batch_from_ours(
    mclient: Client, client: pulsar.Client, topic: str
) -> None:
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=0.05)
    await asyncio.gather(*(producer.send_async(b"%d" % i) for i in range(5)))
    official = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
    for _ in range(5):
        official.acknowledge(official.receive(5000))
    official.close()
    ours = await mclient.subscribe(topic, "s")
    with pytest.raises(asyncio.TimeoutError):
        await ours.receive(0.3)


async def test_official_reader_from_our_message_id(
    mclient: Client, client: pulsar.Client, topic: str, broker: EmbeddedBroker
) -> None:
    producer = await mclient.create_producer(topic)
    ids = [await producer.send(b"r%d" % i) for i in range(4)]
    reader = client.create_reader(topic, pulsar.MessageId.deserialize(ids[1].serialize()))
    assert reader.read_next(5000).data() == b"r2"
