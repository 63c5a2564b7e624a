"""Schema information a producer or consumer declares to the broker, and how values decode.

magnetar's client moves bytes: a consumer's ``SchemaInfo`` is sent in SUBSCRIBE so that
the broker can check compatibility, and its messages' ``value`` stays the payload's
bytes. A PIP-96 payload processor is given the consumer's schema, and the messages it
makes with it (``EntryContext.message_at(..., schema)``) have their value decoded by it,
as Pulsar's ``Schema.decode`` does (:meth:`SchemaInfo.decode`).
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from magnetar.protocol.pb import pb
from magnetar.protocol.schema_types import DECLARED_NAMES, DECLARED_TYPES

# Pulsar's schema type names <-> Schema.Type on the wire (BYTES travels as NONE = 0,
# and 0 reads as BYTES, as the Java client's): protocol/schema_types.py's table.
_TYPES = DECLARED_TYPES
_NAMES = DECLARED_NAMES


@dataclass(frozen=True, slots=True)
class SchemaInfo:
    type: str = "BYTES"  # Pulsar's names: NONE/BYTES, STRING, JSON, AVRO, PROTOBUF, ...
    schema: bytes = b""
    name: str = ""
    properties: dict[str, str] = field(default_factory=dict)

    def fill(self, out: pb.Schema) -> None:
        try:
            out.type = _TYPES[self.type.upper()]  # type: ignore[assignment]
        except KeyError:
            raise ValueError(f"unknown schema type {self.type!r}") from None
        out.name = self.name
        out.schema_data = self.schema
        for key, value in self.properties.items():
            out.properties.add(key=key, value=value)

    @classmethod
    def from_pb(cls, schema: pb.Schema) -> SchemaInfo:
        """The schema a broker sent (GET_SCHEMA's answer, a SUBSCRIBE's success)."""
        kind = _NAMES.get(schema.type)
        if kind is None:
            raise ValueError(f"unknown schema type {schema.type} on the wire")
        return cls(kind, schema.schema_data, schema.name,
                   {kv.key: kv.value for kv in schema.properties})  # type: ignore[attr-defined]

    def decode(self, data: bytes) -> Any:
        """``data`` (a message's payload) as a value of this schema, in Pulsar's
        encodings: STRING -> ``str`` (UTF-8); JSON -> what ``json.loads`` gives; AVRO ->
        the record as a ``dict`` (Avro binary, read with this schema's definition);
        BOOLEAN, INT8/16/32/64, FLOAT, DOUBLE -> ``bool``/``int``/``float`` (big-endian,
        as Pulsar writes them). NONE/BYTES, and types this client does not decode
        (PROTOBUF, PROTOBUF_NATIVE, KEY_VALUE, ...), give the bytes as they are.
        Raises ``ValueError`` for bytes that are not a value of the schema."""
        decode = value_decoder(self)
        return data if decode is None else decode(data)


def value_decoder(schema: SchemaInfo | None) -> Callable[[bytes], Any] | None:
    """What decodes values of ``schema``; None when they stay bytes (no schema, BYTES,
    or a type this client does not decode)."""
    if schema is None:
        return None
    kind = schema.type.upper()
    if kind == "AVRO":
        return _avro_decoder(schema.schema)
    return _DECODERS.get(kind)


def _primitive(fmt: str) -> Callable[[bytes], Any]:
    unpack = struct.Struct(fmt).unpack

    def decode(data: bytes) -> Any:
        try:
            return unpack(data)[0]
        except struct.error:
            raise ValueError(
                f"{len(data)} bytes are no {fmt!r} value (Pulsar writes it big-endian)"
            ) from None

    return decode


def _string(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text: {exc}") from None


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None


def _boolean(data: bytes) -> bool:
    if len(data) != 1:
        raise ValueError(f"{len(data)} bytes are no BOOLEAN value (one byte)")
    return data != b"\x00"


_DECODERS: dict[str, Callable[[bytes], Any]] = {
    "STRING": _string,
    "JSON": _json,
    "BOOLEAN": _boolean,
    "INT8": _primitive(">b"),
    "INT16": _primitive(">h"),
    "INT32": _primitive(">i"),
    "INT64": _primitive(">q"),
    "FLOAT": _primitive(">f"),
    "DOUBLE": _primitive(">d"),
}


@lru_cache(maxsize=64)
def _avro_decoder(definition: bytes) -> Callable[[bytes], Any]:
    """A reader of Avro binary values for the schema ``definition`` (parsed once)."""
    import avro.io  # on first use: avro is 3 MB a consumer without one need not load
    import avro.schema

    try:
        reader = avro.io.DatumReader(avro.schema.parse(definition.decode("utf-8")))
    except Exception as exc:  # avro raises its own SchemaParseException and others
        raise ValueError(f"not an Avro schema: {exc}") from None

    def decode(data: bytes) -> Any:
        try:
            return reader.read(avro.io.BinaryDecoder(io.BytesIO(data)))
        except Exception as exc:
            raise ValueError(f"not an Avro value of the schema: {exc!r}") from None

    return decode


def StringSchema() -> SchemaInfo:
    return SchemaInfo("STRING", b"", "String")


def BytesSchema() -> SchemaInfo:
    return SchemaInfo("BYTES", b"", "Bytes")


def JsonSchema(definition: str | bytes, name: str = "") -> SchemaInfo:
    data = definition.encode() if isinstance(definition, str) else definition
    return SchemaInfo("JSON", data, name)
