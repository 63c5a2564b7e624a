"""Schema information a producer or consumer declares to the broker.

magnetar's client moves bytes; a schema here is only the ``SchemaInfo`` sent in
PRODUCER/SUBSCRIBE so that the broker can check compatibility.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.protocol.pb import pb

# Pulsar's schema type names -> Schema.Type on the wire (BYTES travels as None = 0).
_TYPES = {
    "NONE": 0,
    "BYTES": 0,
    "STRING": 1,
    "JSON": 2,
    "PROTOBUF": 3,
    "AVRO": 4,
    "BOOLEAN": 5,
    "INT8": 6,
    "INT16": 7,
    "INT32": 8,
    "INT64": 9,
    "FLOAT": 10,
    "DOUBLE": 11,
    "KEY_VALUE": 15,
    "PROTOBUF_NATIVE": 20,
}


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


def StringSchema() -> SchemaInfo:
    return SchemaInfo("STRING", b"", "String")


def BytesSchema() -> SchemaInfo:
    return SchemaInfo("BYTES", b"", "Bytes")


def JsonSchema(definition: str | bytes, name: str = "") -> SchemaInfo:
    data = definition.encode() if isinstance(definition, str) else definition
    return SchemaInfo("JSON", data, name)
