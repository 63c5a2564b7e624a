"""Rows to entries: a write task's Arrow rows built into Pulsar batches, compressed,
ready to send whole (``Producer.send_entry_async``), one entry per batch.

A batch is what a batching producer would send: ``[u32 size][SingleMessageMetadata]
[value]`` per message, each message's key, properties and event time in its own
metadata, compressed as a whole; consumers read it as any batch.  Rows are cut into
batches of at most ``max_messages`` messages and about ``max_bytes`` bytes.

The batch is built by Arrow, not row by row in Python: each row's ``[u32 size]
[metadata]`` header is an element of a header column, joined element-wise with the
values column, and the joined column's data buffer *is* the batches' bytes, cut at
its offsets.  The metadata is written here as protobuf writes it (fields in number
order: properties 1, partition_key 2, payload_size 3, event_time 5).  Rows without a
key, properties or event time (the common case) share one header per value length,
taken from a small table; only rows with those pay a Python header each.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from magnetar.protocol.compression import compress, compression_type
from magnetar.protocol.varint import varint
from magnetar.spark.rows import EVENT_TIME, KEY, PROPERTIES, as_text

_U32 = struct.Struct(">I")
_EMPTY = pa.scalar(b"", pa.binary())
_EMPTY_LARGE = pa.scalar(b"", pa.large_binary())
_MS_PER = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One entry to send: its payload, its message count, how it was compressed."""

    payload: bytes
    num_messages: int
    compression: tuple[int, int] | None  # (kind, uncompressed size)
    key: str | None  # the first message's, the entry's as a batching producer sets it


@dataclass(frozen=True, slots=True)
class RowMetadata:
    """Each row's key, properties and event time (ms); a field is None when no row of
    the batch has one."""

    keys: list[str | None] | None = None
    properties: list[Mapping[str, str] | None] | None = None
    event_times: list[int | None] | None = None

    @property
    def empty(self) -> bool:
        return self.keys is None and self.properties is None and self.event_times is None


def row_metadata(batch: pa.RecordBatch) -> RowMetadata:
    """The metadata columns of ``batch`` (a column absent or all null is None)."""
    names = batch.schema.names

    def column(name: str) -> pa.Array | None:
        if name not in names:
            return None
        array = batch.column(name)
        return None if array.null_count == len(array) else array

    keys = column(KEY)
    props = column(PROPERTIES)
    events = column(EVENT_TIME)
    return RowMetadata(
        keys=None if keys is None else [as_text(k) for k in keys.to_pylist()],
        properties=None if props is None else [
            None if p is None else dict(p) for p in props.to_pylist()],
        event_times=None if events is None else event_millis(events),
    )


def event_millis(column: pa.Array) -> list[int | None]:
    """Milliseconds since the epoch from a timestamp column (or a column of longs,
    taken as milliseconds already)."""
    if pa.types.is_timestamp(column.type):
        per_ms = _MS_PER[column.type.unit]
        raw = pc.cast(column, pa.int64()).to_pylist()
        return [None if v is None else int(v // per_ms) for v in raw]
    if pa.types.is_integer(column.type):
        return column.to_pylist()  # type: ignore[no-any-return]
    raise ValueError(f"'{EVENT_TIME}' must be a timestamp or milliseconds, not {column.type}")


def header(size: int, key: str | None = None, properties: Mapping[str, str] | None = None,
           event_time: int | None = None) -> bytes:
    """``[u32 length][SingleMessageMetadata]`` of one message of ``size`` bytes."""
    parts: list[bytes] = []
    if properties:
        for name, value in properties.items():
            if value is None:
                raise ValueError(f"the message property {name!r} has a null value")
            k, v = name.encode(), value.encode()
            pair = b"".join((b"\x0a", varint(len(k)), k, b"\x12", varint(len(v)), v))
            parts += (b"\x0a", varint(len(pair)), pair)
    if key is not None:
        k = key.encode()
        parts += (b"\x12", varint(len(k)), k)
    parts += (b"\x18", varint(size))
    if event_time is not None:
        if event_time < 0:
            raise ValueError(f"an event time before 1970 ({event_time} ms) cannot be sent")
        parts += (b"\x28", varint(event_time))
    meta = b"".join(parts)
    return _U32.pack(len(meta)) + meta


def _headers(lengths: pa.Array, meta: RowMetadata) -> pa.Array:
    if meta.empty:
        # One header per distinct length, looked up for every row by Arrow.
        distinct = pc.unique(lengths)
        table = pa.array([header(n) for n in distinct.to_pylist()], pa.binary())
        return table.take(pc.index_in(lengths, value_set=distinct))
    n = len(lengths)
    keys = meta.keys or [None] * n
    props = meta.properties or [None] * n
    events = meta.event_times or [None] * n
    return pa.array([header(*row) for row in zip(lengths.to_pylist(), keys, props, events,
                                                  strict=True)], pa.binary())


def _as_binary(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type):
        return values.cast(pa.binary())
    if pa.types.is_large_string(values.type):
        return values.cast(pa.large_binary())
    if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
        return values
    raise ValueError(f"values to write must be binary or string, not {values.type}")


def _offsets(array: pa.Array) -> tuple[memoryview, pa.Buffer]:
    """A binary array's row offsets into its data (one more than its rows), and the
    data buffer."""
    _, offsets, data = array.buffers()
    first = array.offset
    view = memoryview(offsets).cast("q" if pa.types.is_large_binary(array.type) else "i")
    return view[first:first + len(array) + 1], data


def batch_entries(values: pa.Array, meta: RowMetadata, compression: str | None,
                  max_messages: int, max_bytes: int = 128 * 1024) -> Iterator[BatchEntry]:
    """``values`` (one topic's payloads, no nulls) with their rows' ``meta`` as batch
    entries, in order."""
    total = len(values)
    if not total:
        return
    if values.null_count:
        raise ValueError("a row to write has a null 'value'")
    values = _as_binary(values)
    large = pa.types.is_large_binary(values.type)
    headers = _headers(pc.binary_length(values), meta)
    if large:
        headers = headers.cast(pa.large_binary())
    joined = pc.binary_join_element_wise(headers, values, _EMPTY_LARGE if large else _EMPTY)
    offsets, data = _offsets(joined)
    sizes = _offsets(values)[0]  # the cut counts the values' bytes, as a producer does
    kind = compression_type(compression) if compression else 0
    keys = meta.keys
    start = 0
    while start < total:
        limit = min(total, start + max_messages)
        # The first row that brings the batch to max_bytes ends it (a lone row may be
        # larger); offsets are cumulative, so a binary search finds it.
        stop = min(bisect_left(sizes, sizes[start] + max_bytes, start + 1, limit + 1), limit)
        batch = data[offsets[start]:offsets[stop]].to_pybytes()
        key = keys[start] if keys is not None else None
        if kind:
            yield BatchEntry(compress(kind, batch), stop - start, (kind, len(batch)), key)
        else:
            yield BatchEntry(batch, stop - start, None, key)
        start = stop

