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
from magnetar.protocol.message_id import MessageId

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


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [_varint(i) for i in range(128)]


class IdEncoder:
    """``MessageId.serialize()`` for the messages of a range, without a protobuf object
    per message: the bytes of (ledger, entry, partition) are made once per entry, and
    the batch fields appended (same bytes as the protobuf encoding, field by field)."""

    def __init__(self) -> None:
        self._entry: tuple[int, int, int] | None = None
        self._prefix = b""

    def __call__(self, mid: MessageId) -> bytes:
        entry = (mid.ledger_id, mid.entry_id, mid.partition)
        if entry != self._entry:
            self._entry = entry
            ledger, entry_id = mid.ledger_id & _U64, mid.entry_id & _U64
            prefix = b"\x08" + _varint(ledger) + b"\x10" + _varint(entry_id)
            if mid.partition >= 0:
                prefix += b"\x18" + _varint(mid.partition)
            self._prefix = prefix
        index, size = mid.batch_index, mid.batch_size
        out = self._prefix
        if index >= 0:
            out += b"\x20" + (_SMALL[index] if index < 128 else _varint(index))
        if size > 0:
            out += b"\x30" + (_SMALL[size] if size < 128 else _varint(size))
        return out


class RowBuffer:
    """Messages of one topic partition, gathered into columns for one record batch."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self._encode_id = IdEncoder()
        self._clear()

    def _clear(self) -> None:
        self.values: list[bytes] = []
        self.keys: list[bytes | None] = []
        self.ids: list[bytes] = []
        self.publish: list[int] = []
        self.events: list[int | None] = []
        self.props: list[list[tuple[str, str]]] = []

    def __len__(self) -> int:
        return len(self.values)

    def add(self, msg: Message, mid: MessageId) -> None:
        """Add ``msg`` (whose id is ``mid``)."""
        key = msg.key
        self.keys.append(None if key is None else key.encode())
        self.values.append(msg.value)
        self.ids.append(self._encode_id(mid))
        self.publish.append(msg.publish_time * 1000)
        event = msg.event_time
        self.events.append(None if event is None else event * 1000)
        props = msg.properties
        self.props.append(list(props.items()) if props else [])

    def take(self) -> pa.RecordBatch:
        """The gathered rows as a record batch; the buffer starts afresh."""
        schema = arrow_schema()
        n = len(self.values)
        columns = [
            pa.array(self.values, pa.binary()),
            pa.array(self.keys, pa.binary()),
            pa.array([self.topic] * n, pa.string()),
            pa.array(self.ids, pa.binary()),
            pa.array(self.publish, schema.field(PUBLISH_TIME).type),
            pa.array(self.events, schema.field(EVENT_TIME).type),
            pa.array(self.props, schema.field(PROPERTIES).type),
        ]
        self._clear()
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
