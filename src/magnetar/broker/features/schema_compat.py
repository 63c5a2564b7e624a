"""Schema compatibility as Apache Pulsar's broker judges it.

The strategies are Pulsar's ``SchemaCompatibilityStrategy``. AVRO, JSON and PROTOBUF
definitions are Avro record definitions (Pulsar's JSON schema is one too) and are judged
by Avro's reader/writer resolution rules, as Pulsar's ``AvroSchemaBasedCompatibilityCheck``
does with Avro's ``SchemaValidator``: BACKWARD means the new schema can read what the
existing one wrote, FORWARD that the existing one can read what the new one writes, FULL
both. The non-transitive forms compare with the latest version, the ``_TRANSITIVE``
forms with every live version. Other schema types (STRING, the primitives, KEY_VALUE,
PROTOBUF_NATIVE) are judged by type alone, as Pulsar's default check does.

The rules are those of Avro's resolving decoder, as Avro's ``SchemaValidator`` applies
them for Pulsar (avro_resolution.py): record names are not compared.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from magnetar.broker.features.avro_resolution import resolution_errors
from magnetar.protocol.schema_types import WIRE_NAMES, WIRE_TYPES, type_name

# The avro package is imported on first use (by the first schema with a definition):
# with its decimal and json codecs it is a megabyte most brokers never need.
if TYPE_CHECKING:
    import avro.schema


class Strategy(Enum):
    UNDEFINED = "UNDEFINED"  # a policy that is not set: the next level's applies
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")

    @classmethod
    def parse(cls, text: str) -> Strategy:
        """A strategy by its name (any case); ValueError names the valid ones."""
        try:
            return cls(text.strip().upper())
        except ValueError:
            names = ", ".join(s.value for s in cls)
            raise ValueError(
                f"unknown schema compatibility strategy {text!r}: expected one of {names}"
            ) from None


# Pulsar broker's schemaCompatibilityStrategy default.
DEFAULT_STRATEGY = Strategy.FULL


class IncompatibleSchema(Exception):
    """The schema may not be registered or used (Pulsar's IncompatibleSchemaException)."""


class InvalidSchema(IncompatibleSchema):
    """The definition is malformed (Pulsar's InvalidSchemaDataException). The binary
    protocol reports it as IncompatibleSchema, as Pulsar does; the REST API as 422."""


AVRO, JSON, PROTOBUF = WIRE_TYPES["AVRO"], WIRE_TYPES["JSON"], WIRE_TYPES["PROTOBUF"]
AVRO_BASED = frozenset((AVRO, JSON, PROTOBUF))
# Their definition must be empty (Pulsar's PrimitiveSchemaDataValidator).
_PRIMITIVES = frozenset(range(WIRE_TYPES["BOOLEAN"], WIRE_TYPES["LOCAL_DATE_TIME"] + 1)) - {
    WIRE_TYPES["KEY_VALUE"]
}
_CLIENT_SIDE = frozenset((WIRE_TYPES["AUTO_CONSUME"],))



@dataclass(frozen=True, slots=True)
class SchemaData:
    """What is judged: a wire schema type and its definition bytes."""

    type: int
    data: bytes


def validate(schema: SchemaData) -> None:
    """Refuse a malformed definition (InvalidSchema), as Pulsar's SchemaDataValidator."""
    kind = schema.type
    if kind in AVRO_BASED:
        parsed = parse(schema)
        import avro.schema

        if kind == AVRO and isinstance(parsed, avro.schema.UnionSchema):
            raise InvalidSchema("Avro schema typed [UNION] is not supported")
    elif kind in _PRIMITIVES and schema.data:
        raise InvalidSchema(
            "Invalid schema definition data for primitive schemas: length of schema data "
            f"should be zero, but {len(schema.data)} bytes is found"
        )
    elif kind in _CLIENT_SIDE:
        raise InvalidSchema(f"Schema {type_name(kind)} is a client-side schema type")
    elif kind not in WIRE_NAMES:
        raise InvalidSchema(f"Unknown schema type : {kind}")


def parse(schema: SchemaData) -> avro.schema.Schema:
    """The Avro schema of an AVRO, JSON or PROTOBUF definition; InvalidSchema if it is
    not one (parsed definitions are cached: the same few come with every producer)."""
    return _parse(schema.type, schema.data)


@functools.lru_cache(maxsize=512)
def _parse(kind: int, data: bytes) -> avro.schema.Schema:
    import avro.errors
    import avro.schema

    invalid = f"Invalid schema definition data for {type_name(kind)} schema"
    try:
        # Defaults are not validated, as Pulsar parses with setValidateDefaults(false);
        # names are checked below by Pulsar's rule, which also allows '$' (Java's
        # nested classes put it in namespaces).
        parsed = avro.schema.parse(data.decode("utf-8"), validate_names=False)
    except (avro.errors.AvroException, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise InvalidSchema(f"{invalid}: {exc}") from None
    except RecursionError:
        raise InvalidSchema(f"{invalid}: nested too deeply") from None
    bad = _bad_name(parsed, set())
    if bad is not None:
        raise InvalidSchema(f"{invalid}: illegal name {bad!r}")
    return parsed


def _legal(name: str) -> bool:
    return (
        bool(name)
        and (name[0].isalpha() or name[0] in "_$")
        and all(c.isalnum() or c in "_$" for c in name)
    )


def _bad_name(schema: avro.schema.Schema, seen: set[int]) -> str | None:
    import avro.schema

    if id(schema) in seen:
        return None
    seen.add(id(schema))
    names: list[str] = []
    children: list[avro.schema.Schema] = []
    if isinstance(schema, avro.schema.NamedSchema):
        names.extend(schema.fullname.split("."))
    if isinstance(schema, avro.schema.RecordSchema):
        for f in schema.fields:
            names.append(f.name)
            children.append(f.type)
    elif isinstance(schema, avro.schema.ArraySchema):
        children.append(schema.items)
    elif isinstance(schema, avro.schema.MapSchema):
        children.append(schema.values)
    elif isinstance(schema, avro.schema.UnionSchema):
        children.extend(schema.schemas)
    for name in names:
        if not _legal(name):
            return name
    for child in children:
        bad = _bad_name(child, seen)
        if bad is not None:
            return bad
    return None


def same_definition(a: SchemaData, b: SchemaData) -> bool:
    """Whether ``b`` is already ``a``: same type and, for Avro-based types, the same
    parsed schema (key order and spacing aside), else the same bytes."""
    if a.type != b.type:
        return False
    if a.data == b.data:
        return True
    if a.type not in AVRO_BASED:
        return False
    try:
        return bool(parse(a) == parse(b))
    except InvalidSchema:
        return False


# ------------------------------------------------------------ checks


def check(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """May ``new`` follow the live versions ``existing`` (oldest first) under
    ``strategy``? IncompatibleSchema says why not (Pulsar's checkCompatible)."""
    if strategy is Strategy.ALWAYS_COMPATIBLE or not existing:
        return
    if strategy.transitive:
        _check_all(existing, new, strategy)
        return
    latest = existing[-1]
    _same_type(latest, new)
    if latest.type == new.type and latest.data == new.data:
        return  # Pulsar compares hashes first: the same definition always passes
    _check_all([latest], new, strategy)


def check_for_consumer(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    """May a consumer with schema ``new`` read a topic whose live versions are
    ``existing``? As Pulsar's checkConsumerCompatibility (PIP-44): the consumer's schema
    must read the latest version, or every version under BACKWARD_TRANSITIVE and
    FULL_TRANSITIVE (and ALWAYS_INCOMPATIBLE refuses a new definition)."""
    if strategy is Strategy.ALWAYS_COMPATIBLE or not existing:
        return
    if strategy in (
        Strategy.BACKWARD,
        Strategy.FORWARD,
        Strategy.FORWARD_TRANSITIVE,
        Strategy.FULL,
    ):
        check(existing, new, Strategy.BACKWARD)
    else:
        _check_all(existing, new, strategy)


def _same_type(old: SchemaData, new: SchemaData) -> None:
    if old.type != new.type:
        raise IncompatibleSchema(
            f"Incompatible schema: exists schema type {type_name(old.type)}, "
            f"new schema type {type_name(new.type)}"
        )


def _check_all(existing: Sequence[SchemaData], new: SchemaData, strategy: Strategy) -> None:
    for old in existing:
        _same_type(old, new)
    if new.type not in AVRO_BASED:
        if strategy is Strategy.ALWAYS_INCOMPATIBLE:
            raise IncompatibleSchema("Schema compatibility strategy is ALWAYS_INCOMPATIBLE")
        return
    if strategy is Strategy.ALWAYS_INCOMPATIBLE:
        raise IncompatibleSchema(
            "Error during schema compatibility check with strategy ALWAYS_INCOMPATIBLE: "
            "no new schema may follow the existing one"
        )
    new_schema = parse(new)
    # Most recent first, as Pulsar hands the versions to Avro's validator.
    for index in range(len(existing) - 1, -1, -1):
        old = existing[index]
        try:
            old_schema = parse(old)
        except InvalidSchema as exc:
            if old.type == JSON:
                continue  # Pulsar lets an Avro definition replace an old-format JSON one
            raise IncompatibleSchema(f"an existing schema cannot be read: {exc}") from None
        if strategy in (
            Strategy.BACKWARD,
            Strategy.BACKWARD_TRANSITIVE,
            Strategy.FULL,
            Strategy.FULL_TRANSITIVE,
        ):
            _require_read(
                new_schema,
                old_schema,
                strategy,
                "the new schema cannot read data written with an existing one",
            )
        if strategy in (
            Strategy.FORWARD,
            Strategy.FORWARD_TRANSITIVE,
            Strategy.FULL,
            Strategy.FULL_TRANSITIVE,
        ):
            _require_read(
                old_schema,
                new_schema,
                strategy,
                "an existing schema cannot read data written with the new one",
            )


def _require_read(
    reader: avro.schema.Schema, writer: avro.schema.Schema, strategy: Strategy, what: str
) -> None:
    errors = resolution_errors(reader, writer)
    if not errors:
        return
    raise IncompatibleSchema(
        f"Error during schema compatibility check with strategy {strategy.value}: {what}: "
        f"{'; '.join(errors[:5])}; reader {_brief(reader)}, writer {_brief(writer)}"
    )


def _brief(schema: avro.schema.Schema) -> str:
    text = json.dumps(schema.to_json(), separators=(",", ":"))
    return text if len(text) <= 300 else text[:297] + "..."
