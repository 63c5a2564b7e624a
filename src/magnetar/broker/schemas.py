"""Schema versions of a topic, kept in its metadata; compatibility is by schema type."""

from __future__ import annotations

import struct

from magnetar.protocol.pb import pb
from magnetar.storage import SchemaEntry, TopicMetadata

_I64 = struct.Struct(">q")
_BYTES_TYPES = (pb.Schema.Type.Value("None"),)
_AUTO_CONSUME = pb.Schema.AutoConsume


class IncompatibleSchema(Exception):
    pass


def version_bytes(version: int) -> bytes:
    return _I64.pack(version)


def version_from_bytes(data: bytes) -> int:
    return _I64.unpack(data)[0] if len(data) == 8 else -1


class SchemaRegistry:
    def __init__(self, metadata: TopicMetadata) -> None:
        self.metadata = metadata

    def latest(self) -> SchemaEntry | None:
        schemas = self.metadata.schemas
        return schemas[-1] if schemas else None

    def get(self, version: int | None) -> SchemaEntry | None:
        if version is None:
            return self.latest()
        for entry in self.metadata.schemas:
            if entry.version == version:
                return entry
        return None

    def add_or_get(self, schema: pb.Schema) -> int | None:
        """The version of ``schema`` on this topic, registering it if new.

        A bytes (type None) or AUTO_CONSUME schema is always accepted and not
        stored. A different schema type than the topic's latest is incompatible.
        """
        if schema.type in _BYTES_TYPES or schema.type == _AUTO_CONSUME:
            latest = self.latest()
            return latest.version if latest else None
        properties = {str(kv.key): str(kv.value) for kv in schema.properties}  # type: ignore[attr-defined]
        for entry in self.metadata.schemas:
            if entry.type == schema.type and entry.data == schema.schema_data:
                return entry.version
        latest = self.latest()
        if latest is not None and latest.type != schema.type:
            raise IncompatibleSchema(
                f"schema type {pb.Schema.Type.Name(schema.type)} is incompatible with the "
                f"topic's schema type {pb.Schema.Type.Name(latest.type)}"
            )
        version = latest.version + 1 if latest else 0
        schemas = self.metadata.schemas
        schemas.append(
            SchemaEntry(
                version=version,
                type=schema.type,
                name=schema.name,
                data=bytes(schema.schema_data),
                properties=properties,
            )
        )
        try:
            self.metadata.save()
        except BaseException:
            schemas.pop()  # an entry that is not on disk must not stay, or later saves fail
            raise
        return version

    @staticmethod
    def to_pb(entry: SchemaEntry) -> pb.Schema:
        return pb.Schema(
            name=entry.name,
            schema_data=entry.data,
            type=entry.type,  # type: ignore[arg-type]
            properties=[pb.KeyValue(key=k, value=v) for k, v in entry.properties.items()],  # type: ignore[misc]
        )
