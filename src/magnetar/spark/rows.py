"""The source's columns, and the conversions between messages and Arrow record batches.

The columns are pulsar-spark's: ``value`` (binary) and the metadata ``__key``
(binary), ``__topic``, ``__messageId`` (the serialised ``MessageIdData``, as the
official clients' ``MessageId.serialize()``), ``__publishTime``, ``__eventTime``
(timestamps) and ``__messageProperties`` (map<string,string>).  Readers hand Spark
Arrow record batches, not tuples: Spark's per-row conversion of tuples costs more
than reading the messages.
"""

from __future__ import annotations

from collections.abc import Callable
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

# Metadata columns a writer uses; __messageId and __publishTime are the broker's to
# assign, so a read-then-write pipeline may carry them and they are ignored. Every
# other column is part of the value (see magnetar.spark.topic_schema).
WRITE_COLUMNS = {KEY, TOPIC, EVENT_TIME, PROPERTIES}
IGNORED_ON_WRITE = {MESSAGE_ID, PUBLISH_TIME}


@cache
def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :data:`SCHEMA` (it checks for equality)."""
    return arrow_schema_of(SCHEMA)


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The Arrow schema Spark expects for ``schema``'s record batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


# ---------------------------------------------------------------- writing


def check_write_columns(schema: StructType) -> tuple[tuple[str, ...], StructType]:
    """The metadata columns a writer will use, and the value columns (every other
    column but the ignored ones); a DataFrame without a value column is an error."""
    names = schema.fieldNames()
    meta = tuple(n for n in names if n in WRITE_COLUMNS)
    values = StructType([f for f in schema.fields
                         if f.name not in WRITE_COLUMNS | IGNORED_ON_WRITE])
    if not values.fields:
        raise ValueError("writing to pulsar needs a 'value' column (binary or string, or a "
                         "value of the topic's schema) or the columns of its record schema")
    return meta, values


def as_text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return bytes(value).decode()


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


def rows_to_send(batch: pa.RecordBatch, values: list[bytes]) -> list[OutgoingRow]:
    """``(value, key, properties, event_time_ms, topic)`` for each row of ``batch``;
    ``values`` are its rows' payloads, encoded already."""
    n = batch.num_rows
    names = batch.schema.names

    def column(name: str, convert: Callable[[Any], Any]) -> list[Any]:
        if name not in names:
            return [None] * n
        return [convert(v) for v in batch.column(name).to_pylist()]

    keys = column(KEY, as_text)
    props = column(PROPERTIES, lambda v: None if v is None else dict(v))
    events = _millis(batch.column(EVENT_TIME)) if EVENT_TIME in names else [None] * n
    topics = column(TOPIC, as_text)
    return list(zip(values, keys, props, events, topics, strict=True))
