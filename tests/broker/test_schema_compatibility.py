"""Schema compatibility strategies with the official client against a real broker: what
each strategy accepts and refuses (a field added with and without a default, a field
removed, a type changed), transitive against not, the namespace policy set through the
REST API and its persistence across a restart, consumers' checks (PIP-44), and a refused
subscribe that must not leave its Exclusive subscription held."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pulsar
import pytest
from admin_http import answer
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from magnetar.client import Client
from magnetar.client.errors import IncompatibleSchema as MagnetarIncompatibleSchema
from magnetar.client.schema import JsonSchema as MagnetarJsonSchema
from magnetar.testing import EmbeddedBroker

RECEIVE_MS = 10_000
Exclusive = pulsar.ConsumerType.Exclusive
Earliest = pulsar.InitialPosition.Earliest


def user(**fields: Any) -> type[Record]:
    """A record named User with these fields (each version of the schema is a User)."""
    return type("User", (Record,), dict(fields))


def v1() -> type[Record]:
    return user(name=String(required=True), email=String(required=True))


EVOLUTIONS: dict[str, Callable[[], type[Record]]] = {
    "add-with-default": lambda: user(
        name=String(required=True),
        email=String(required=True),
        age=Integer(required=True, default=0, required_default=True),
    ),
    "add-without-default": lambda: user(
        name=String(required=True), email=String(required=True), age=Integer(required=True)
    ),
    "remove-field": lambda: user(name=String(required=True)),
    "change-type": lambda: user(name=Integer(required=True), email=String(required=True)),
}
ACCEPTS = {
    "ALWAYS_COMPATIBLE": set(EVOLUTIONS),
    "ALWAYS_INCOMPATIBLE": set(),
    "BACKWARD": {"add-with-default", "remove-field"},
    "FORWARD": {"add-with-default", "add-without-default"},
    "FULL": {"add-with-default"},
}


def set_topic_strategy(admin_url: str, topic: str, strategy: str) -> None:
    path = "/admin/v2/" + topic.replace("://", "/") + "/schemaCompatibilityStrategy"
    status, _ = answer(admin_url, "PUT", path, strategy)
    assert status == 204
    status, applied = answer(admin_url, "GET", path + "?applied=true")
    assert (status, applied) == (200, strategy)


def accepted(client: pulsar.Client, topic: str, schema: Any) -> bool:
    try:
        client.create_producer(topic, schema=schema).close()
    except pulsar.IncompatibleSchema:
        return False
    return True


def new_topic() -> str:
    return f"persistent://public/default/compat-{uuid.uuid4().hex[:10]}"


@pytest.mark.parametrize("strategy", list(ACCEPTS))
@pytest.mark.parametrize("evolution", list(EVOLUTIONS))
def test_strategy_accepts_and_refuses_evolutions(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, strategy: str, evolution: str
) -> None:
    assert broker.admin_url is not None
    first = v1()
    client.create_producer(topic, schema=AvroSchema(first)).send(first(name="a", email="e"))
    set_topic_strategy(broker.admin_url, topic, strategy)
    expected = evolution in ACCEPTS[strategy]
    assert accepted(client, topic, AvroSchema(EVOLUTIONS[evolution]())) is expected


def test_default_strategy_is_full_for_json_schemas(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic, schema=JsonSchema(v1()))
    for refused in ("add-without-default", "remove-field", "change-type"):
        assert not accepted(client, topic, JsonSchema(EVOLUTIONS[refused]()))
    assert accepted(client, topic, JsonSchema(EVOLUTIONS["add-with-default"]()))


@pytest.mark.parametrize(
    ("strategy", "third_accepted"),
    [
        ("BACKWARD", True),
        ("BACKWARD_TRANSITIVE", False),
        ("FULL", True),
        ("FULL_TRANSITIVE", False),
    ],
)
def test_backward_transitive_against_not(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, strategy: str, third_accepted: bool
) -> None:
    assert broker.admin_url is not None
    first = user(name=String(required=True))
    second = user(
        name=String(required=True), age=Integer(required=True, default=0, required_default=True)
    )
    third = user(name=String(required=True), age=Integer(required=True))  # cannot read `first`
    client.create_producer(topic, schema=AvroSchema(first))
    set_topic_strategy(broker.admin_url, topic, strategy)
    assert accepted(client, topic, AvroSchema(second))
    assert accepted(client, topic, AvroSchema(third)) is third_accepted


@pytest.mark.parametrize(
    ("strategy", "third_accepted"), [("FORWARD", True), ("FORWARD_TRANSITIVE", False)]
)
def test_forward_transitive_against_not(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, strategy: str, third_accepted: bool
) -> None:
    assert broker.admin_url is not None
    first = user(name=String(required=True), age=Integer(required=True))
    second = user(
        name=String(required=True), age=Integer(required=True, default=0, required_default=True)
    )
    third = user(name=String(required=True))  # `first` has no default for age
    client.create_producer(topic, schema=AvroSchema(first))
    set_topic_strategy(broker.admin_url, topic, strategy)
    assert accepted(client, topic, AvroSchema(second))
    assert accepted(client, topic, AvroSchema(third)) is third_accepted


def test_an_old_version_may_come_back(client: pulsar.Client, topic: str) -> None:
    """A producer of a registered version is let in without a check (PIP-44)."""
    first = user(name=String(required=True))
    second = user(
        name=String(required=True), age=Integer(required=True, default=0, required_default=True)
    )
    client.create_producer(topic, schema=AvroSchema(first))
    client.create_producer(topic, schema=AvroSchema(second))
    assert accepted(client, topic, AvroSchema(first))


# ------------------------------------------------------------ consumers


def test_refused_subscribe_leaves_the_exclusive_subscription_free(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    client = client_factory(broker.service_url)
    first = v1()
    client.create_producer(topic, schema=AvroSchema(first)).send(first(name="ada", email="a@x"))
    wrong = AvroSchema(EVOLUTIONS["change-type"]())
    for _ in range(2):
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(topic, "sub", consumer_type=Exclusive, schema=wrong)
    # Neither this client nor another finds the subscription taken (no ConsumerBusy).
    other = client_factory(broker.service_url)
    consumer = other.subscribe(
        topic, "sub", consumer_type=Exclusive, schema=AvroSchema(v1()), initial_position=Earliest
    )
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().name == "ada"
    with pytest.raises(pulsar.ConsumerBusy):
        client.subscribe(topic, "sub", consumer_type=Exclusive, schema=AvroSchema(v1()))
    consumer.close()
    client.subscribe(topic, "sub", consumer_type=Exclusive, schema=AvroSchema(v1())).close()


def test_refused_subscribe_on_a_partitioned_topic_holds_no_partition(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    topic = new_topic()
    broker.create_partitioned_topic(topic, 3)
    first = v1()
    client.create_producer(topic, schema=AvroSchema(first)).send(first(name="ada", email="a@x"))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(
            topic, "sub", consumer_type=Exclusive, schema=AvroSchema(EVOLUTIONS["change-type"]())
        )
    consumer = client.subscribe(
        topic, "sub", consumer_type=Exclusive, schema=AvroSchema(v1()), initial_position=Earliest
    )
    assert consumer.receive(timeout_millis=RECEIVE_MS).value().name == "ada"


def test_consumer_on_an_active_topic_without_schema_is_refused(
    client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic).send(b"raw")
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "typed", schema=AvroSchema(v1()))
    consumer = client.subscribe(topic, "typed", initial_position=Earliest)  # bytes: fine
    assert consumer.receive(timeout_millis=RECEIVE_MS).data() == b"raw"


def test_consumer_must_read_the_latest_version_under_forward(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    assert broker.admin_url is not None
    first = user(name=String(required=True))
    second = user(name=String(required=True), nick=String(required=True))  # FORWARD allows
    client.create_producer(topic, schema=AvroSchema(first))
    set_topic_strategy(broker.admin_url, topic, "FORWARD")
    client.create_producer(topic, schema=AvroSchema(second))
    # `first` reads `second`'s data (it ignores nick): a consumer of it may subscribe.
    client.subscribe(topic, "old-reader", schema=AvroSchema(first)).close()
    # A consumer that needs a field the latest version lacks may not.
    needs_email = user(name=String(required=True), email=String(required=True))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.subscribe(topic, "new-reader", schema=AvroSchema(needs_email))


async def test_magnetar_client_is_refused_an_incompatible_json_definition(
    broker: EmbeddedBroker,
) -> None:
    topic = new_topic()
    base = {"type": "record", "name": "User", "fields": [{"name": "n", "type": "string"}]}
    changed = {"type": "record", "name": "User", "fields": [{"name": "n", "type": "long"}]}
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(topic, schema=MagnetarJsonSchema(json.dumps(base)))
        await producer.send(b'{"n": "x"}')
        with pytest.raises(MagnetarIncompatibleSchema):
            await client.create_producer(topic, schema=MagnetarJsonSchema(json.dumps(changed)))
        with pytest.raises(MagnetarIncompatibleSchema):
            await client.subscribe(topic, "s", schema=MagnetarJsonSchema(json.dumps(changed)))
        consumer = await client.subscribe(
            topic, "s", schema=MagnetarJsonSchema(json.dumps(base)), initial_position="earliest"
        )
        assert (await consumer.receive()).value == b'{"n": "x"}'


# ------------------------------------------------------------ the namespace policy


@pytest.fixture
def own_broker(tmp_path: Any) -> Iterator[EmbeddedBroker]:
    """A broker of its own: this namespace's policy must not reach other tests."""
    with EmbeddedBroker(data_dir=tmp_path / "data", admin=True) as broker:
        yield broker


def test_namespace_policy_through_rest_and_across_a_restart(
    own_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    broker = own_broker
    assert broker.admin_url is not None
    ns_path = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
    assert answer(broker.admin_url, "GET", ns_path) == (200, "UNDEFINED")
    client = client_factory(broker.service_url)
    topic = new_topic()
    client.create_producer(topic, schema=AvroSchema(v1()))
    # The broker's default, FULL: a removed field is refused.
    assert not accepted(client, topic, AvroSchema(EVOLUTIONS["remove-field"]()))
    assert answer(broker.admin_url, "PUT", ns_path, "BACKWARD")[0] == 204
    assert answer(broker.admin_url, "GET", ns_path) == (200, "BACKWARD")
    assert accepted(client, topic, AvroSchema(EVOLUTIONS["remove-field"]()))
    assert not accepted(client, topic, AvroSchema(EVOLUTIONS["add-without-default"]()))
    # A topic's own policy wins over its namespace's.
    other = new_topic()
    client.create_producer(other, schema=AvroSchema(v1()))
    topic_path = "/admin/v2/" + other.replace("://", "/") + "/schemaCompatibilityStrategy"
    assert answer(broker.admin_url, "GET", topic_path)[0] == 204  # unset on the topic
    assert answer(broker.admin_url, "GET", topic_path + "?applied=true") == (200, "BACKWARD")
    assert answer(broker.admin_url, "PUT", topic_path, "ALWAYS_INCOMPATIBLE")[0] == 204
    assert not accepted(client, other, AvroSchema(EVOLUTIONS["remove-field"]()))
    client.close()

    broker.restart()
    assert broker.admin_url is not None
    client = client_factory(broker.service_url)
    assert answer(broker.admin_url, "GET", ns_path) == (200, "BACKWARD")
    assert answer(broker.admin_url, "GET", topic_path) == (200, "ALWAYS_INCOMPATIBLE")
    # The schemas came back too: the removed-field version is the latest on `topic`.
    status, latest = answer(
        broker.admin_url, "GET", "/admin/v2/schemas/" + topic.split("://")[1] + "/schema"
    )
    assert status == 200 and latest["version"] == 1
    assert [f["name"] for f in json.loads(latest["data"])["fields"]] == ["name"]
    assert not accepted(client, topic, AvroSchema(EVOLUTIONS["change-type"]()))
    assert not accepted(client, other, AvroSchema(EVOLUTIONS["add-with-default"]()))
    # UNDEFINED hands the choice back to the broker's default (FULL).
    assert answer(broker.admin_url, "PUT", ns_path, "UNDEFINED")[0] == 204
    assert answer(broker.admin_url, "GET", ns_path) == (200, "UNDEFINED")
    assert not accepted(client, topic, AvroSchema(EVOLUTIONS["add-without-default"]()))


def test_a_bad_strategy_is_refused(own_broker: EmbeddedBroker) -> None:
    assert own_broker.admin_url is not None
    ns_path = "/admin/v2/namespaces/public/default/schemaCompatibilityStrategy"
    status, body = answer(own_broker.admin_url, "PUT", ns_path, "SIDEWAYS")
    assert status == 400 and "FULL_TRANSITIVE" in body["reason"]
    assert answer(own_broker.admin_url, "GET", ns_path) == (200, "UNDEFINED")
