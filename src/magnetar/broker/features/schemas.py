"""Schema versions of a topic, kept in its metadata, and the compatibility strategy in
force on it.

As Pulsar's schema registry: a new definition is validated, an identical one gets its
existing version, and anything else must pass the compatibility check of the strategy in
force (``schema_compat``) before it is stored as the next version. A deletion is a marker
version; the versions before the latest marker are gone for every reader and check.

The strategy comes from the topic's policy, else its namespace's, else Pulsar's broker
default FULL; both policies are kept under the REST name ``schemaCompatibilityStrategy``
(topic metadata, and the namespace's policies file).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from pathlib import Path

from magnetar.broker.features.schema_compat import (
    DEFAULT_STRATEGY,
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    Strategy,
    check,
    check_for_consumer,
    same_definition,
    validate,
)
from magnetar.broker.policies.hierarchy import in_force
from magnetar.protocol.pb import pb
from magnetar.protocol.schema_types import type_name
from magnetar.protocol.topic_name import TopicName
from magnetar.storage import SchemaEntry, TopicMetadata
from magnetar.storage.metadata import NamespacePolicies

__all__ = ["IncompatibleSchema", "InvalidSchema", "SchemaRegistry"]

_I64 = struct.Struct(">q")
_BYTES_TYPES = (pb.Schema.Type.Value("None"),)
_AUTO_CONSUME = pb.Schema.AutoConsume
POLICY_NAME = "schemaCompatibilityStrategy"


def version_bytes(version: int) -> bytes:
    return _I64.pack(version)


def version_from_bytes(data: bytes) -> int:
    return _I64.unpack(data)[0] if len(data) == 8 else -1


def _wall_ms() -> int:
    return int(time.time() * 1000)


# ------------------------------------------------------------ strategy policies


def policy_value(doc: object) -> Strategy:
    """A stored policy; a hand-edited bad value counts as unset rather than failing
    every schema check on the topic."""
    if not isinstance(doc, str):
        return Strategy.UNDEFINED
    try:
        return Strategy.parse(doc)
    except ValueError:
        return Strategy.UNDEFINED


def _defined(strategy: Strategy) -> Strategy | None:
    """A stored strategy, None when unset (UNDEFINED)."""
    return None if strategy is Strategy.UNDEFINED else strategy


def namespace_strategy(data_dir: Path, tenant: str, namespace: str) -> Strategy:
    """The namespace's own strategy (UNDEFINED when unset). Read from the file each
    time: other policies share it, and a new schema is rare enough."""
    path = NamespacePolicies.path_for(data_dir, tenant, namespace)
    return policy_value(NamespacePolicies.load(path).policies.get(POLICY_NAME))


def set_namespace_strategy(data_dir: Path, tenant: str, namespace: str, strategy: Strategy) -> None:
    """Set the namespace's strategy (UNDEFINED removes it), changing only this key of a
    freshly read file; persisted before it applies."""
    current = NamespacePolicies.load(NamespacePolicies.path_for(data_dir, tenant, namespace))
    policies = dict(current.policies)
    if strategy is Strategy.UNDEFINED:
        policies.pop(POLICY_NAME, None)
    else:
        policies[POLICY_NAME] = strategy.value
    NamespacePolicies(current.path, policies).save()


def topic_strategy(metadata: TopicMetadata) -> Strategy:
    return policy_value(metadata.policies.get(POLICY_NAME))


def set_topic_strategy(metadata: TopicMetadata, strategy: Strategy) -> None:
    """Set the topic's own strategy (UNDEFINED removes it), persisted in its metadata."""
    metadata.set_policy(POLICY_NAME, None if strategy is Strategy.UNDEFINED else strategy.value)


# ------------------------------------------------------------ the registry


class SchemaRegistry:
    def __init__(
        self,
        metadata: TopicMetadata,
        name: TopicName | None = None,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.metadata = metadata
        self.topic_name = name
        self.clock_ms = clock_ms
        # Set by the broker: the data directory that holds the namespace policies
        # (None: only the topic's own policy and the default apply).
        self.policy_root: Path | None = None

    # ------------------------------------------------------------ reading

    def live(self) -> list[SchemaEntry]:
        """The versions after the latest deletion marker, oldest first."""
        schemas = self.metadata.schemas
        for index in range(len(schemas) - 1, -1, -1):
            if schemas[index].deleted:
                return schemas[index + 1 :]
        return list(schemas)

    def latest(self) -> SchemaEntry | None:
        live = self.live()
        return live[-1] if live else None

    def get(self, version: int | None) -> SchemaEntry | None:
        """A live version (the latest for None); a deleted one is not found, as in Pulsar."""
        if version is None:
            return self.latest()
        for entry in self.live():
            if entry.version == version:
                return entry
        return None

    def find(self, schema: SchemaData) -> SchemaEntry | None:
        """The live version that already is ``schema``, if any."""
        for entry in self.live():
            if same_definition(_data(entry), schema):
                return entry
        return None

    def strategy(self) -> Strategy:
        """The strategy in force: the topic's, else its namespace's, else FULL."""
        root = self.policy_root

        def namespace(tenant: str, ns: str) -> Strategy | None:
            return _defined(namespace_strategy(root, tenant, ns)) if root is not None else None

        return in_force(
            _defined(topic_strategy(self.metadata)), self.topic_name, namespace, DEFAULT_STRATEGY
        )

    # ------------------------------------------------------------ changing

    def add_or_get(self, schema: pb.Schema) -> int | None:
        """The version of a producer's ``schema`` on this topic, registering it if new
        and compatible (IncompatibleSchema if not).

        A bytes (type None) or AUTO_CONSUME schema is always accepted and not stored.
        """
        if schema.type in _BYTES_TYPES or schema.type == _AUTO_CONSUME:
            latest = self.latest()
            return latest.version if latest else None
        properties = {str(kv.key): str(kv.value) for kv in schema.properties}  # type: ignore[attr-defined]
        return self.put(SchemaData(schema.type, bytes(schema.schema_data)), schema.name, properties)

    def put(
        self,
        schema: SchemaData,
        name: str = "",
        properties: dict[str, str] | None = None,
        strategy: Strategy | None = None,
    ) -> int:
        """Pulsar's putSchemaIfAbsent: validate, reuse an identical live version, else
        check against the live versions and store the next one."""
        validate(schema)
        existing = self.find(schema)
        if existing is not None:
            return existing.version
        live = [_data(entry) for entry in self.live()]
        check(live, schema, strategy or self.strategy())
        return self._append(
            SchemaEntry(
                version=self._next_version(),
                type=schema.type,
                name=name,
                data=schema.data,
                properties=dict(properties or {}),
                timestamp=self.clock_ms(),
            )
        )

    def check(self, schema: SchemaData, strategy: Strategy | None = None) -> Strategy:
        """Would ``schema`` be accepted as a new version? Returns the strategy it was
        judged by; IncompatibleSchema (InvalidSchema) if it would not."""
        validate(schema)
        strategy = strategy or self.strategy()
        check([_data(entry) for entry in self.live()], schema, strategy)
        return strategy

    def admit_consumer(self, schema: pb.Schema, topic_active: bool) -> None:
        """Pulsar's addSchemaIfIdleOrCheckCompatible for a subscribing consumer: on an
        idle topic without a schema the consumer's is registered; otherwise it must
        be able to read the topic's (IncompatibleSchema if not)."""
        if schema.type in _BYTES_TYPES or schema.type == _AUTO_CONSUME:
            return
        data = SchemaData(schema.type, bytes(schema.schema_data))
        live = self.live()
        if not live and not topic_active:
            self.add_or_get(schema)
            return
        validate(data)
        if not live:
            raise IncompatibleSchema(
                "Failed to add schema to an active topic with empty(BYTES) schema: "
                f"new schema type {type_name(schema.type)}"
            )
        if any(same_definition(_data(entry), data) for entry in live):
            return  # a registered version reads itself under any strategy
        check_for_consumer([_data(entry) for entry in live], data, self.strategy())

    def delete(self, force: bool = False) -> int:
        """Delete every version: a marker version (its number is returned), or with
        ``force`` the whole history (-1 returned; versions start again at 0)."""
        if force:
            previous = list(self.metadata.schemas)
            self.metadata.schemas.clear()
            try:
                self.metadata.save()
            except BaseException:
                self.metadata.schemas[:] = previous
                raise
            return -1
        marker = SchemaEntry(
            version=self._next_version(),
            type=pb.Schema.Type.Value("None"),
            name="",
            data=b"",
            timestamp=self.clock_ms(),
            deleted=True,
        )
        return self._append(marker)

    def _next_version(self) -> int:
        schemas = self.metadata.schemas
        return max(entry.version for entry in schemas) + 1 if schemas else 0

    def _append(self, entry: SchemaEntry) -> int:
        schemas = self.metadata.schemas
        schemas.append(entry)
        try:
            self.metadata.save()
        except BaseException:
            schemas.pop()  # an entry that is not on disk must not stay, or later saves fail
            raise
        return entry.version

    @staticmethod
    def to_pb(entry: SchemaEntry) -> pb.Schema:
        return pb.Schema(
            name=entry.name,
            schema_data=entry.data,
            type=entry.type,  # type: ignore[arg-type]
            properties=[pb.KeyValue(key=k, value=v) for k, v in entry.properties.items()],  # type: ignore[misc]
        )


def _data(entry: SchemaEntry) -> SchemaData:
    return SchemaData(entry.type, entry.data)
