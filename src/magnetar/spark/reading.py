"""Executor-side reading: the messages of one :class:`TopicRange`, as record batches.

A task knows nothing but its range and the source's options (both pickled to it): it
opens its own client and an entry reader positioned at the entry holding ``lo``, keeps
the messages whose keys lie in ``(lo, hi]`` (an entry's at once, see
:mod:`magnetar.spark.entry_rows`) and stops at the first entry past ``hi``.  The
client's loop runs on a background thread, which decodes the next chunk while Spark
converts the last one.  A broker outage is retried (:mod:`magnetar.spark.retry`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa

from magnetar.client import Client
from magnetar.client.entry_reader import EntryReader
from magnetar.client.errors import TimeoutError
from magnetar.spark._loop import BackgroundLoop
from magnetar.spark.entry_rows import EntryRows
from magnetar.spark.options import SourceConfig
from magnetar.spark.planning import TopicRange
from magnetar.spark.positions import BEFORE_ALL, WHOLE_ENTRY, Key, seek_id
from magnetar.spark.retry import retrying

log = logging.getLogger("magnetar.spark")

# How long one wait for a message lasts before the reader asks the broker whether
# anything is left to come at all.
_RECHECK_SECONDS = 1.0

DATA_LOSS_HINT = (
    "Some data may have been lost because it is not available in Pulsar any more: it was "
    "removed by retention, or the topic was deleted or truncated before it was read. "
    "Set the source option 'failOnDataLoss' to 'false' to go on without it."
)


class DataLossError(RuntimeError):
    """Messages the query should read are gone."""


class PollTimeout(RuntimeError):
    """The broker has messages for the range but sent none within ``pollTimeoutMs``
    (not retried: the reader waited that long already)."""


def read_range(config: SourceConfig, part: object) -> Iterator[pa.RecordBatch]:
    """The record batches of ``part`` (nothing for Spark's placeholder partition)."""
    if not isinstance(part, TopicRange) or part.lo >= part.hi:
        return
    with BackgroundLoop() as loop:
        reader = RangeReader(config, part)
        future = None
        try:
            future = loop.submit(reader.next_batch())
            while True:
                batch = future.result()
                if batch is None:
                    return
                future = loop.submit(reader.next_batch())
                yield batch
        finally:
            if future is not None:
                future.cancel()
            loop.run(reader.close())


class RangeReader:
    """Reads one range with its own client (runs on the background loop), entry by
    entry: each entry's messages inside the range go into the columns at once.

    A retriable failure (the broker went away, a lookup timed out) closes the client
    and opens a new reader at the last message read, retried with backoff within
    ``operationTimeoutMs`` (see :mod:`magnetar.spark.retry`): a broker restart
    costs the task a wait, not its rows."""

    def __init__(self, config: SourceConfig, part: TopicRange) -> None:
        self._client: Client | None = None
        self._reader: EntryReader | None = None
        self._config = config
        self._part = part
        self._rows = EntryRows(part.topic, part.partition)
        self._done = False
        self._first = True
        self._floor = part.lo  # keys up to here are read (or before the range)
        self._waited = 0.0  # seconds spent waiting for messages the broker has

    @classmethod
    async def open(cls, config: SourceConfig, part: TopicRange) -> RangeReader:
        """A reader of ``part``, connected now (``next_batch`` connects otherwise)."""
        reader = cls(config, part)
        await reader._open()
        return reader

    async def _open(self) -> EntryReader:
        """The reader, opened (again) at the entry holding ``_floor``."""
        if self._reader is not None:
            return self._reader
        config, part = self._config, self._part
        client = self._client = config.client.connect()
        self._reader = await EntryReader.create(
            client, part.topic, seek_id(self._floor, part.partition),
            start_message_id_inclusive=True,
            receiver_queue_size=max(2, config.receiver_queue_size // 10),
            subscription_role_prefix=config.subscription_prefix,
        )
        return self._reader

    async def _drop(self, exc: BaseException | None = None) -> None:
        """Forget the client and reader (after a failure: the next attempt reopens)."""
        client, self._client, self._reader = self._client, None, None
        if client is not None:
            await client.close()

    async def next_batch(self) -> pa.RecordBatch | None:
        """About ``rowsPerBatch`` rows (whole entries); ``None`` once the range is done."""
        await retrying(self._fill, timeout=self._config.client.operation_timeout,
                       what=f"reading {self._part.topic}", on_failure=self._drop)
        rows = self._rows
        return rows.take() if len(rows) else None

    async def _fill(self) -> None:
        """Add entries' rows until there are ``rowsPerBatch`` or the range is done."""
        hi = self._part.hi
        rows = self._rows
        read = (await self._open()).read_next
        wanted = self._config.rows_per_batch
        while len(rows) < wanted and not self._done:
            try:
                entry = await read(_RECHECK_SECONDS)
            except TimeoutError:
                self._done = await self._ends_early()
                continue
            if self._waited:
                self._waited = 0.0  # pollTimeoutMs is per message
            position = (entry.ledger_id, entry.entry_id)
            meta = entry.metadata
            batched = meta.HasField("num_messages_in_batch")
            if self._first:
                self._first = False
                self._check_start((*position, 0 if batched else WHOLE_ENTRY))
            if position > hi[:2]:
                self._done = True
                break
            floor = self._floor
            if position < floor[:2] or (position == floor[:2] and floor[2] == WHOLE_ENTRY):
                continue  # read already, or before the range
            if not batched:
                rows.add(entry)
                self._floor = (*position, WHOLE_ENTRY)
            else:
                size = meta.num_messages_in_batch
                first = floor[2] + 1 if position == floor[:2] else 0
                stop = min(size, hi[2] + 1) if position == hi[:2] else size
                if first < stop:
                    rows.add(entry, first, stop)
                    self._floor = (*position, stop - 1)
            if position == hi[:2]:
                self._done = True  # every message of the range in this entry is read

    async def _ends_early(self) -> bool:
        """After a wait for a message: whether the topic ends before the range does (no
        more messages at all), which is data loss. Fails past ``pollTimeoutMs``."""
        assert self._reader is not None
        if not await self._reader.has_message_available():
            self._lost(f"{self._part.topic} ended before {self._part.hi} was read")
            return True
        self._waited += _RECHECK_SECONDS
        if self._waited >= self._config.poll_timeout:
            raise PollTimeout(
                f"{self._part.topic}: no message within pollTimeoutMs "
                f"({self._config.poll_timeout:.0f}s) although the broker has more"
            )
        return False

    def _check_start(self, key: Key) -> None:
        """Entries of a ledger are numbered without gaps: a first message further on in
        ``lo``'s ledger than the entry after ``lo`` means entries went missing."""
        lo = self._part.lo
        if lo != BEFORE_ALL and key[0] == lo[0] and key[1] > lo[1] + 1:
            self._lost(f"{self._part.topic}: the range starts after {lo} but the first "
                       f"message there is {key}")

    def _lost(self, what: str) -> None:
        if self._config.fail_on_data_loss:
            raise DataLossError(f"{what}. {DATA_LOSS_HINT}")
        log.warning("%s; going on (failOnDataLoss is false)", what)

    async def close(self) -> None:
        await self._drop()
