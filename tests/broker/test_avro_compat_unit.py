"""The schema compatibility checker and the topic's schema registry, without a broker.

The expected verdicts are those of Avro's schema resolution rules as Pulsar applies them
(its AvroSchemaBasedCompatibilityCheck over Avro's SchemaValidator).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from magnetar.broker.features.schema_compat import (
    AVRO,
    JSON,
    WIRE_TYPES,
    IncompatibleSchema,
    InvalidSchema,
    SchemaData,
    Strategy,
    check,
    check_for_consumer,
    same_definition,
    validate,
)
from magnetar.broker.features.schemas import (
    SchemaRegistry,
    namespace_strategy,
    set_namespace_strategy,
    set_topic_strategy,
)
from magnetar.broker.topic_name import TopicName
from magnetar.protocol.pb import pb
from magnetar.storage import TopicMetadata

S = Strategy


def record(*fields: dict[str, Any], name: str = "User", kind: int = AVRO) -> SchemaData:
    doc = {"type": "record", "name": name, "fields": list(fields)}
    return SchemaData(kind, json.dumps(doc).encode())


def f(name: str, type_: Any, **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, **extra}


V1 = record(f("name", "string"), f("email", "string"))
ADD_WITH_DEFAULT = record(f("name", "string"), f("email", "string"), f("age", "int", default=0))
ADD_WITHOUT_DEFAULT = record(f("name", "string"), f("email", "string"), f("age", "int"))
REMOVE_FIELD = record(f("name", "string"))
CHANGE_TYPE = record(f("name", "int"), f("email", "string"))

EVOLUTIONS = {
    "add-with-default": ADD_WITH_DEFAULT,
    "add-without-default": ADD_WITHOUT_DEFAULT,
    "remove-field": REMOVE_FIELD,
    "change-type": CHANGE_TYPE,
}
# strategy -> the evolutions of V1 it accepts
ACCEPTS = {
    S.ALWAYS_COMPATIBLE: set(EVOLUTIONS),
    S.ALWAYS_INCOMPATIBLE: set(),
    S.BACKWARD: {"add-with-default", "remove-field"},
    S.FORWARD: {"add-with-default", "add-without-default"},
    S.FULL: {"add-with-default"},
}


def _accepted(existing: list[SchemaData], new: SchemaData, strategy: Strategy) -> bool:
    try:
        check(existing, new, strategy)
    except IncompatibleSchema:
        return False
    return True


@pytest.mark.parametrize("strategy", list(ACCEPTS))
@pytest.mark.parametrize("evolution", list(EVOLUTIONS))
def test_each_strategy_on_each_evolution(strategy: Strategy, evolution: str) -> None:
    expected = evolution in ACCEPTS[strategy]
    assert _accepted([V1], EVOLUTIONS[evolution], strategy) is expected
    # The transitive forms agree when there is only one version before.
    if strategy in (S.BACKWARD, S.FORWARD, S.FULL):
        transitive = Strategy(strategy.value + "_TRANSITIVE")
        assert _accepted([V1], EVOLUTIONS[evolution], transitive) is expected


def test_json_schemas_follow_the_same_rules() -> None:
    v1 = record(f("name", "string"), kind=JSON)
    added = record(f("name", "string"), f("n", "int", default=1), kind=JSON)
    changed = record(f("name", "long"), kind=JSON)
    assert _accepted([v1], added, S.FULL)
    assert not _accepted([v1], changed, S.FULL)


def test_numeric_promotion_reads_one_way() -> None:
    ints = record(f("n", "int"))
    longs = record(f("n", "long"))
    assert _accepted([ints], longs, S.BACKWARD)  # a long reader reads ints
    assert not _accepted([ints], longs, S.FORWARD)  # an int reader cannot read longs


def test_nullable_union_fields_as_the_python_client_writes_them() -> None:
    # pulsar.schema.Record writes optional fields as ["null", T] without a default.
    v1 = record(f("name", ["null", "string"]))
    added = record(f("name", ["null", "string"]), f("age", ["null", "int"]))
    added_default = record(f("name", ["null", "string"]), f("age", ["null", "int"], default=None))
    assert not _accepted([v1], added, S.BACKWARD)  # the new reader has no default for age
    assert _accepted([v1], added, S.FORWARD)
    assert _accepted([v1], added_default, S.FULL)


def test_transitive_checks_every_live_version() -> None:
    v1 = record(f("name", "string"))
    v2 = record(f("name", "string"), f("age", "int", default=0))
    v3 = record(f("name", "string"), f("age", "int"))
    assert _accepted([v1, v2], v3, S.BACKWARD)  # v3 reads v2, which has age
    assert not _accepted([v1, v2], v3, S.BACKWARD_TRANSITIVE)  # v3 cannot read v1
    assert _accepted([v1, v2], v3, S.FULL)
    assert not _accepted([v1, v2], v3, S.FULL_TRANSITIVE)
    w1 = record(f("a", "string"), f("b", "int"))
    w2 = record(f("a", "string"), f("b", "int", default=0))
    w3 = record(f("a", "string"))
    assert _accepted([w1, w2], w3, S.FORWARD)  # v2 reads v3 with its default
    assert not _accepted([w1, w2], w3, S.FORWARD_TRANSITIVE)  # v1 has no default for b


def test_a_different_type_is_incompatible_under_every_strategy_but_always_compatible() -> None:
    string = SchemaData(WIRE_TYPES["STRING"], b"")
    for strategy in (S.BACKWARD, S.FULL, S.FULL_TRANSITIVE, S.ALWAYS_INCOMPATIBLE):
        with pytest.raises(IncompatibleSchema, match="exists schema type AVRO, new schema type"):
            check([V1], string, strategy)
    check([V1], string, S.ALWAYS_COMPATIBLE)


def test_the_same_definition_passes_even_always_incompatible() -> None:
    check([V1], V1, S.ALWAYS_INCOMPATIBLE)
    string = SchemaData(WIRE_TYPES["STRING"], b"")
    check([string], string, S.ALWAYS_INCOMPATIBLE)
    other = SchemaData(WIRE_TYPES["STRING"], b"x")
    with pytest.raises(IncompatibleSchema, match="ALWAYS_INCOMPATIBLE"):
        check([string], other, S.ALWAYS_INCOMPATIBLE)


def test_reason_names_the_strategy_and_the_field() -> None:
    with pytest.raises(IncompatibleSchema) as caught:
        check([V1], ADD_WITHOUT_DEFAULT, S.FULL)
    message = str(caught.value)
    assert "strategy FULL" in message
    assert "age" in message


def test_consumer_check_follows_pip_44() -> None:
    v1 = record(f("name", "string"))
    v2 = record(f("name", "string"), f("age", "int", default=0))
    reader_of_v1_only = record(f("name", "string"), f("email", "string"))
    # Under FORWARD a consumer must still read the latest version (BACKWARD vs latest).
    check_for_consumer([v1, v2], v1, S.FORWARD)
    with pytest.raises(IncompatibleSchema):
        check_for_consumer([v1, v2], reader_of_v1_only, S.FORWARD)
    # Under BACKWARD_TRANSITIVE it must read every version.
    needs_age = record(f("name", "string"), f("age", "int"))
    check_for_consumer([v2], needs_age, S.BACKWARD_TRANSITIVE)
    with pytest.raises(IncompatibleSchema):
        check_for_consumer([v1, v2], needs_age, S.BACKWARD_TRANSITIVE)


@pytest.mark.parametrize(
    ("kind", "data", "message"),
    [
        (AVRO, b"{not json", "Invalid schema definition data for AVRO schema"),
        (AVRO, b'{"type":"record","fields":[]}', "Invalid schema definition data"),
        (JSON, b'{"type":"record","name":"R","fields":[{"name":"a"}]}', "Invalid schema"),
        (AVRO, b'["int","string"]', "UNION"),
        (AVRO, b'{"type":"record","name":"bad-name","fields":[]}', "illegal name"),
        (WIRE_TYPES["INT32"], b"x", "length of schema data should be zero"),
        (WIRE_TYPES["AUTO_CONSUME"], b"", "client-side schema type"),
        (99, b"", "Unknown schema type"),
    ],
)
def test_invalid_definitions_are_refused(kind: int, data: bytes, message: str) -> None:
    with pytest.raises(InvalidSchema, match=message):
        validate(SchemaData(kind, data))


def test_valid_definitions_pass() -> None:
    validate(V1)
    validate(SchemaData(JSON, b'["null","string"]'))  # only AVRO refuses a top-level union
    validate(SchemaData(AVRO, b'"string"'))  # Pulsar registers special Avro types too
    # Java clients name nested classes with '$' in the namespace; Pulsar allows it.
    validate(record(f("a", "int"), name="com.example.Outer$.Inner"))
    validate(SchemaData(WIRE_TYPES["STRING"], b""))


def test_same_definition_ignores_layout_and_key_order() -> None:
    a = SchemaData(AVRO, b'{"type":"record","name":"R","fields":[{"name":"x","type":"int"}]}')
    b = SchemaData(
        AVRO, b'{ "fields": [ {"type": "int", "name": "x"} ], "name": "R", "type": "record" }'
    )
    assert same_definition(a, b)
    assert not same_definition(a, SchemaData(JSON, a.data))
    assert not same_definition(a, record(f("x", "long"), name="R"))


def test_strategy_names() -> None:
    assert Strategy.parse("full_transitive") is S.FULL_TRANSITIVE
    assert S.BACKWARD_TRANSITIVE.transitive and not S.BACKWARD.transitive
    with pytest.raises(ValueError, match="BACKWARD"):
        Strategy.parse("SIDEWAYS")


# ------------------------------------------------------------ the registry


def _pb(schema: SchemaData) -> pb.Schema:
    return pb.Schema(name="User", schema_data=schema.data, type=schema.type)  # type: ignore[arg-type]


@pytest.fixture
def registry(tmp_path: Path) -> SchemaRegistry:
    name = TopicName.parse("persistent://public/default/t")
    reg = SchemaRegistry(TopicMetadata(tmp_path / "t" / "metadata.json"), name, lambda: 1234)
    reg.policy_root = tmp_path
    return reg


def test_registry_versions_dedup_and_persist(registry: SchemaRegistry, tmp_path: Path) -> None:
    assert registry.add_or_get(_pb(V1)) == 0
    assert registry.add_or_get(_pb(V1)) == 0  # the same definition keeps its version
    assert registry.add_or_get(_pb(ADD_WITH_DEFAULT)) == 1
    with pytest.raises(IncompatibleSchema):
        registry.add_or_get(_pb(CHANGE_TYPE))
    reloaded = SchemaRegistry(TopicMetadata.load(registry.metadata.path))
    assert [e.version for e in reloaded.live()] == [0, 1]
    assert reloaded.get(0) is not None and reloaded.get(0).timestamp == 1234  # type: ignore[union-attr]


def test_registry_delete_leaves_a_marker_and_numbering_goes_on(registry: SchemaRegistry) -> None:
    registry.add_or_get(_pb(V1))
    registry.add_or_get(_pb(ADD_WITH_DEFAULT))
    assert registry.delete() == 2
    assert registry.latest() is None and registry.get(0) is None
    # After a delete any schema may come: nothing live to be compatible with.
    assert registry.add_or_get(_pb(CHANGE_TYPE)) == 3
    assert [e.version for e in registry.live()] == [3]
    assert registry.delete(force=True) == -1
    assert registry.add_or_get(_pb(V1)) == 0


def test_registry_strategy_comes_from_topic_then_namespace_then_full(
    registry: SchemaRegistry, tmp_path: Path
) -> None:
    assert registry.strategy() is S.FULL
    set_namespace_strategy(tmp_path, "public", "default", S.BACKWARD)
    assert namespace_strategy(tmp_path, "public", "default") is S.BACKWARD
    assert registry.strategy() is S.BACKWARD
    set_topic_strategy(registry.metadata, S.ALWAYS_COMPATIBLE)
    assert registry.strategy() is S.ALWAYS_COMPATIBLE
    set_topic_strategy(registry.metadata, S.UNDEFINED)
    set_namespace_strategy(tmp_path, "public", "default", S.UNDEFINED)
    assert registry.strategy() is S.FULL
    # The namespace file keeps other policies untouched.
    set_namespace_strategy(tmp_path, "public", "default", S.FORWARD)
    path = tmp_path / "namespaces" / "public" / "default" / "policies.json"
    doc = json.loads(path.read_text())
    doc["policies"]["other"] = {"x": 1}
    path.write_text(json.dumps(doc))
    set_namespace_strategy(tmp_path, "public", "default", S.FULL)
    assert json.loads(path.read_text())["policies"] == {
        "other": {"x": 1},
        "schema_compatibility_strategy": "FULL",  # Pulsar's Policies key
    }


def test_consumer_admission(registry: SchemaRegistry) -> None:
    # An idle topic without a schema takes the consumer's.
    registry.admit_consumer(_pb(V1), topic_active=False)
    assert registry.latest() is not None and registry.latest().version == 0  # type: ignore[union-attr]
    registry.admit_consumer(_pb(V1), topic_active=True)
    with pytest.raises(IncompatibleSchema):
        registry.admit_consumer(_pb(CHANGE_TYPE), topic_active=True)
    assert [e.version for e in registry.live()] == [0]  # a consumer check stores nothing


def test_consumer_on_an_active_topic_without_schema_is_refused(registry: SchemaRegistry) -> None:
    with pytest.raises(IncompatibleSchema, match=r"empty\(BYTES\) schema"):
        registry.admit_consumer(_pb(V1), topic_active=True)
    assert registry.latest() is None
