"""The streaming reader: offsets per topic partition, micro-batches between them.

An offset maps each topic partition to the key of the last message the query has
covered (see :mod:`magnetar.spark.positions`); a micro-batch reads ``(start, end]`` of
every partition, so consecutive micro-batches neither repeat nor skip a message, and
a query restarted from its checkpoint reads exactly the ranges Spark logged.  The
latest offset comes from GET_LAST_MESSAGE_ID; ``maxEntriesPerTrigger`` caps how many
entries one micro-batch takes.

Spark runs this reader's planning methods in one long-lived Python process on the
driver; what it keeps there (a client, probes, the durable subscription) is never
pickled: executors get a fresh reader and read their :class:`TopicRange` alone.

Retention: the reader holds a durable subscription on every topic partition,
positioned at the query's start, and :meth:`commit` acknowledges (cumulatively) what
Spark has committed, so the broker may delete it and keeps everything after it.  The
subscription is ``predefinedSubscription`` if given (kept when the query stops, so it
holds the backlog across restarts), else ``<subscriptionPrefix>-<random>``, removed
when the query stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from magnetar.client import Client, Consumer
from magnetar.protocol.message_id import EARLIEST, MessageId
from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.options import SourceConfig
from magnetar.spark.planning import Planner, TopicRange
from magnetar.spark.positions import (
    BEFORE_ALL,
    WHOLE_ENTRY,
    Key,
    offsets_from_dict,
    offsets_to_dict,
)
from magnetar.spark.reading import DATA_LOSS_HINT, DataLossError, read_range
from magnetar.spark.retry import retrying

log = logging.getLogger("magnetar.spark")
R = TypeVar("R")


class StreamSession:
    """The driver-side state of one streaming query (lives on a background loop)."""

    def __init__(self, client: Client, config: SourceConfig) -> None:
        self.client = client
        self.config = config
        self.planner = Planner(client, config)
        self.subscription = config.subscription or (
            f"{config.subscription_prefix}-{uuid.uuid4().hex[:12]}"
        )
        self._durable: dict[str, Consumer] = {}
        self.cap: dict[str, Key] | None = None  # Trigger.AvailableNow's target

    async def hold(self, start: dict[str, Key]) -> None:
        """Subscribe (durably) to partitions not held yet, at their start offsets."""
        new = [t for t in start if t not in self._durable]

        async def subscribe(topic: str) -> None:
            consumer = await self.client.subscribe(
                topic, self.subscription, subscription_type="exclusive",
                initial_position="earliest", receiver_queue_size=1,
            )
            lo = start[topic]
            try:
                await consumer.seek(EARLIEST if lo == BEFORE_ALL
                                    else MessageId(lo[0], lo[1], -1))
            except BaseException:
                await consumer.close()  # else the retry's subscription finds it busy
                raise
            self._durable[topic] = consumer

        await asyncio.gather(*(subscribe(t) for t in new))

    async def latest(self, start: dict[str, Key], limit: ReadLimit) -> dict[str, Key]:
        topics = await self.planner.partitions()
        await self.hold({t: start.get(t, BEFORE_ALL) for t in topics})
        last = await self.planner.last_keys(topics)
        if self.cap is not None:
            last = {t: min(k, self.cap[t]) for t, k in last.items() if t in self.cap}
        end = dict(start)
        for topic, top in last.items():
            lo = start.get(topic, BEFORE_ALL)  # a new partition starts at the earliest
            if top < lo:
                self._lost(f"{topic}: its last message {top} is before the query's "
                           f"offset {lo}")
                continue
            end[topic] = top
        if isinstance(limit, ReadMaxRows):
            end = await self.planner.capped_ends(start, end, limit.max_rows)
        max_bytes = (limit.max_bytes if isinstance(limit, ReadMaxBytes)
                     else self.config.max_bytes_per_trigger if isinstance(limit, ReadMaxRows)
                     else None)
        if max_bytes:
            entries = await self.planner.entries_in_bytes(start, end, max_bytes)
            end = await self.planner.capped_ends(start, end, entries)
        return end

    async def commit(self, end: dict[str, Key]) -> None:
        """Let the broker reclaim what the query has covered (entries wholly read)."""
        for topic, key in end.items():
            consumer = self._durable.get(topic)
            entry = key[1] if key[2] == WHOLE_ENTRY else key[1] - 1
            if consumer is None or key == BEFORE_ALL or entry < 0:
                continue
            try:
                await consumer.acknowledge_cumulative(MessageId(key[0], entry, -1))
                await consumer.flush_acks()
            except Exception as exc:  # retention only: never fail the query for it
                log.warning("commit of %s up to %s failed: %s", topic, key, exc)

    def _lost(self, what: str) -> None:
        if self.config.fail_on_data_loss:
            raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
        log.warning("%s; going on (failOnDataLoss is false)", what)

    async def run(self, work: Callable[[StreamSession], Coroutine[Any, Any, R]]) -> R:
        """``work(self)``, retried across a broker outage within ``operationTimeoutMs``;
        a failed attempt's probes are dropped (their next use opens new ones), the
        durable subscriptions reconnect by themselves."""
        async def dropped(exc: BaseException) -> None:
            await self.planner.close()

        return await retrying(lambda: work(self), timeout=self.config.client.operation_timeout,
                              what="the pulsar source's offset query", on_failure=dropped)

    async def close(self) -> None:
        consumers = list(self._durable.values())
        self._durable.clear()
        owned = self.config.subscription is None
        await asyncio.gather(*((c.unsubscribe() if owned else c.close()) for c in consumers),
                             return_exceptions=True)
        await self.planner.close()
        await self.client.close()


class PulsarStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
    """``spark.readStream.format("pulsar")``."""

    def __init__(self, config: SourceConfig) -> None:
        self.config = config
        self._loop: BackgroundLoop | None = None
        self._session: StreamSession | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "_loop": None, "_session": None}

    def _run(self, work: Callable[[StreamSession], Coroutine[Any, Any, R]]) -> R:
        """Run ``work(session)`` on the session's loop (both made on first use)."""
        if self._loop is None:
            self._loop = BackgroundLoop()

        async def start() -> StreamSession:
            return StreamSession(self.config.client.connect(), self.config)

        if self._session is None:
            self._session = self._loop.run(start())
            self._stop_on_sigterm()
        return self._loop.run(self._session.run(work))

    def _stop_on_sigterm(self) -> None:
        """Spark ends this planner process with SIGTERM when the query stops, without
        calling :meth:`stop` (PySpark 4.3): stop then, so that the query's own
        subscription does not outlive it."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
            return  # somebody else's handler: leave it alone

        def on_term(signum: int, frame: object) -> None:
            try:
                self.stop()
            finally:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, on_term)

    def initialOffset(self) -> dict[str, Any]:
        async def initial(s: StreamSession) -> dict[str, Key]:
            topics = await s.planner.partitions()
            last = await s.planner.last_keys(topics)
            return await s.planner.start_keys(topics, last)

        return offsets_to_dict(self._run(initial))

    def getDefaultReadLimit(self) -> ReadLimit:
        per_trigger = self.config.max_entries_per_trigger
        if per_trigger:
            return ReadMaxRows(per_trigger)  # and maxBytesPerTrigger, if given, too
        max_bytes = self.config.max_bytes_per_trigger
        return ReadMaxBytes(max_bytes) if max_bytes else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offsets_from_dict(start)
        return offsets_to_dict(self._run(lambda s: s.latest(begin, limit)))

    def reportLatestOffset(self) -> dict[str, Any] | None:
        async def report(s: StreamSession) -> dict[str, Key]:
            return await s.planner.last_keys(await s.planner.partitions())

        return offsets_to_dict(self._run(report))

    def prepareForTriggerAvailableNow(self) -> None:
        async def prepare(s: StreamSession) -> None:
            s.cap = await s.planner.last_keys(await s.planner.partitions())

        self._run(prepare)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        lo, hi = offsets_from_dict(start), offsets_from_dict(end)
        ranges = [
            TopicRange(t, lo.get(t, BEFORE_ALL), k) for t, k in sorted(hi.items())
            if lo.get(t, BEFORE_ALL) < k
        ]
        if not ranges:
            return []
        return list(self._run(lambda s: s.planner.split(ranges)))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.config, partition)

    def commit(self, end: dict[str, Any]) -> None:
        done = offsets_from_dict(end)
        self._run(lambda s: s.commit(done))

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            if self._session is not None:
                self._loop.run(self._session.close())
        finally:
            self._session = None
            self._loop.close()
            self._loop = None
