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
