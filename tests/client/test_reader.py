"""Readers: start positions (inclusive or not, batched or not), has_message_available, seek."""

from __future__ import annotations

import asyncio

import pytest

from magnetar.client import EARLIEST, LATEST, Client, MessageId, TimeoutError


async def _produce(client: Client, topic: str, n: int, batching: bool = False) -> list[MessageId]:
    producer = await client.create_producer(topic, batching=batching, batching_max_messages=5,
                                            batching_max_delay=0.2)
    ids = await asyncio.gather(*(producer.send_async(b"m%d" % i) for i in range(n)))
    await producer.close()
    return list(ids)


async def _read_all(reader) -> list[bytes]:  # type: ignore[no-untyped-def]
    out = []
    while await reader.has_message_available():
        out.append((await reader.read_next(5)).value)
    return out


async def test_reader_from_earliest_and_latest(mclient: Client, topic: str) -> None:
    await _produce(mclient, topic, 3)
    earliest = await mclient.create_reader(topic, EARLIEST)
    latest = await mclient.create_reader(topic, LATEST)
    assert await _read_all(earliest) == [b"m0", b"m1", b"m2"]
    assert not await latest.has_message_available()
    await _produce(mclient, topic, 1)
    assert (await latest.read_next(5)).value == b"m0"
    assert await latest.has_message_available() is False


@pytest.mark.parametrize("batching", [False, True])
async def test_reader_from_message_id_exclusive(mclient: Client, topic: str,
                                                batching: bool) -> None:
    ids = await _produce(mclient, topic, 10, batching=batching)
    exclusive = await mclient.create_reader(topic, ids[3])
    assert await _read_all(exclusive) == [b"m%d" % i for i in range(4, 10)]
    # A serialized id works the same way.
    restored = MessageId.deserialize(ids[7].serialize())
    assert restored == ids[7]
    reader = await mclient.create_reader(topic, restored)
    assert (await reader.read_next(5)).value == b"m8"


@pytest.mark.parametrize("batching", [False, True])
async def test_reader_from_message_id_inclusive(mclient: Client, topic: str,
                                                batching: bool) -> None:
    ids = await _produce(mclient, topic, 10, batching=batching)
    inclusive = await mclient.create_reader(topic, ids[3], start_message_id_inclusive=True)
    assert await _read_all(inclusive) == [b"m%d" % i for i in range(3, 10)]


async def test_reader_latest_inclusive_reads_last_message(mclient: Client, topic: str) -> None:
    await _produce(mclient, topic, 3)
    reader = await mclient.create_reader(topic, LATEST, start_message_id_inclusive=True)
    assert (await reader.read_next(5)).value == b"m2"


async def test_reader_seek_and_iteration(mclient: Client, topic: str) -> None:
    ids = await _produce(mclient, topic, 6)
    reader = await mclient.create_reader(topic, EARLIEST)
    assert (await reader.read_next(5)).value == b"m0"
    await reader.seek(ids[4])
    assert (await reader.read_next(5)).value == b"m5"
    await reader.seek(EARLIEST)
    seen = []
    async for msg in reader:
        seen.append(msg.value)
        if len(seen) == 6:
            break
    assert seen == [b"m%d" % i for i in range(6)]
    with pytest.raises(TimeoutError):
        await reader.read_next(0.2)
    await reader.close()


async def test_empty_topic_has_no_message(mclient: Client, topic: str) -> None:
    reader = await mclient.create_reader(topic, EARLIEST)
    assert not await reader.has_message_available()


async def test_reader_of_a_partitioned_topic(broker, mclient: Client) -> None:  # type: ignore[no-untyped-def]
    import uuid

    name = f"persistent://public/default/rpart-{uuid.uuid4().hex[:8]}"
    broker.create_partitioned_topic(name, 2)
    producer = await mclient.create_producer(name)
    for i in range(6):
        await producer.send(b"%d" % i)
    reader = await mclient.create_reader(name, EARLIEST)
    got = sorted([(await reader.read_next(5)).value for _ in range(6)])
    assert got == [b"%d" % i for i in range(6)]
    assert not await reader.has_message_available()
    with pytest.raises(ValueError):
        await mclient.create_reader(name, MessageId(1, 1))


async def test_a_reader_reads_past_the_brokers_bound_on_unacked_entries() -> None:
    """The broker holds back a consumer with ``max_unacked_per_consumer`` entries
    unacknowledged; a reader acknowledges what it reads (as the official readers do),
    so it reads on. Before, it stopped at the bound (50,000 entries by default)."""
    import uuid

    from magnetar.testing import EmbeddedBroker

    limit = 40
    single = f"persistent://public/default/rbound-{uuid.uuid4().hex[:8]}"
    partitioned = f"persistent://public/default/rbound-p-{uuid.uuid4().hex[:8]}"
    with EmbeddedBroker(max_unacked_per_consumer=limit) as bounded:
        bounded.create_partitioned_topic(partitioned, 2)
        async with Client(bounded.service_url) as client:
            await _produce(client, single, 3 * limit + 5)
            await _produce(client, partitioned, 5 * limit + 3)
            reader = await client.create_reader(single, EARLIEST)
            got = [(await reader.read_next(10)).value for _ in range(2 * limit)]
            async for msg in reader:  # the iteration acknowledges too
                got.append(msg.value)
                if len(got) == 3 * limit + 5:
                    break
            assert got == [b"m%d" % i for i in range(3 * limit + 5)]
            assert not await reader.has_message_available()
            reader = await client.create_reader(partitioned, EARLIEST)
            values = sorted([(await reader.read_next(10)).value for _ in range(5 * limit + 3)])
            assert values == sorted(b"m%d" % i for i in range(5 * limit + 3))
            assert not await reader.has_message_available()
