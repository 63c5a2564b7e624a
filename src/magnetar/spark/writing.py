"""Executor-side writing: a task's rows sent to their topics, at least once.

Each task opens its own client and one producer per topic it writes to, builds its
rows into compressed batches itself, from Arrow (:mod:`magnetar.spark.row_entries`),
and sends each as one entry (a partitioned topic's rows, or with batching off, go message by
message), keeps about ``maxPendingMessages`` messages in flight, and returns only
once every message has its receipt.  A failed send fails the task, and Spark runs it
again: rows may then be written twice (at-least-once, as pulsar-spark), never lost.

The value columns are encoded with each topic's schema, asked of the broker when the
task first writes to it; a topic without one gets the schema the columns make
(:mod:`magnetar.spark.topic_schema`).  The producer attaches with that schema, so the
broker checks it as it checks any producer's (IncompatibleSchema fails the task).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from magnetar.client import Client, MessageId, Producer
from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.options import SinkConfig
from magnetar.spark.row_entries import batch_entries, row_metadata
from magnetar.spark.rows import TOPIC, VALUE, as_text, rows_to_send
from magnetar.spark.topic_schema import ValueEncoder, is_raw, schema_for_columns


@dataclass
class SentMessages(WriterCommitMessage):  # type: ignore[misc]
    """What a task reports to the driver: how many messages it had receipted."""

    count: int


def write_batches(config: SinkConfig, batches: Iterable[pa.RecordBatch]) -> SentMessages:
    """Send every row of ``batches``; returns once all are receipted."""
    with BackgroundLoop() as loop:
        sender = Sender(config)
        sending: concurrent.futures.Future[None] | None = None
        try:
            for batch in batches:
                if batch.num_rows:
                    # Spark's thread takes the next record batch off its stream while
                    # the loop sends this one and waits for receipts; sends stay in order.
                    if sending is not None:
                        sending.result()
                    sending = loop.submit(sender.send(batch))
            if sending is not None:
                sending.result()
            loop.run(sender.finish())
        finally:
            if sending is not None:
                sending.cancel()
            loop.run(sender.close())
    return SentMessages(sender.count)


class Sender:
    """The producers of one task (runs on the background loop)."""

    def __init__(self, config: SinkConfig) -> None:
        self._config = config
        self._client: Client | None = None
        self._producers: dict[str, tuple[Producer, ValueEncoder]] = {}
        # Sends awaiting their receipt, each with the number of messages it carries.
        self._pending: deque[tuple[asyncio.Future[MessageId], int]] = deque()
        self._in_flight = 0
        self.count = 0

    async def _producer(self, topic: str) -> tuple[Producer, ValueEncoder]:
        known = self._producers.get(topic)
        if known is None:
            if self._client is None:
                self._client = self._config.client.connect()
            c = self._config
            columns = c.values.fieldNames() if c.values is not None else [VALUE]
            schema = await self._client.get_schema(topic)
            if is_raw(schema) and c.values is not None:
                schema = schema_for_columns(c.values.fields)
            encoder = ValueEncoder(schema, columns)
            producer = await self._client.create_producer(
                topic, batching=c.batching, batching_max_messages=c.batching_max_messages,
                batching_max_delay=c.batching_max_delay, compression=c.compression,
                max_pending_messages=c.max_pending_messages, send_timeout=c.send_timeout,
                schema=None if is_raw(schema) else schema,
            )
            known = self._producers[topic] = (producer, encoder)
        return known

    async def send(self, batch: pa.RecordBatch) -> None:
        default_topic = self._config.topic
        if default_topic:
            groups = {default_topic: batch}
        else:
            topics = [as_text(t) for t in batch.column(TOPIC).to_pylist()]
            if not all(topics):
                raise ValueError("a row has no '__topic' and the option 'topic' is not set")
            rows_of: dict[str, list[int]] = {}
            for i, topic in enumerate(topics):
                rows_of.setdefault(topic, []).append(i)  # type: ignore[arg-type]
            groups = {t: batch.take(pa.array(rows)) for t, rows in rows_of.items()}
        for topic, part in groups.items():
            producer, encoder = self._producers.get(topic) or await self._producer(topic)
            if self._config.batching and producer.num_partitions == 0:  # not partitioned
                await self._send_entries(producer, encoder, part)
            else:
                await self._send_messages(producer, encoder, part)

    async def _send_entries(self, producer: Producer, encoder: ValueEncoder,
                            part: pa.RecordBatch) -> None:
        """Rows as whole batch entries, built here (a send per batch, not per message;
        a partitioned topic's rows go message by message, routed by the producer)."""
        c = self._config
        for entry in batch_entries(encoder.encode_array(part), row_metadata(part),
                                   c.compression, c.batching_max_messages):
            future = producer.send_entry_async(
                entry.payload, num_messages=entry.num_messages, key=entry.key,
                compression=entry.compression)
            await self._track(future, entry.num_messages)

    async def _send_messages(self, producer: Producer, encoder: ValueEncoder,
                             part: pa.RecordBatch) -> None:
        for value, key, properties, event_time, _ in rows_to_send(part, encoder.encode(part)):
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
        await asyncio.gather(*(p.flush() for p, _ in self._producers.values()))
        while self._pending:
            await self._settle_one()

    async def close(self) -> None:
        for future, _ in self._pending:
            future.cancel()
        if self._client is not None:
            await self._client.close()

