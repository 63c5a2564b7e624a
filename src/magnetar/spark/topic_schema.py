"""A topic's schema as DataFrame columns, and back, as pulsar-spark maps them.

A topic with an AVRO or JSON schema (JSON's definition is an Avro record too, as the
official clients write it) reads as the record's fields, one column each; a topic with
a primitive schema (STRING, BOOLEAN, INT8..INT64, FLOAT, DOUBLE, DATE, TIMESTAMP) as one
``value`` column of that type; BYTES, or no schema, as ``value`` bytes.  The ``__``
metadata columns follow in every case.  Avro types become Spark's as spark-avro maps
them: a union with null is the other type, nullable; ``date`` and ``timestamp-millis``/
``-micros`` logical types are dates and timestamps; records are structs, arrays arrays,
maps maps; enums are strings.

Writing goes the other way (:class:`ValueEncoder`): the non-metadata columns are encoded
with the topic's schema, and a topic without one gets an Avro record made from the
DataFrame's columns (:func:`avro_for_columns`), or a primitive schema for a lone
``value`` column of a primitive type, as pulsar-spark creates them.  The producer
attaches with that schema, so the broker checks it as any producer's.
"""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from magnetar.client.schema import SchemaInfo, value_decoder
from magnetar.spark.rows import SCHEMA, VALUE

RECORD_TYPES = ("AVRO", "JSON")
_EPOCH_DAY = dt.date(1970, 1, 1)

# Pulsar's primitive schemas -> the ``value`` column's type (pulsar-spark's table).
PRIMITIVES: dict[str, DataType] = {
    "STRING": StringType(),
    "BOOLEAN": BooleanType(),
    "INT8": ByteType(),
    "INT16": ShortType(),
    "INT32": IntegerType(),
    "INT64": LongType(),
    "FLOAT": FloatType(),
    "DOUBLE": DoubleType(),
    "DATE": DateType(),
    "TIMESTAMP": TimestampType(),
}
_PRIMITIVE_OF = {type(t): name for name, t in PRIMITIVES.items() if name != "STRING"}

METADATA_FIELDS = [f for f in SCHEMA.fields if f.name != VALUE]
METADATA_NAMES = frozenset(f.name for f in METADATA_FIELDS)


def is_raw(info: SchemaInfo | None) -> bool:
    """Whether values of ``info`` read as plain ``value`` bytes."""
    return info is None or info.type.upper() in ("BYTES", "NONE")


def value_fields(info: SchemaInfo | None) -> list[StructField]:
    """The columns a topic's values read as (the metadata columns not included)."""
    if is_raw(info):
        return [SCHEMA[VALUE]]
    assert info is not None
    kind = info.type.upper()
    if kind in PRIMITIVES:
        return [StructField(VALUE, PRIMITIVES[kind], True)]
    if kind in RECORD_TYPES:
        record = _parse(info.schema)
        if record.type != "record":
            raise ValueError(f"a {kind} schema must define a record, not {record.type}")
        return [StructField(f.name, *_spark_type(f.type)) for f in record.fields]
    raise ValueError(f"pulsar topics with a {kind} schema cannot be read as columns; "
                     "set 'allowDifferentTopicSchemas' to read their values as bytes")


def source_schema(info: SchemaInfo | None) -> StructType:
    """The source's columns for a topic of schema ``info``."""
    return StructType([*value_fields(info), *METADATA_FIELDS])


def _parse(definition: bytes) -> Any:
    import avro.schema  # on first use, as the client's decoder

    try:
        return avro.schema.parse(definition.decode("utf-8"))
    except Exception as exc:  # avro raises its own SchemaParseException and others
        raise ValueError(f"not an Avro schema definition: {exc}") from None


def _spark_type(schema: Any) -> tuple[DataType, bool]:
    """(Spark type, nullable) of an Avro schema, as spark-avro's SchemaConverters."""
    kind = schema.type
    logical = schema.get_prop("logicalType")
    if kind == "union":
        members = [s for s in schema.schemas if s.type != "null"]
        if len(members) == 1:
            return _spark_type(members[0])[0], True
        raise ValueError(f"an Avro union of {[s.type for s in members]} has no column type")
    if kind == "int" and logical == "date":
        return DateType(), False
    if kind == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType(), False
    simple: dict[str, DataType] = {
        "boolean": BooleanType(), "int": IntegerType(), "long": LongType(),
        "float": FloatType(), "double": DoubleType(), "string": StringType(),
        "enum": StringType(), "bytes": BinaryType(), "fixed": BinaryType(),
    }
    if kind in simple:
        return simple[kind], False
    if kind == "record":
        return StructType([StructField(f.name, *_spark_type(f.type)) for f in schema.fields]), False
    if kind == "array":
        item, nullable = _spark_type(schema.items)
        return ArrayType(item, nullable), False
    if kind == "map":
        item, nullable = _spark_type(schema.values)
        return MapType(StringType(), item, nullable), False
    raise ValueError(f"the Avro type {kind!r} has no column type")


# ---------------------------------------------------------------- reading


def value_columns(info: SchemaInfo | None, arrow_types: pa.Schema,
                  payloads: Sequence[bytes]) -> list[pa.Array]:
    """The value columns (``arrow_types``: their Arrow fields, in order) of ``payloads``
    decoded with ``info``.  A payload that is no value of the schema is a ``ValueError``."""
    if is_raw(info):
        return [pa.array(payloads, pa.binary())]
    assert info is not None
    kind = info.type.upper()
    if kind in PRIMITIVES:
        return [_primitive_column(info, arrow_types.field(0).type, payloads)]
    decode = _record_decoder(info)
    struct = pa.struct(list(arrow_types))
    return pa.array([decode(p) for p in payloads], struct).flatten()  # type: ignore[no-any-return]


def _primitive_column(info: SchemaInfo, arrow_type: pa.DataType,
                      payloads: Sequence[bytes]) -> pa.Array:
    kind = info.type.upper()
    if kind in ("DATE", "TIMESTAMP"):
        # Pulsar writes both as milliseconds since the epoch (a big-endian long).
        millis = [int.from_bytes(p, "big", signed=True) for p in payloads]
        if kind == "DATE":
            return pa.array([_EPOCH_DAY + dt.timedelta(milliseconds=m) for m in millis],
                            arrow_type)
        return pa.array([m * 1000 for m in millis], pa.int64()).cast(arrow_type)
    decode = value_decoder(info)
    assert decode is not None
    return pa.array([decode(p) for p in payloads], arrow_type)


def _record_decoder(info: SchemaInfo) -> Callable[[bytes], Any]:
    if info.type.upper() == "AVRO":
        decode = value_decoder(info)
        assert decode is not None
        return decode
    fields = _parse(info.schema).fields
    stamps = {f.name for f in fields if _spark_type(f.type)[0] == TimestampType()}

    def from_json(data: bytes) -> Any:
        try:
            record = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        for name in stamps:  # JSON carries timestamps as milliseconds
            if isinstance(record.get(name), int):
                record[name] = dt.datetime.fromtimestamp(record[name] / 1000, dt.UTC)
        return record

    return from_json


# ---------------------------------------------------------------- writing


def _avro_type(data_type: DataType, nullable: bool, name: str) -> Any:
    """An Avro type for a Spark type, as spark-avro's ``toAvroType`` (a nullable one is
    a union with null)."""
    simple: dict[type, Any] = {
        BooleanType: "boolean", ByteType: "int", ShortType: "int", IntegerType: "int",
        LongType: "long", FloatType: "float", DoubleType: "double", StringType: "string",
        BinaryType: "bytes",
        DateType: {"type": "int", "logicalType": "date"},
        TimestampType: {"type": "long", "logicalType": "timestamp-micros"},
    }
    if type(data_type) in simple:
        out = simple[type(data_type)]
    elif isinstance(data_type, StructType):
        out = {"type": "record", "name": name, "fields": [
            {"name": f.name, "type": _avro_type(f.dataType, f.nullable, f.name)}
            for f in data_type.fields]}
    elif isinstance(data_type, ArrayType):
        out = {"type": "array", "items": _avro_type(data_type.elementType,
                                                    data_type.containsNull, name)}
    elif isinstance(data_type, MapType) and isinstance(data_type.keyType, StringType):
        out = {"type": "map", "values": _avro_type(data_type.valueType,
                                                   data_type.valueContainsNull, name)}
    else:
        raise ValueError(f"a column of type {data_type.simpleString()} cannot be written "
                         "with an Avro schema")
    return [out, "null"] if nullable else out


def avro_for_columns(fields: Sequence[StructField]) -> SchemaInfo:
    """The Avro record schema pulsar-spark makes from a DataFrame's value columns."""
    record = _avro_type(StructType(list(fields)), False, "topLevelRecord")
    return SchemaInfo("AVRO", json.dumps(record).encode(), "topLevelRecord")


def schema_for_columns(fields: Sequence[StructField]) -> SchemaInfo | None:
    """The schema a write creates on a topic without one: none for a lone binary or
    string ``value`` (bytes, as a plain producer sends), a primitive schema for a lone
    ``value`` of a primitive type, else an Avro record of the columns."""
    if len(fields) == 1 and fields[0].name == VALUE:
        kind = type(fields[0].dataType)
        if kind in (BinaryType, StringType):
            return None
        if kind in _PRIMITIVE_OF:
            return SchemaInfo(_PRIMITIVE_OF[kind], b"", _PRIMITIVE_OF[kind])
    return avro_for_columns(fields)


class ValueEncoder:
    """Encodes a record batch's value columns as payloads of one topic's schema."""

    def __init__(self, info: SchemaInfo | None, columns: Sequence[str]) -> None:
        self.info = info
        self.columns = list(columns)
        kind = "BYTES" if is_raw(info) else info.type.upper()  # type: ignore[union-attr]
        self._kind = kind
        if kind in RECORD_TYPES:
            assert info is not None
            record = _parse(info.schema)
            known = {f.name for f in record.fields}
            unknown = [c for c in self.columns if c not in known]
            if unknown:
                raise ValueError(f"columns {unknown} are not fields of the topic's {kind} "
                                 f"schema {sorted(known)}")
            self._record = record
        elif self.columns != [VALUE]:
            raise ValueError(f"a topic with a {kind} schema takes one 'value' column, "
                             f"not {self.columns}")

    def encode(self, batch: pa.RecordBatch) -> list[bytes]:
        kind = self._kind
        if kind == "BYTES":
            values = batch.column(VALUE).to_pylist()
            if any(v is None for v in values):
                raise ValueError("a row to write has a null 'value'")
            return [v.encode() if isinstance(v, str) else bytes(v) for v in values]
        if kind in RECORD_TYPES:
            rows = batch.select(self.columns).to_pylist()
            return self._avro(rows) if kind == "AVRO" else [_json(r) for r in rows]
        return [_primitive(kind, v) for v in batch.column(VALUE).to_pylist()]

    def encode_array(self, batch: pa.RecordBatch) -> pa.Array:
        """The payloads as one Arrow column: a bytes or string ``value`` column as it
        is (no Python object per row), other schemas' values encoded row by row."""
        if self._kind == "BYTES":
            column = batch.column(VALUE)
            if column.null_count:
                raise ValueError("a row to write has a null 'value'")
            return column
        return pa.array(self.encode(batch), pa.binary())

    def _avro(self, rows: list[dict[str, Any]]) -> list[bytes]:
        import avro.errors
        import avro.io

        writer = avro.io.DatumWriter(self._record)
        out = []
        for row in rows:
            buffer = io.BytesIO()
            try:
                writer.write(row, avro.io.BinaryEncoder(buffer))
            except (avro.errors.AvroTypeException, avro.errors.AvroException) as exc:
                raise ValueError(f"a row is no value of the topic's Avro schema: {exc}") from None
            out.append(buffer.getvalue())
        return out


def _json_default(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, dt.date):
        return (value - _EPOCH_DAY).days
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} has no JSON form")


def _json(row: dict[str, Any]) -> bytes:
    return json.dumps(row, default=_json_default, separators=(",", ":")).encode()


def _primitive(kind: str, value: Any) -> bytes:
    """``value`` as Pulsar's primitive schema ``kind`` writes it (big-endian)."""
    import struct

    if value is None:
        raise ValueError("a row to write has a null 'value'")
    if kind == "STRING":
        return value.encode() if isinstance(value, str) else bytes(value)
    if kind == "BOOLEAN":
        return b"\x01" if value else b"\x00"
    if kind == "DATE":
        days: int = (value - _EPOCH_DAY).days
        return (days * 86_400_000).to_bytes(8, "big", signed=True)
    if kind == "TIMESTAMP":
        return int(value.timestamp() * 1000).to_bytes(8, "big", signed=True)
    fmt = {"INT8": ">b", "INT16": ">h", "INT32": ">i", "INT64": ">q",
           "FLOAT": ">f", "DOUBLE": ">d"}[kind]
    try:
        return struct.pack(fmt, value)
    except struct.error as exc:
        raise ValueError(f"{value!r} is no {kind} value: {exc}") from None
