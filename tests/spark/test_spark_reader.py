"""The executor-side range reader and the driver-side planner against a real broker,
without Spark: what a task reads for a range, and what it does when the topic ends
before the range does (``failOnDataLoss``)."""

from __future__ import annotations

import asyncio
import itertools
import uuid

import pytest

from magnetar.client import Client
from magnetar.spark.options import SourceConfig
from magnetar.spark.planning import Planner, TopicRange
from magnetar.spark.positions import BEFORE_ALL, WHOLE_ENTRY
from magnetar.spark.reading import DataLossError, RangeReader
from magnetar.testing import EmbeddedBroker


def config(broker: EmbeddedBroker, topic: str, **options: str) -> SourceConfig:
    return SourceConfig.from_options(
        {"service.url": broker.service_url, "topic": topic, **options}, streaming=False)


async def fill(url: str, topic: str, n: int) -> list[str]:
    values = [f"m{i}" for i in range(n)]
    async with Client(url) as client:
        producer = await client.create_producer(topic, batching=True, batching_max_messages=4)
        await asyncio.gather(*(producer.send_async(v.encode()) for v in values))
    return values


async def read_all(cfg: SourceConfig, part: TopicRange) -> list[str]:
    reader = await RangeReader.open(cfg, part)
    out: list[str] = []
    try:
        while (batch := await reader.next_batch()) is not None:
            out += [bytes(v).decode() for v in batch.column("value").to_pylist()]
    finally:
        await reader.close()
    return out


async def test_a_range_past_the_end_of_the_topic_is_data_loss(broker: EmbeddedBroker) -> None:
    topic = f"persistent://public/default/spark-loss-{uuid.uuid4().hex[:8]}"
    values = await fill(broker.service_url, topic, 10)
    async with Client(broker.service_url) as client:
        planner = Planner(client, config(broker, topic))
        try:
            last = (await planner.last_keys([topic]))[topic]
        finally:
            await planner.close()
    beyond = TopicRange(topic, BEFORE_ALL, (last[0], last[1] + 5, WHOLE_ENTRY))
    with pytest.raises(DataLossError, match="ended before"):
        await read_all(config(broker, topic), beyond)
    lenient = config(broker, topic, failOnDataLoss="false")
    assert await read_all(lenient, beyond) == values


async def test_planned_ranges_read_every_message_once(broker: EmbeddedBroker) -> None:
    topic = f"persistent://public/default/spark-plan-{uuid.uuid4().hex[:8]}"
    values = await fill(broker.service_url, topic, 41)  # 11 entries, the last of one message
    cfg = config(broker, topic, minPartitions="4")
    async with Client(broker.service_url) as client:
        planner = Planner(client, cfg)
        try:
            ranges = await planner.batch_ranges()
            last = (await planner.last_keys([topic]))[topic]
        finally:
            await planner.close()
    assert len(ranges) == 4
    assert ranges[0].lo == BEFORE_ALL and ranges[-1].hi == last
    assert all(a.hi == b.lo for a, b in itertools.pairwise(ranges))
    got = [v for r in ranges for v in await read_all(cfg, r)]
    assert got == values


async def test_entry_reader_hands_over_whole_entries(broker: EmbeddedBroker) -> None:
    """What the official client batched and compressed comes back entry by entry:
    metadata, the decompressed batch, the entry's id; rows as the client sent them."""
    import pulsar

    from magnetar.client.entry_reader import EntryReader
    from magnetar.protocol.message_id import EARLIEST
    from magnetar.spark.entry_rows import EntryRows

    topic = f"persistent://public/default/spark-entries-{uuid.uuid4().hex[:8]}"
    official = pulsar.Client(broker.service_url)
    try:
        producer = official.create_producer(
            topic, batching_enabled=True, batching_max_messages=10,
            batching_max_publish_delay_ms=1000, compression_type=pulsar.CompressionType.LZ4)
        ids: list[pulsar.MessageId] = []
        for i in range(25):
            producer.send_async(f"v{i}".encode(), lambda res, mid: ids.append(mid),
                                partition_key=f"k{i}" if i % 3 else None,
                                properties={"i": str(i)} if i % 2 else {},
                                event_timestamp=1_000 + i if i % 5 else None)
        producer.flush()
    finally:
        official.close()
    assert len(ids) == 25
    async with Client(broker.service_url) as client:
        reader = await EntryReader.create(client, topic, EARLIEST)
        rows = EntryRows(topic)
        entries = []
        while await reader.has_message_available():
            entry = await reader.read_next(10)
            entries.append(entry)
            rows.add(entry)
        await reader.close()
    assert [(e.ledger_id, e.entry_id) for e in entries] == sorted(
        {(m.ledger_id(), m.entry_id()) for m in ids})
    assert all(e.batched and e.metadata.compression for e in entries)
    assert [v for e in entries for _, v in e.messages()] == [f"v{i}".encode() for i in range(25)]
    batch = rows.take().to_pydict()
    assert batch["value"] == [f"v{i}".encode() for i in range(25)]
    assert batch["__key"] == [f"k{i}".encode() if i % 3 else None for i in range(25)]
    assert [dict(p) for p in batch["__messageProperties"]] == [
        {"i": str(i)} if i % 2 else {} for i in range(25)]
    assert [None if t is None else round(t.timestamp() * 1000)
            for t in batch["__eventTime"]] == [1_000 + i if i % 5 else None for i in range(25)]
    assert batch["__messageId"] == [m.serialize() for m in ids]
