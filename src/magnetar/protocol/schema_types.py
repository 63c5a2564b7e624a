"""Schema types: Pulsar's ``SchemaType`` names (the REST API's and the clients'
spelling) and their ``Schema.Type`` numbers on the wire, one table for the broker's
schema registry, the admin API and the client."""

from __future__ import annotations

# Schema.Type on the wire, by Pulsar's SchemaType names.
WIRE_TYPES = {
    "NONE": 0,
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
    "DATE": 12,
    "TIME": 13,
    "TIMESTAMP": 14,
    "KEY_VALUE": 15,
    "INSTANT": 16,
    "LOCAL_DATE": 17,
    "LOCAL_TIME": 18,
    "LOCAL_DATE_TIME": 19,
    "PROTOBUF_NATIVE": 20,
    "AUTO_CONSUME": 21,
    "EXTERNAL": 22,
}
# Wire number -> name (0 is NONE: the broker's spelling; a client calls it BYTES).
WIRE_NAMES = {number: name for name, number in WIRE_TYPES.items()}

# What a producer or consumer declares of its own: the types up to PROTOBUF_NATIVE
# (AUTO_CONSUME is resolved inside a client, EXTERNAL is not a client's), and BYTES,
# which travels as NONE (0) and reads back as BYTES, as the Java client's does.
DECLARED_TYPES = {
    **{name: number for name, number in WIRE_TYPES.items()
       if number <= WIRE_TYPES["PROTOBUF_NATIVE"]},
    "BYTES": 0,
}
DECLARED_NAMES = {number: name for name, number in DECLARED_TYPES.items()}


def type_name(wire_type: int) -> str:
    """The broker's name for a wire type (its number if it has none)."""
    return WIRE_NAMES.get(wire_type, str(wire_type))
