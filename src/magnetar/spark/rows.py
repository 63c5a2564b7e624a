"""The source's columns, and the conversions between messages and Arrow record batches.

The columns are pulsar-spark's: ``value`` (binary) and the metadata ``__key``
(binary), ``__topic``, ``__messageId`` (the serialised ``MessageIdData``, as the
official clients' ``MessageId.serialize()``), ``__publishTime``, ``__eventTime``
(timestamps) and ``__messageProperties`` (map<string,string>).  Readers hand Spark
Arrow record batches, not tuples: Spark's per-row conversion of tuples costs more
than reading the messages.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    BinaryType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.client.message import Message

VALUE = "value"
KEY = "__key"
TOPIC = "__topic"
MESSAGE_ID = "__messageId"
PUBLISH_TIME = "__publishTime"
EVENT_TIME = "__eventTime"
PROPERTIES = "__messageProperties"

SCHEMA = StructType(
    [
        StructField(VALUE, BinaryType(), True),
        StructField(KEY, BinaryType(), True),
        StructField(TOPIC, StringType(), True),
        StructField(MESSAGE_ID, BinaryType(), True),
        StructField(PUBLISH_TIME, TimestampType(), True),
        StructField(EVENT_TIME, TimestampType(), True),
        StructField(PROPERTIES, MapType(StringType(), StringType(), True), True),
    ]
)

# Columns a writer uses; __messageId and __publishTime are the broker's to assign, so
# a read-then-write pipeline may carry them and they are ignored.
WRITE_COLUMNS = {VALUE, KEY, TOPIC, EVENT_TIME, PROPERTIES}
IGNORED_ON_WRITE = {MESSAGE_ID, PUBLISH_TIME}


@cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :data:`SCHEMA` (it checks for equality)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


_U64 = (1 << 64) - 1
_WHOLE_ENTRY = 2**31 - 1  # as magnetar.spark.positions.WHOLE_ENTRY


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


class IdEncoder:
    """``MessageId.serialize()`` for the messages of one topic partition, without a
    protobuf object per message: the bytes of (ledger, entry, partition) are made once
    per entry and the batch fields appended (the protobuf encoding, field by field)."""

    def __init__(self, partition: int) -> None:
        self._partition = b"\x18" + _varint(partition) if partition >= 0 else b""
        self._entry: tuple[int, int] | None = None
        self._prefix = b""
        self._suffixes: dict[tuple[int, int], bytes] = {}

    def __call__(self, ledger: int, entry: int, batch_index: int, batch_size: int) -> bytes:
        if (ledger, entry) != self._entry:
            self._entry = (ledger, entry)
            self._prefix = (b"\x08" + _varint(ledger & _U64) + b"\x10" + _varint(entry & _U64)
                            + self._partition)
        if batch_index < 0 and batch_size <= 0:
            return self._prefix
        suffix = self._suffixes.get((batch_index, batch_size))
        if suffix is None:
            suffix = (b"\x20" + _varint(batch_index) if batch_index >= 0 else b"") + (
                b"\x30" + _varint(batch_size) if batch_size > 0 else b"")
            self._suffixes[(batch_index, batch_size)] = suffix
        return self._prefix + suffix


# What a reader keeps of a message until its batch is built: value, key, the key the
# reader compared (ledger, entry, batch index or WHOLE_ENTRY), batch size, publish time,
# event time, properties.
PendingRow = tuple[bytes, str | None, tuple[int, int, int], int, int, int | None,
                   dict[str, str]]


class RowBuffer:
    """Messages of one topic partition, gathered for one record batch.

    A message costs one tuple here; the columns are built from them in :meth:`take`,
    mostly by Arrow.
    """

    def __init__(self, topic: str, partition: int = -1) -> None:
        self.topic = topic
        self._encode_id = IdEncoder(partition)
        self.rows: list[PendingRow] = []

    def __len__(self) -> int:
        return len(self.rows)

    def add(self, msg: Message, key: tuple[int, int, int], batch_size: int) -> None:
        """Add ``msg``, whose key (see :mod:`magnetar.spark.positions`) is ``key``."""
        self.rows.append((msg.value, msg.key, key, batch_size, msg.publish_time,
                          msg.event_time, msg.properties))

    def take(self) -> pa.RecordBatch:
        """The gathered rows as a record batch; the buffer starts afresh."""
        schema = arrow_schema()
        rows, self.rows = self.rows, []
        values, keys, positions, sizes, publish, events, props = zip(*rows, strict=True)
        encode = self._encode_id
        ids = [encode(ledger, entry, -1 if index == _WHOLE_ENTRY else index, size)
               for (ledger, entry, index), size in zip(positions, sizes, strict=True)]
        stamp = schema.field(PUBLISH_TIME).type
        columns = [
            pa.array(values, pa.binary()),
            pa.array(keys, pa.string()).cast(pa.binary()),
            pa.array([self.topic] * len(rows), pa.string()),
            pa.array(ids, pa.binary()),
            pc.multiply(pa.array(publish, pa.int64()), 1000).cast(stamp),
            pc.multiply(pa.array(events, pa.int64()), 1000).cast(stamp),
            pa.array(props, schema.field(PROPERTIES).type),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=schema)


# ---------------------------------------------------------------- writing


def check_write_columns(names: Sequence[str]) -> tuple[str, ...]:
    """The columns a writer will use; a missing ``value`` or an unknown column is an
    error (a column the sink would silently drop is more likely a mistake)."""
    if VALUE not in names:
        raise ValueError("writing to pulsar needs a 'value' column (binary or string)")
    unknown = [n for n in names if n not in WRITE_COLUMNS | IGNORED_ON_WRITE]
    if unknown:
        raise ValueError(
            f"columns {unknown} cannot be written to pulsar; the sink takes "
            f"{sorted(WRITE_COLUMNS)} (and ignores {sorted(IGNORED_ON_WRITE)})"
        )
    return tuple(n for n in names if n in WRITE_COLUMNS)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode()


def _payload(value: Any) -> bytes:
    if value is None:
        raise ValueError("a row to write has a null 'value'")
    return value.encode() if isinstance(value, str) else bytes(value)


def _millis(column: pa.Array) -> list[int | None]:
    """Milliseconds since the epoch from a timestamp column (or a column of longs,
    taken as milliseconds already)."""
    if pa.types.is_timestamp(column.type):
        unit = column.type.unit
        per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 1_000_000}[unit]
        raw = pc.cast(column, pa.int64()).to_pylist()
        return [None if v is None else int(v // per_ms) for v in raw]
    if pa.types.is_integer(column.type):
        return column.to_pylist()  # type: ignore[no-any-return]
    raise ValueError(f"'{EVENT_TIME}' must be a timestamp or milliseconds, not {column.type}")


OutgoingRow = tuple[bytes, str | None, dict[str, str] | None, int | None, str | None]


def rows_to_send(batch: pa.RecordBatch) -> list[OutgoingRow]:
    """``(value, key, properties, event_time_ms, topic)`` for each row of ``batch``."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str, convert: Callable[[Any], Any]) -> list[Any]:
        if name not in names:
            return [None] * n
        return [convert(v) for v in batch.column(name).to_pylist()]

    values = column(VALUE, _payload)
    keys = column(KEY, _text)
    props = column(PROPERTIES, lambda v: None if v is None else dict(v))
    events = _millis(batch.column(EVENT_TIME)) if EVENT_TIME in names else [None] * n
    topics = column(TOPIC, _text)
    return list(zip(values, keys, props, events, topics, strict=True))
