"""The schema REST API (Pulsar's SchemasResource) against a real broker: round trips of
post/get/list/delete with Pulsar's JSON shapes, the compatibility and version queries,
refusals (incompatible 409, invalid 422, BYTES 406), what the official client sees of a
posted schema, partitioned topics, and persistence across a restart."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import answer
from pulsar.schema import AvroSchema, Integer, Record, String

from magnetar.testing import EmbeddedBroker

RECEIVE_MS = 10_000


def definition(*fields: tuple[str, Any], **defaults: Any) -> str:
    """A User record as the official client writes one (required fields)."""
    out = []
    for name, kind in fields:
        field: dict[str, Any] = {"name": name, "type": kind}
        if name in defaults:
            field["default"] = defaults[name]
        out.append(field)
    return json.dumps({"type": "record", "name": "User", "fields": out})


V0 = definition(("name", "string"))
V1 = definition(("name", "string"), ("age", "int"), age=0)
CHANGED = definition(("name", "long"))


class User(Record):
    name = String(required=True)


# The next User: an age without a default, which FULL refuses after User.
UserWithAge = type(
    "User", (Record,), {"name": String(required=True), "age": Integer(required=True)}
)


@pytest.fixture(scope="module")
def api_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(data_dir=tmp_path_factory.mktemp("schema-api"), admin=True) as broker:
        yield broker


@pytest.fixture
def admin(api_broker: EmbeddedBroker) -> Callable[..., tuple[int, Any]]:
    url = api_broker.admin_url
    assert url is not None
    return lambda method, path, body=None: answer(url, method, path, body)


@pytest.fixture
def name() -> str:
    return f"public/default/api-{uuid.uuid4().hex[:10]}"


def payload(schema: str, kind: str = "AVRO", **properties: str) -> dict[str, Any]:
    return {"type": kind, "schema": schema, "properties": properties}


def test_post_get_list_round_trip(admin: Callable[..., Any], name: str) -> None:
    base = f"/admin/v2/schemas/{name}"
    assert admin("GET", base + "/schema")[0] == 404
    assert admin("POST", base + "/schema", payload(V0, owner="ops")) == (
        200,
        {"version": {"version": 0}},
    )
    assert admin("POST", base + "/schema", payload(V0)) == (200, {"version": {"version": 0}})
    assert admin("POST", base + "/schema", payload(V1)) == (200, {"version": {"version": 1}})
    status, latest = admin("GET", base + "/schema")
    assert status == 200
    assert latest["version"] == 1 and latest["type"] == "AVRO" and latest["data"] == V1
    assert latest["timestamp"] > 1_600_000_000_000 and latest["properties"] == {}
    status, first = admin("GET", base + "/schema/0")
    assert status == 200 and first["data"] == V0 and first["properties"] == {"owner": "ops"}
    status, listing = admin("GET", base + "/schemas")
    assert status == 200
    assert [(s["version"], s["data"]) for s in listing["getSchemaResponses"]] == [(0, V0), (1, V1)]
    assert admin("GET", base + "/schema/7")[0] == 404
    assert admin("GET", base + "/schema/latest")[0] == 400


def test_refusals(admin: Callable[..., Any], name: str) -> None:
    base = f"/admin/v2/schemas/{name}"
    admin("POST", base + "/schema", payload(V0))
    status, body = admin("POST", base + "/schema", payload(CHANGED))
    assert status == 409 and "strategy FULL" in body["reason"]
    status, body = admin("POST", base + "/schema", payload('{"type": "record"}'))
    assert status == 422 and "Invalid schema definition data for AVRO schema" in body["reason"]
    status, body = admin("POST", base + "/schema", payload("", kind="BYTES"))
    assert status == 406 and "BYTES" in body["reason"]
    status, body = admin("POST", base + "/schema", payload(V0, kind="JSON"))
    assert status == 409 and "exists schema type AVRO, new schema type JSON" in body["reason"]
    assert admin("POST", base + "/schema", payload(V0, kind="SIDEWAYS"))[0] == 400
    assert admin("POST", base + "/schema", ["not", "an", "object"])[0] == 400
    # Nothing refused was stored.
    assert [s["version"] for s in admin("GET", base + "/schemas")[1]["getSchemaResponses"]] == [0]


def test_compatibility_and_version_queries(admin: Callable[..., Any], name: str) -> None:
    base = f"/admin/v2/schemas/{name}"
    admin("POST", base + "/schema", payload(V0))
    status, body = admin("POST", base + "/compatibility", payload(V1))
    assert status == 202
    assert body["isCompatibility"] is True and body["schemaCompatibilityStrategy"] == "FULL"
    status, body = admin("POST", base + "/compatibility", payload(CHANGED))
    assert status == 202 and body["isCompatibility"] is False and body["compatibility"] is False
    assert admin("POST", base + "/compatibility", payload("{"))[0] == 422
    # A query stores nothing.
    assert admin("GET", base + "/schema")[1]["version"] == 0
    assert admin("POST", base + "/version", payload(V0)) == (200, {"version": 0})
    assert admin("POST", base + "/version", payload(V1)) == (200, {"version": -1})
    # The topic's own strategy is the one the query reports and applies.
    topic_path = f"/admin/v2/persistent/{name}/schemaCompatibilityStrategy"
    assert admin("PUT", topic_path, "ALWAYS_COMPATIBLE")[0] == 204
    status, body = admin("POST", base + "/compatibility", payload(CHANGED))
    assert body == {
        "isCompatibility": True,
        "compatibility": True,
        "schemaCompatibilityStrategy": "ALWAYS_COMPATIBLE",
    }
    assert admin("DELETE", topic_path)[0] == 204
    assert admin("GET", topic_path)[0] == 204


def test_delete_then_any_schema_may_come(admin: Callable[..., Any], name: str) -> None:
    base = f"/admin/v2/schemas/{name}"
    admin("POST", base + "/schema", payload(V0))
    admin("POST", base + "/schema", payload(V1))
    assert admin("DELETE", base + "/schema") == (200, {"version": 2})
    assert admin("GET", base + "/schema")[0] == 404
    assert admin("GET", base + "/schema/1")[0] == 404
    assert admin("GET", base + "/schemas") == (200, {"getSchemaResponses": []})
    # Nothing live to be compatible with: the changed type is version 3.
    assert admin("POST", base + "/schema", payload(CHANGED)) == (200, {"version": {"version": 3}})
    assert admin("DELETE", base + "/schema?force=true") == (200, {"version": -1})
    assert admin("POST", base + "/schema", payload(V0)) == (200, {"version": {"version": 0}})
    assert admin("DELETE", "/admin/v2/schemas/public/default/never-made/schema")[0] == 404


def test_official_client_sees_a_posted_schema(
    api_broker: EmbeddedBroker,
    admin: Callable[..., Any],
    name: str,
    client_factory: Callable[..., pulsar.Client],
) -> None:
    client = client_factory(api_broker.service_url)
    topic = f"persistent://{name}"
    user = AvroSchema(User)
    status, _ = admin(
        "POST", f"/admin/v2/schemas/{name}/schema", payload(user.schema_info().schema())
    )
    assert status == 200
    # A producer whose schema cannot follow the posted one is refused (FULL).
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(topic, schema=AvroSchema(UserWithAge))
    consumer = client.subscribe(
        topic, "s", schema=user, initial_position=pulsar.InitialPosition.Earliest
    )
    client.create_producer(topic, schema=user).send(User(name="ada"))
    msg = consumer.receive(timeout_millis=RECEIVE_MS)
    assert msg.value().name == "ada"
    assert int.from_bytes(msg.schema_version().encode("latin-1"), "big") == 0


def test_partitioned_topic_schema_is_set_on_every_partition(
    api_broker: EmbeddedBroker,
    admin: Callable[..., Any],
    name: str,
    client_factory: Callable[..., pulsar.Client],
) -> None:
    api_broker.create_partitioned_topic(f"persistent://{name}", 2)
    assert admin("POST", f"/admin/v2/schemas/{name}/schema", payload(V0))[0] == 200
    for index in range(2):
        status, latest = admin("GET", f"/admin/v2/schemas/{name}-partition-{index}/schema")
        assert status == 200 and latest["data"] == V0
    client = client_factory(api_broker.service_url)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(f"persistent://{name}", schema=AvroSchema(UserWithAge))


def test_schemas_survive_a_restart(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path / "data", admin=True) as broker:
        assert broker.admin_url is not None
        base = "/admin/v2/schemas/public/default/kept"
        answer(broker.admin_url, "POST", base + "/schema", payload(V0))
        answer(broker.admin_url, "POST", base + "/schema", payload(V1))
        answer(broker.admin_url, "DELETE", base + "/schema")
        answer(broker.admin_url, "POST", base + "/schema", payload(V0))
        before = answer(broker.admin_url, "GET", base + "/schemas")
        broker.restart()
        assert broker.admin_url is not None
        after = answer(broker.admin_url, "GET", base + "/schemas")
        assert after == before
        assert [s["version"] for s in after[1]["getSchemaResponses"]] == [3]
        assert answer(broker.admin_url, "POST", base + "/schema", payload(CHANGED))[0] == 409
        client = client_factory(broker.service_url)
        with pytest.raises(pulsar.IncompatibleSchema):
            client.create_producer(
                "persistent://public/default/kept", schema=AvroSchema(UserWithAge)
            )
