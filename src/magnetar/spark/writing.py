"""Executor-side writing: a task's rows sent to their topics, at least once.

Each task opens its own client and one producer per topic it writes to, builds its
rows into compressed batches itself (:mod:`magnetar.spark.entry_batches`) and sends
each as one entry (a partitioned topic's rows, or with batching off, go message by
message), keeps about ``maxPendingMessages`` messages in flight, and returns only
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
from magnetar.spark.entry_batches import batch_entries
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
        # Sends awaiting their receipt, each with the number of messages it carries.
        self._pending: deque[tuple[asyncio.Future[MessageId], int]] = deque()
        self._in_flight = 0
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
        by_topic: dict[str, list[OutgoingRow]] = {}
        for row in rows:
            topic = default_topic or row[4]
            if not topic:
                raise ValueError("a row has no '__topic' and the option 'topic' is not set")
            by_topic.setdefault(topic, []).append(row)
        for topic, part in by_topic.items():
            producer = self._producers.get(topic) or await self._producer(topic)
            if self._config.batching and producer.num_partitions == 0:  # not partitioned
                await self._send_entries(producer, part)
            else:
                await self._send_messages(producer, part)

    async def _send_entries(self, producer: Producer, rows: list[OutgoingRow]) -> None:
        """Rows as whole batch entries, built here (a send per batch, not per message;
        a partitioned topic's rows go message by message, routed by the producer)."""
        c = self._config
        for entry in batch_entries(rows, c.compression, c.batching_max_messages):
            future = producer.send_entry_async(
                entry.payload, num_messages=entry.num_messages, key=entry.key,
                compression=entry.compression)
            await self._track(future, entry.num_messages)

    async def _send_messages(self, producer: Producer, rows: list[OutgoingRow]) -> None:
        for value, key, properties, event_time, _ in rows:
            future = producer.send_async(value, key=key, properties=properties,
                                         event_time=event_time)
            await self._track(future, 1)

    async def _track(self, future: asyncio.Future[MessageId], messages: int) -> None:
        self._pending.append((future, messages))
        self._in_flight += messages
        # Up to maxPendingMessages messages wait for receipts, and one send more: with
        # batches as large as that limit, the next batch goes out while one is receipted.
        while self._in_flight > self._config.max_pending_messages and self._pending:
            await self._settle_one()

    async def _settle_one(self) -> None:
        future, messages = self._pending.popleft()
        self._in_flight -= messages
        await future  # raises the send's error, failing the task
        self.count += messages

    async def finish(self) -> None:
        await asyncio.gather(*(p.flush() for p in self._producers.values()))
        while self._pending:
            await self._settle_one()

    async def close(self) -> None:
        for future, _ in self._pending:
            future.cancel()
        if self._client is not None:
            await self._client.close()
