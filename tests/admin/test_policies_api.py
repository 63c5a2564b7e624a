"""The redelivery backoff policy through the admin REST API, against a real broker:
set/get/delete per namespace and per topic, which one is in force (topic over namespace
over the broker's setting) seen both through ``?applied=true`` and by what the official
client receives, persistence across a restart, partitioned topics, and refusals."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http

from magnetar.testing import EmbeddedBroker

# The broker's default in this module: a hold far longer than any test waits, so "held"
# and "not held" are told apart without measuring time.
LONG = {"minDelayMs": 600_000, "maxDelayMs": 600_000, "multiplier": 2.0}
OFF = {"minDelayMs": 0, "maxDelayMs": 60_000, "multiplier": 2.0}
SETTINGS = {
    "redelivery_backoff_min_ms": 600_000,
    "redelivery_backoff_max_ms": 600_000,
    "redelivery_backoff_multiplier": 2.0,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        admin=True, data_dir=tmp_path_factory.mktemp("policies"), **SETTINGS
    ) as b:
        yield b


@pytest.fixture
def namespace(broker: EmbeddedBroker) -> str:
    """A namespace of this test's own (policies are per namespace)."""
    name = f"acme/ns-{uuid.uuid4().hex[:8]}"
    broker.create_namespace(name)
    return name


def ns_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/redeliveryBackoff"


def topic_path(topic: str) -> str:
    domain, rest = topic.split("://")
    return f"/admin/v2/{domain}/{rest}/redeliveryBackoff"


def create_topic(broker: EmbeddedBroker, topic: str) -> None:
    domain, rest = topic.split("://")
    assert http(broker, "PUT", f"/admin/v2/{domain}/{rest}").status == 204


def nack_once(client: pulsar.Client, topic: str, payload: bytes) -> pulsar.Consumer:
    """Subscribe, publish ``payload``, receive it and negatively acknowledge it."""
    consumer = client.subscribe(
        topic,
        f"s-{uuid.uuid4().hex[:6]}",
        consumer_type=pulsar.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
    )  # subscribed before the publish: from the latest, it sees only ``payload``
    client.create_producer(topic).send(payload)
    msg = consumer.receive(timeout_millis=10_000)
    assert msg.data() == payload
    consumer.negative_acknowledge(msg)
    return consumer


def redelivered_soon(consumer: pulsar.Consumer) -> bool:
    """True if the message comes back within 5 s; the holds here are 10 minutes."""
    try:
        msg = consumer.receive(timeout_millis=5000)
    except pulsar.Timeout:
        return False
    assert msg.redelivery_count() == 1
    consumer.acknowledge(msg)
    return True


# ------------------------------------------------------------------ set / get / delete


def test_namespace_policy_set_get_delete(broker: EmbeddedBroker, namespace: str) -> None:
    path = ns_path(namespace)
    assert http(broker, "GET", path).status == 204  # unset, as Pulsar answers
    policy = {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2.0}
    assert http(broker, "POST", path, policy).status == 204
    assert http(broker, "GET", path).json() == policy
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", path).status == 204
    assert http(broker, "DELETE", path).status == 204  # removing nothing is fine


def test_topic_policy_set_get_delete_and_what_applies(
    broker: EmbeddedBroker, namespace: str
) -> None:
    topic = f"persistent://{namespace}/t"
    create_topic(broker, topic)
    path = topic_path(topic)
    applied = path + "?applied=true"
    assert http(broker, "GET", path).status == 204
    assert http(broker, "GET", applied).json() == LONG  # the broker's setting
    ns_policy = {"minDelayMs": 500, "maxDelayMs": 4000, "multiplier": 3.0}
    assert http(broker, "POST", ns_path(namespace), ns_policy).status == 204
    assert http(broker, "GET", applied).json() == ns_policy
    assert http(broker, "GET", path).status == 204  # the topic has none of its own
    topic_policy = {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2.0}
    assert http(broker, "POST", path, topic_policy).status == 204
    assert http(broker, "GET", path).json() == topic_policy
    assert http(broker, "GET", applied).json() == topic_policy
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", applied).json() == ns_policy
    assert http(broker, "DELETE", ns_path(namespace)).status == 204
    assert http(broker, "GET", applied).json() == LONG


def test_left_out_fields_take_their_defaults(broker: EmbeddedBroker, namespace: str) -> None:
    assert http(broker, "POST", ns_path(namespace), {"minDelayMs": 250}).status == 204
    assert http(broker, "GET", ns_path(namespace)).json() == {
        "minDelayMs": 250, "maxDelayMs": 60_000, "multiplier": 2.0,
    }


# ------------------------------------------------------------------ what the client sees


def test_topic_overrides_namespace_overrides_broker(
    broker: EmbeddedBroker, client: pulsar.Client, namespace: str
) -> None:
    held_by_broker = nack_once(client, f"persistent://{namespace}/a", b"a")
    assert not redelivered_soon(held_by_broker)  # the broker's 10 minutes

    assert http(broker, "POST", ns_path(namespace), OFF).status == 204
    off_by_namespace = nack_once(client, f"persistent://{namespace}/b", b"b")
    assert redelivered_soon(off_by_namespace)

    topic = f"persistent://{namespace}/c"
    create_topic(broker, topic)
    assert http(broker, "POST", topic_path(topic), LONG).status == 204
    held_by_topic = nack_once(client, topic, b"c1")
    assert not redelivered_soon(held_by_topic)

    assert http(broker, "DELETE", topic_path(topic)).status == 204
    back_to_namespace = nack_once(client, topic, b"c2")
    assert redelivered_soon(back_to_namespace)


# ------------------------------------------------------------------ persistence


def test_policies_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        topic = "persistent://acme/keep/t"
        broker.create_namespace("acme/keep")
        create_topic(broker, topic)
        ns_policy = {"minDelayMs": 100, "maxDelayMs": 800, "multiplier": 2.0}
        topic_policy = {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 1.5}
        assert http(broker, "POST", ns_path("acme/keep"), ns_policy).status == 204
        assert http(broker, "POST", topic_path(topic), topic_policy).status == 204
        broker.restart()
        assert http(broker, "GET", ns_path("acme/keep")).json() == ns_policy
        assert http(broker, "GET", topic_path(topic)).json() == topic_policy
        assert http(broker, "DELETE", topic_path(topic)).status == 204
        broker.restart()
        assert http(broker, "GET", topic_path(topic)).status == 204
        assert http(broker, "GET", topic_path(topic) + "?applied=true").json() == ns_policy


def test_a_partitioned_topic_sets_every_partition(broker: EmbeddedBroker, namespace: str) -> None:
    topic = f"persistent://{namespace}/parted"
    domain, rest = topic.split("://")
    assert http(broker, "PUT", f"/admin/v2/{domain}/{rest}/partitions", b"3").status == 204
    policy = {"minDelayMs": 300, "maxDelayMs": 3000, "multiplier": 2.0}
    assert http(broker, "POST", topic_path(topic), policy).status == 204
    assert http(broker, "GET", topic_path(topic)).json() == policy
    for index in range(3):
        assert http(broker, "GET", topic_path(f"{topic}-partition-{index}")).json() == policy
    assert http(broker, "DELETE", topic_path(topic)).status == 204
    assert http(broker, "GET", topic_path(f"{topic}-partition-2")).status == 204


def test_non_persistent_topics_have_policies_too(broker: EmbeddedBroker, namespace: str) -> None:
    topic = f"non-persistent://{namespace}/np"
    create_topic(broker, topic)
    assert http(broker, "POST", topic_path(topic), LONG).status == 204
    assert http(broker, "GET", topic_path(topic)).json() == LONG


# ------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not JSON"),
        ({"minDelayMs": -5}, 412, "minDelayMs must be >= 0"),
        ({"minDelayMs": 2000, "maxDelayMs": 10}, 412, "must be >= minDelayMs"),
        ({"minDelayMs": 10, "multiplier": 0}, 412, "multiplier"),
        ({"minDelay": 10}, 412, "unknown field"),
        ([1, 2], 412, "JSON object"),
    ],
)
def test_bad_policies_are_refused_and_change_nothing(
    broker: EmbeddedBroker, namespace: str, body: object, status: int, words: str
) -> None:
    topic = f"persistent://{namespace}/bad"
    create_topic(broker, topic)
    for path in (ns_path(namespace), topic_path(topic)):
        reply = http(broker, "POST", path, body)
        assert reply.status == status, reply
        assert words in reply.reason
        assert http(broker, "GET", path).status == 204


def test_unknown_topics_and_bad_names(broker: EmbeddedBroker, namespace: str) -> None:
    missing = topic_path(f"persistent://{namespace}/never-created")
    for method, body in (("GET", None), ("POST", LONG), ("DELETE", None)):
        assert http(broker, method, missing, body).status == 404
    assert http(broker, "GET", "/admin/v2/bogus/acme/ns/t/redeliveryBackoff").status == 412
    assert http(broker, "GET", "/admin/v2/namespaces/acme/b%20d/redeliveryBackoff").status == 412


def test_the_topic_routes_beside_them_still_answer(broker: EmbeddedBroker, namespace: str) -> None:
    """DELETE /admin/v2/{domain}/{tenant}/{ns}/{topic} has the shape of the namespace
    policy's path; each must reach its own handler."""
    topic = f"persistent://{namespace}/redeliveryBackoff"  # a topic with the policy's name
    create_topic(broker, topic)
    assert http(broker, "DELETE", ns_path(namespace)).status == 204
    domain, rest = topic.split("://")
    assert http(broker, "DELETE", f"/admin/v2/{domain}/{rest}").status == 204
    assert http(broker, "DELETE", f"/admin/v2/{domain}/{rest}").status == 404
