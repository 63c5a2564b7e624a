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
