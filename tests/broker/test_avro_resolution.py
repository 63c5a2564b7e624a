"""Avro compatibility judged as Pulsar's broker judges it (Avro's resolving reader
against writer, record names not compared): Pulsar's documented evolutions (a field
added with and without a default, a field removed, a record renamed, a type promoted,
union changes) under BACKWARD, FORWARD, FULL and their _TRANSITIVE forms, then the
official client registering a renamed record under the default FULL strategy."""

from __future__ import annotations

import json
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, Record, String

from magnetar.broker.features.schema_compat import (
    AVRO,
    IncompatibleSchema,
    SchemaData,
    Strategy,
    check,
)
from magnetar.testing import EmbeddedBroker


def record(*fields: dict[str, Any], name: str = "Example") -> SchemaData:
    doc = {"type": "record", "name": name, "namespace": "org.example", "fields": list(fields)}
    return SchemaData(AVRO, json.dumps(doc).encode())


A = {"name": "a", "type": "string"}
B = {"name": "b", "type": "int"}
B_DEFAULT = {"name": "b", "type": "int", "default": 0}
B_LONG = {"name": "b", "type": "long"}
A_OPTIONAL = {"name": "a", "type": ["null", "string"], "default": None}
A_WIDER = {"name": "a", "type": ["null", "string", "int"], "default": None}
NESTED = {"name": "n", "type": {"type": "record", "name": "Inner", "fields": [B]}}
NESTED_RENAMED = {"name": "n", "type": {"type": "record", "name": "Inside", "fields": [B]}}
C_DEFAULT = {"name": "c", "type": "int", "default": 7}
C = {"name": "c", "type": "int"}

# name: (existing, new, the strategies that accept it of BACKWARD, FORWARD, FULL)
EVOLUTIONS: dict[str, tuple[SchemaData, SchemaData, set[str]]] = {
    "added field with default": (record(A, B), record(A, B, C_DEFAULT),
                                 {"BACKWARD", "FORWARD", "FULL"}),
    "added field without default": (record(A, B), record(A, B, C), {"FORWARD"}),
    "removed field": (record(A, B), record(A), {"BACKWARD"}),
    "removed field with default": (record(A, B_DEFAULT), record(A),
                                   {"BACKWARD", "FORWARD", "FULL"}),
    "renamed record": (record(A, B), record(A, B, name="ExampleRequiredDefault"),
                       {"BACKWARD", "FORWARD", "FULL"}),
    "renamed nested record": (record(A, NESTED), record(A, NESTED_RENAMED),
                              {"BACKWARD", "FORWARD", "FULL"}),
    "int promoted to long": (record(A, B), record(A, B_LONG), {"BACKWARD"}),
    "long narrowed to int": (record(A, B_LONG), record(A, B), {"FORWARD"}),
    "field made optional (union with null)": (record(A, B), record(A_OPTIONAL, B),
                                              {"BACKWARD"}),
    "union narrowed to its string branch": (record(A_OPTIONAL, B), record(A, B),
                                            {"FORWARD"}),
    "union widened by a branch": (record(A_OPTIONAL, B), record(A_WIDER, B), {"BACKWARD"}),
    "int changed to string": (record(A, B), record(A, {"name": "b", "type": "string"}), set()),
}


def verdict(existing: list[SchemaData], new: SchemaData, strategy: str) -> bool:
    try:
        check(existing, new, Strategy(strategy))
    except IncompatibleSchema:
        return False
    return True


@pytest.mark.parametrize("name", sorted(EVOLUTIONS))
@pytest.mark.parametrize("strategy", ["BACKWARD", "FORWARD", "FULL"])
@pytest.mark.parametrize("transitive", [False, True])
def test_evolution(name: str, strategy: str, transitive: bool) -> None:
    """One existing version: a _TRANSITIVE form judges as its plain form."""
    old, new, accepted = EVOLUTIONS[name]
    judged = strategy + ("_TRANSITIVE" if transitive else "")
    assert verdict([old], new, judged) is (strategy in accepted), (name, judged)


# Three versions, the newest compatible with the latest but not with the first.
CHAINS = {
    # v3 reads v2 (b present) but not v1 (b missing, no default)
    "BACKWARD": [record(A), record(A, B_DEFAULT), record(A, B)],
    # v2 reads v3 (b's default) but v1 does not (b missing, no default)
    "FORWARD": [record(A, B), record(A, B_DEFAULT), record(A)],
    # v3 and v2 read each other; v3 does not read v1
    "FULL": [record(A), record(A, B_DEFAULT), record(A, B)],
}


@pytest.mark.parametrize("strategy", sorted(CHAINS))
def test_transitive_forms_check_every_version(strategy: str) -> None:
    first, latest, new = CHAINS[strategy]
    assert verdict([first, latest], new, strategy)
    assert not verdict([first, latest], new, f"{strategy}_TRANSITIVE")


def test_recursive_records_resolve() -> None:
    node = {"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "int"}, {"name": "next", "type": ["null", "Node"]}]}
    renamed = json.loads(json.dumps(node).replace('"Node"', '"Link"'))
    renamed["fields"].append({"name": "w", "type": "long", "default": 0})
    old, new = (SchemaData(AVRO, json.dumps(doc).encode()) for doc in (node, renamed))
    assert verdict([old], new, "FULL")


def test_official_client_registers_a_renamed_record_under_full(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    """The official client's suite: Example, then ExampleRequiredDefault with the same
    fields, on one topic under the broker's default strategy (FULL)."""
    first = type("Example", (Record,), {"a": String(), "b": Integer()})
    second = type("ExampleRequiredDefault", (Record,), {"a": String(), "b": Integer()})
    producer = client.create_producer(topic, schema=AvroSchema(first))
    producer.send(first(a="x", b=1))
    renamed = client.create_producer(topic, schema=AvroSchema(second))
    renamed.send(second(a="y", b=2))
