"""Executor-side writing: a task's rows sent to their topics, at least once.

Each task opens its own client and one batching, compressing producer per topic it
writes to, keeps at most ``maxPendingMessages`` sends in flight, and returns only
once every message has its receipt.  A failed send fails the task, and Spark runs it
again: rows may then be written twice (at-least-once, as pulsar-spark), never lost.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from magnetar.client import Client, MessageId, Producer
from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.options import SinkConfig
from magnetar.spark.rows import OutgoingRow, rows_to_send


@dataclass
class SentMessages(WriterCommitMessage):  # type: ignore[misc]
    """What a task reports to the driver: how many messages it had receipted."""

    count: int


def write_batches(config: SinkConfig, batches: Iterable[pa.RecordBatch]) -> SentMessages:
    """Send every row of ``batches``; returns once all are receipted."""
    with BackgroundLoop() as loop:
        sender = Sender(config)
        try:
            for batch in batches:
                if batch.num_rows:
                    loop.run(sender.send(rows_to_send(batch)))
            loop.run(sender.finish())
        finally:
            loop.run(sender.close())
    return SentMessages(sender.count)


class Sender:
    """The producers of one task (runs on the background loop)."""

    def __init__(self, config: SinkConfig) -> None:
        self._config = config
        self._client: Client | None = None
        self._producers: dict[str, Producer] = {}
        self._pending: deque[asyncio.Future[MessageId]] = deque()
        self.count = 0

    async def _producer(self, topic: str) -> Producer:
        producer = self._producers.get(topic)
        if producer is None:
            if self._client is None:
                self._client = self._config.client.connect()
            c = self._config
            producer = await self._client.create_producer(
                topic, batching=c.batching, batching_max_messages=c.batching_max_messages,
                batching_max_delay=c.batching_max_delay, compression=c.compression,
                max_pending_messages=c.max_pending_messages, send_timeout=c.send_timeout,
            )
            self._producers[topic] = producer
        return producer

    async def send(self, rows: list[OutgoingRow]) -> None:
        default_topic = self._config.topic
        pending = self._pending
        limit = self._config.max_pending_messages
        for value, key, properties, event_time, row_topic in rows:
            topic = default_topic or row_topic
            if not topic:
                raise ValueError("a row has no '__topic' and the option 'topic' is not set")
            producer = self._producers.get(topic) or await self._producer(topic)
            pending.append(producer.send_async(
                value, key=key, properties=properties, event_time=event_time))
            while len(pending) >= limit:
                await self._settle_one()

    async def _settle_one(self) -> None:
        await self._pending.popleft()  # raises the send's error, failing the task
        self.count += 1

    async def finish(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._producers.values()))
        while self._pending:
            await self._settle_one()

    async def close(self) -> None:
        for future in self._pending:
            future.cancel()
        if self._client is not None:
            await self._client.close()
