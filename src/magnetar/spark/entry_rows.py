"""Entries to Arrow columns: the source's rows, gathered entry by entry.

A reader hands over whole entries (:class:`magnetar.client.entry_reader.Entry`).  A
*plain* batch (its messages carry values only: :mod:`magnetar.protocol.batch_scan`)
becomes Arrow columns without a Python step per message: its values one ``take`` of
the binary array whose offsets are the batch's spans, its ``__messageId`` column the
entry's id prefix joined to the cached suffixes of every index (one ``bytes.join``).
Any other entry is cut once (:func:`magnetar.protocol.batch.split_batch`) and its
values, keys, properties and event times appended to lists.  Publish time, topic and
the id's entry part are made once per entry; no message object, no per-message
``await``.  :meth:`EntryRows.take` joins the pieces into the record batch; the value
columns are decoded there with the topic's schema, all rows at once
(:func:`magnetar.spark.topic_schema.value_columns`).
"""

from __future__ import annotations

from array import array
from itertools import accumulate, repeat

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.client.entry_reader import Entry
from magnetar.client.schema import SchemaInfo
from magnetar.protocol.batch import split_batch
from magnetar.protocol.batch_scan import PLAIN_METADATA, guess_spans, strided_spans
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.varint import varint
from magnetar.spark.rows import PROPERTIES, PUBLISH_TIME, arrow_schema, arrow_schema_of
from magnetar.spark.topic_schema import is_raw, source_schema, value_columns

_U64 = (1 << 64) - 1


def id_prefix(ledger: int, entry: int, partition: int) -> bytes:
    """The serialised ``MessageIdData`` of an entry: fields 1-3 (ledger, entry,
    partition); a message's batch fields follow (protobuf writes fields in order).
    Written by hand (under half the protobuf object's cost: it is made per row of an
    unbatched topic), as ``MessageId.to_pb`` fills it."""
    head = b"\x08" + varint(ledger & _U64) + b"\x10" + varint(entry & _U64)
    return head + b"\x18" + varint(partition) if partition >= 0 else head


def id_suffix(batch_index: int, batch_size: int) -> bytes:
    """The batch fields (4: index, 6: size) of a serialised ``MessageIdData``."""
    whole = MessageId(0, 0, batch_index, -1, batch_size).serialize()
    return whole[len(MessageId(0, 0, -1, -1).serialize()):]


_EMPTY: dict[str, str] = {}  # never changed: shared by rows without properties

# A batch of fewer messages goes through split_batch: the Arrow calls of the plain path
# cost some 30 us an entry, a few messages' worth of the per-message path.
PLAIN_MIN = 16
_ZERO = pa.scalar(0, pa.int32())


def _indexes(start: int, count: int) -> pa.Array:
    return pa.array(range(start, 2 * count, 2), pa.int32())


class _Cut:
    """The Arrow pieces that cut plain batches of one size: which elements of the
    spans' array are metadata and which are values."""

    __slots__ = ("metas", "values")

    def __init__(self, count: int) -> None:
        self.metas = _indexes(0, count)
        self.values = _indexes(1, count)


def plain_values(payload: bytes, count: int, cut: _Cut) -> pa.Array | None:
    """The values of a plain batch of ``count`` messages as one binary array; ``None``
    when the batch is not plain (or not a batch of ``count`` messages)."""
    spans = strided_spans(payload, count)
    proved = spans is not None
    if spans is None:
        spans = guess_spans(payload, count)
        if spans is None:
            return None
    both = pa.Array.from_buffers(pa.binary(), 2 * count,
                                 [None, pa.py_buffer(spans), pa.py_buffer(payload)])
    if not proved:
        metas = both.take(cut.metas)
        if not pc.all(pc.match_substring_regex(metas, PLAIN_METADATA)).as_py():
            return None
    return both.take(cut.values)


class EntryRows:
    """The rows of one topic partition for one record batch, gathered entry by entry."""

    def __init__(self, topic: str, partition: int = -1,
                 value_schema: SchemaInfo | None = None) -> None:
        self.topic = topic
        self._topic = pa.scalar(topic, pa.string())
        self._partition = partition
        self._value_schema = value_schema
        self._arrow = (arrow_schema() if is_raw(value_schema)
                       else arrow_schema_of(source_schema(value_schema)))
        self._value_count = len(self._arrow) - 6  # the metadata columns are six
        self._suffixes: dict[int, list[bytes]] = {}
        self._cuts: dict[int, _Cut] = {}
        # Per batch size: its ids' suffixes as bytes.join wants them (after b""), and
        # the offsets of the ids per prefix length.
        self._joined: dict[int, list[bytes]] = {}
        self._id_offsets: dict[tuple[int, int], pa.Buffer] = {}
        self._reset()

    def _reset(self) -> None:
        self._count = 0
        self._value_chunks: list[pa.Array] = []  # the columns' pieces so far, in order
        self._id_chunks: list[pa.Array] = []
        self._values: list[bytes] = []  # rows after the last piece
        self._keys: list[str | None] = []
        self._ids: list[bytes] = []
        self._publish: list[int] = []  # publish times (us), one per run of rows (an entry)
        self._publish_ends: list[int] = []  # the row each run ends before
        self._events: list[int | None] = []
        self._props: list[dict[str, str]] = []
        self._plain = True  # no key, property or event time in any row so far

    def __len__(self) -> int:
        return self._count + len(self._values)

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
        base = len(self)
        if not meta.HasField("num_messages_in_batch"):
            if first > 0 or stop == 0:
                return 0
            self._values.append(entry.payload)
            self._ids.append(prefix)
            self._published(meta.publish_time, 1)
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
        if size >= PLAIN_MIN and self._add_plain(entry, prefix, size, first, stop):
            return stop - first
        items = split_batch(entry.payload, size)
        if first or stop < size:
            items = items[first:stop]
        self._values.extend([value for _, value in items])
        self._ids.extend([prefix + s for s in self._suffixes_of(size)[first:stop]])
        self._published(meta.publish_time, len(items))
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

    def _add_plain(self, entry: Entry, prefix: bytes, size: int, first: int,
                   stop: int) -> bool:
        """Add messages ``[first, stop)`` of a batch of ``size`` if it is plain."""
        cut = self._cuts.get(size)
        if cut is None:
            cut = self._cuts[size] = _Cut(size)
        values = plain_values(entry.payload, size, cut)
        if values is None:
            return False
        n = stop - first
        self._piece()
        ids = pa.Array.from_buffers(pa.binary(), size, [
            None, self._id_offsets_of(size, len(prefix)),
            pa.py_buffer(prefix.join(self._joined_of(size)))])
        if n < size:
            values, ids = values.slice(first, n), ids.slice(first, n)
        self._value_chunks.append(values)
        self._id_chunks.append(ids)
        self._count += n
        self._published(entry.metadata.publish_time, n)
        if not self._plain:
            self._keys.extend(repeat(None, n))
            self._events.extend(repeat(None, n))
            self._props.extend(repeat(_EMPTY, n))
        return True

    def _published(self, millis: int, rows: int) -> None:
        """The ``rows`` rows added last were published at ``millis``."""
        micros = millis * 1000  # Spark's timestamps
        ends = self._publish_ends
        end = (ends[-1] if ends else 0) + rows
        if self._publish and self._publish[-1] == micros:
            ends[-1] = end
        else:
            self._publish.append(micros)
            ends.append(end)

    def _joined_of(self, size: int) -> list[bytes]:
        joined = self._joined.get(size)
        if joined is None:
            joined = self._joined[size] = [b"", *self._suffixes_of(size)]
        return joined

    def _id_offsets_of(self, size: int, prefix: int) -> pa.Buffer:
        """Where each id starts in ``prefix.join(joined)``: ``prefix`` bytes and a
        suffix each."""
        offsets = self._id_offsets.get((size, prefix))
        if offsets is None:
            lengths = [prefix + len(s) for s in self._suffixes_of(size)]
            offsets = pa.py_buffer(array("i", accumulate(lengths, initial=0)))
            self._id_offsets[(size, prefix)] = offsets
        return offsets

    def _piece(self) -> None:
        """Make the rows kept in lists a piece of the value and id columns."""
        if self._values:
            self._value_chunks.append(pa.array(self._values, pa.binary()))
            self._id_chunks.append(pa.array(self._ids, pa.binary()))
            self._count += len(self._values)
            self._values, self._ids = [], []

    def _by_row(self, rows: int) -> None:
        """From now on keep keys, event times and properties row by row; the ``rows``
        rows before had none."""
        self._keys.extend(repeat(None, rows))
        self._events.extend(repeat(None, rows))
        self._props.extend(repeat(_EMPTY, rows))
        self._plain = False

    def take(self) -> pa.RecordBatch:
        """The gathered rows as a record batch; the buffer starts afresh."""
        schema = self._arrow
        n = len(self)
        self._piece()
        value_column = _joined(self._value_chunks)
        stamp = schema.field(PUBLISH_TIME).type
        publish = pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(
            pa.array(self._publish_ends, pa.int32()), pa.array(self._publish, pa.int64())
        )).cast(stamp)
        if self._plain:
            keys = pa.nulls(n, pa.binary())
            events = pa.nulls(n, stamp)
            props = pa.MapArray.from_arrays(
                pa.repeat(_ZERO, n + 1), pa.array([], pa.string()),
                pa.array([], pa.string()), type=schema.field(PROPERTIES).type)
        else:
            keys = pa.array(self._keys, pa.string()).cast(pa.binary())
            events = _stamps(pa.array(self._events, pa.int64()), stamp)
            props = pa.array(self._props, schema.field(PROPERTIES).type)
        if is_raw(self._value_schema):
            values = [value_column]
        else:
            values = value_columns(self._value_schema,
                                   pa.schema(list(schema)[:self._value_count]),
                                   value_column.to_pylist())
        columns = [
            *values,
            keys,
            pa.repeat(self._topic, n),
            _joined(self._id_chunks),
            publish,
            events,
            props,
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=schema)


def _joined(chunks: list[pa.Array]) -> pa.Array:
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks) if chunks else pa.array([], pa.binary())


def _stamps(millis: pa.Array, stamp: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as Spark's timestamps (microseconds)."""
    return pc.multiply(millis, 1000).cast(stamp)
