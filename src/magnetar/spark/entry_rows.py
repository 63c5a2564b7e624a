"""Entries to Arrow columns: the source's rows, gathered entry by entry.

A reader hands over whole entries (:class:`magnetar.client.entry_reader.Entry`); each
goes into the column lists in one pass: a batched entry is cut once
(:func:`magnetar.protocol.batch.split_batch`), its values, keys, properties and event
times appended; its publish time, topic and the serialised id's entry part are made
once per entry, and ``__messageId`` for the whole index range at once (the entry's
prefix followed by each index's cached suffix).  No message object, no per-message
``await``.  :meth:`EntryRows.take` builds the record batch, each column by Arrow from
one list.
"""

from __future__ import annotations

from itertools import repeat

import pyarrow as pa

from magnetar.client.entry_reader import Entry
from magnetar.protocol.batch import split_batch
from magnetar.protocol.message_id import MessageId
from magnetar.spark.rows import PROPERTIES, PUBLISH_TIME, arrow_schema


def id_prefix(ledger: int, entry: int, partition: int) -> bytes:
    """The serialised ``MessageIdData`` of an entry: fields 1-3 (ledger, entry,
    partition); a message's batch fields follow (protobuf writes fields in order)."""
    return MessageId(ledger, entry, -1, partition).serialize()


def id_suffix(batch_index: int, batch_size: int) -> bytes:
    """The batch fields (4: index, 6: size) of a serialised ``MessageIdData``."""
    whole = MessageId(0, 0, batch_index, -1, batch_size).serialize()
    return whole[len(MessageId(0, 0, -1, -1).serialize()):]


_EMPTY: dict[str, str] = {}  # never changed: shared by rows without properties


class EntryRows:
    """The rows of one topic partition for one record batch, gathered entry by entry."""

    def __init__(self, topic: str, partition: int = -1) -> None:
        self.topic = topic
        self._partition = partition
        self._suffixes: dict[int, list[bytes]] = {}
        self._reset()

    def _reset(self) -> None:
        self._values: list[bytes] = []
        self._keys: list[str | None] = []
        self._ids: list[bytes] = []
        self._publish: list[int] = []
        self._events: list[int | None] = []
        self._props: list[dict[str, str]] = []
        self._plain = True  # no key, property or event time in any row so far

    def __len__(self) -> int:
        return len(self._values)

    def _suffixes_of(self, size: int) -> list[bytes]:
        table = self._suffixes.get(size)
        if table is None:
            table = self._suffixes[size] = [id_suffix(i, size) for i in range(size)]
        return table

    def add(self, entry: Entry, first: int = 0, stop: int | None = None) -> int:
        """Add the messages of ``entry`` whose batch indexes are in ``[first, stop)``
        (all by default; an entry that is no batch has the one index 0); returns how
        many were added."""
        meta = entry.metadata
        prefix = id_prefix(entry.ledger_id, entry.entry_id, self._partition)
        base = len(self._values)
        if not meta.HasField("num_messages_in_batch"):
            if first > 0 or stop == 0:
                return 0
            self._values.append(entry.payload)
            self._ids.append(prefix)
            self._publish.append(meta.publish_time)
            key = meta.partition_key if meta.HasField("partition_key") else None
            event = meta.event_time if meta.HasField("event_time") else None
            properties = {kv.key: kv.value for kv in meta.properties}
            if self._plain and (key is not None or event is not None or properties):
                self._by_row(base)
            if not self._plain:
                self._keys.append(key)
                self._events.append(event)
                self._props.append(properties)
            return 1
        size = meta.num_messages_in_batch
        stop = size if stop is None else min(stop, size)
        if stop <= first:
            return 0
        items = split_batch(entry.payload, size)
        if first or stop < size:
            items = items[first:stop]
        self._values.extend([value for _, value in items])
        self._ids.extend([prefix + s for s in self._suffixes_of(size)[first:stop]])
        self._publish.extend(repeat(meta.publish_time, len(items)))
        if self._plain:
            # Most messages carry no key, property or event time: while none has, the
            # three columns are not kept row by row at all.
            for single, _ in items:
                if (single.HasField("partition_key") or single.HasField("event_time")
                        or single.properties):
                    self._by_row(base)
                    break
            else:
                return len(items)
        keys, events, props = self._keys, self._events, self._props
        for single, _ in items:
            keys.append(single.partition_key if single.HasField("partition_key") else None)
            events.append(single.event_time if single.HasField("event_time") else None)
            props.append({kv.key: kv.value for kv in single.properties})
        return len(items)

    def _by_row(self, rows: int) -> None:
        """From now on keep keys, event times and properties row by row; the ``rows``
        rows before had none."""
        self._keys.extend(repeat(None, rows))
        self._events.extend(repeat(None, rows))
        self._props.extend(repeat(_EMPTY, rows))
        self._plain = False

    def take(self) -> pa.RecordBatch:
        """The gathered rows as a record batch; the buffer starts afresh."""
        schema = arrow_schema()
        n = len(self._values)
        stamp = schema.field(PUBLISH_TIME).type
        publish = pa.array(self._publish, pa.int64())
        if self._plain:
            keys = pa.nulls(n, pa.binary())
            events = pa.nulls(n, stamp)
            props = pa.MapArray.from_arrays(
                pa.array(repeat(0, n + 1), pa.int32(), size=n + 1), pa.array([], pa.string()),
                pa.array([], pa.string()), type=schema.field(PROPERTIES).type)
        else:
            keys = pa.array(self._keys, pa.string()).cast(pa.binary())
            events = _stamps(pa.array(self._events, pa.int64()), stamp)
            props = pa.array(self._props, schema.field(PROPERTIES).type)
        columns = [
            pa.array(self._values, pa.binary()),
            keys,
            pa.array(repeat(self.topic, n), pa.string(), size=n),
            pa.array(self._ids, pa.binary()),
            _stamps(publish, stamp),
            events,
            props,
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _stamps(millis: pa.Array, stamp: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as Spark's timestamps (microseconds)."""
    import pyarrow.compute as pc

    return pc.multiply(millis, 1000).cast(stamp)
