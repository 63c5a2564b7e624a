"""The deduplication switch through the admin REST API, against a real broker: set, get
and delete per namespace and per topic (Pulsar's paths), which one is in force (topic
over namespace over the broker's setting) seen through ``?applied=true`` and by what the
official client gets, changes applied to loaded topics at once, persistence across a
restart, partitioned topics, refusals."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import http
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path_factory.mktemp("dedup")) as b:
        yield b


def ensure_namespace(broker: EmbeddedBroker, namespace: str) -> str:
    """Create the tenant and the namespace, on a broker where they must exist (a
    broker without those routes lets any namespace be used)."""
    tenant = namespace.split("/")[0]
    http(broker, "PUT", f"/admin/v2/tenants/{tenant}",
         b'{"adminRoles": [], "allowedClusters": ["standalone"]}')
    http(broker, "PUT", f"/admin/v2/namespaces/{namespace}")
    return namespace


@pytest.fixture
def namespace(broker: EmbeddedBroker) -> str:
    """A namespace of this test's own (the switch is per namespace)."""
    return ensure_namespace(broker, f"acme/ns-{uuid.uuid4().hex[:8]}")


def ns_path(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}/deduplication"


def topic_path(topic: str, name: str = "deduplicationEnabled") -> str:
    domain, rest = topic.split("://")
    return f"/admin/v2/{domain}/{rest}/{name}"


def create_topic(broker: EmbeddedBroker, topic: str) -> None:
    domain, rest = topic.split("://")
    assert http(broker, "PUT", f"/admin/v2/{domain}/{rest}").status == 204


def deduplicates(client: pulsar.Client, topic: str) -> bool:
    """Does ``topic`` drop a message sent again with a sequence id already stored?"""
    producer = client.create_producer(topic, producer_name=f"p-{uuid.uuid4().hex[:8]}")
    producer.send(b"first")
    producer.send(b"second")
    again = producer.send(b"second-again", sequence_id=1)
    producer.close()
    return again.ledger_id() == -1 and again.entry_id() == -1


# ------------------------------------------------------------------ set / get / delete


def test_namespace_switch_set_get_delete(broker: EmbeddedBroker, namespace: str) -> None:
    path = ns_path(namespace)
    assert http(broker, "GET", path).status == 204  # unset, as Pulsar answers
    assert http(broker, "POST", path, b"true").status == 204
    assert http(broker, "GET", path).json() is True
    assert http(broker, "POST", path, b"false").status == 204
    assert http(broker, "GET", path).json() is False
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", path).status == 204
    assert http(broker, "DELETE", path).status == 204  # removing nothing is fine


@pytest.mark.parametrize("name", ["deduplicationEnabled", "deduplication"])
def test_topic_switch_and_what_applies(
    broker: EmbeddedBroker, namespace: str, name: str
) -> None:
    topic = f"persistent://{namespace}/t"
    create_topic(broker, topic)
    path = topic_path(topic, name)
    applied = path + "?applied=true"
    assert http(broker, "GET", path).status == 204
    assert http(broker, "GET", applied).json() is False  # the broker's default: off
    assert http(broker, "POST", ns_path(namespace), b"true").status == 204
    assert http(broker, "GET", applied).json() is True
    assert http(broker, "GET", path).status == 204  # the topic has none of its own
    assert http(broker, "POST", path, b"false").status == 204
    assert http(broker, "GET", path).json() is False
    assert http(broker, "GET", applied).json() is False
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", applied).json() is True


def test_refusals(broker: EmbeddedBroker, namespace: str) -> None:
    for body in (b"yes", b"1", b'"true"', b"", b"null"):
        assert http(broker, "POST", ns_path(namespace), body).status == 400, body
    assert http(broker, "POST", "/admin/v2/namespaces/acme/bad%20ns/deduplication",
                b"true").status == 412
    missing = f"persistent://{namespace}/never-created"
    assert http(broker, "GET", topic_path(missing)).status == 404
    assert http(broker, "POST", topic_path(missing), b"true").status == 404
    assert http(broker, "GET", f"/admin/v2/bogus/{namespace}/t/deduplicationEnabled"
                ).status == 412


def test_partitioned_topic_switch_is_set_on_its_partitions(
    broker: EmbeddedBroker, client: pulsar.Client, namespace: str
) -> None:
    topic = f"persistent://{namespace}/parted"
    domain, rest = topic.split("://")
    assert http(broker, "PUT", f"/admin/v2/{domain}/{rest}/partitions", b"2").status == 204
    assert http(broker, "POST", topic_path(topic), b"true").status == 204
    assert http(broker, "GET", topic_path(topic)).json() is True
    for index in range(2):
        assert http(broker, "GET", topic_path(f"{topic}-partition-{index}")).json() is True
        assert deduplicates(client, f"{topic}-partition-{index}")


# ------------------------------------------------------------------ what the client sees


def test_topic_overrides_namespace_overrides_broker(
    broker: EmbeddedBroker, client: pulsar.Client, namespace: str
) -> None:
    loaded = f"persistent://{namespace}/loaded"
    assert not deduplicates(client, loaded)  # the broker's default: off

    assert http(broker, "POST", ns_path(namespace), b"true").status == 204
    assert deduplicates(client, loaded)  # applied to the loaded topic at once
    assert deduplicates(client, f"persistent://{namespace}/new")

    topic = f"persistent://{namespace}/own"
    create_topic(broker, topic)
    assert http(broker, "POST", topic_path(topic), b"false").status == 204
    assert not deduplicates(client, topic)
    stats = http(broker, "GET", topic_path(topic, "stats")).json()
    assert stats["deduplicationStatus"] == "Disabled"

    assert http(broker, "DELETE", topic_path(topic)).status == 204
    assert deduplicates(client, topic)  # back to the namespace's
    assert http(broker, "GET", topic_path(topic, "stats")).json()[
        "deduplicationStatus"] == "Enabled"

    assert http(broker, "DELETE", ns_path(namespace)).status == 204
    assert not deduplicates(client, loaded)


def test_namespace_off_under_a_broker_that_has_it_on(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path, broker_deduplication_enabled=True) as b:
        client = pulsar.Client(b.service_url, logger=quiet_logger())
        try:
            ensure_namespace(b, "acme/on")
            ensure_namespace(b, "acme/off")
            assert deduplicates(client, "persistent://acme/on/t")
            assert http(b, "POST", ns_path("acme/off"), b"false").status == 204
            assert not deduplicates(client, "persistent://acme/off/t")
            assert not deduplicates(client, "non-persistent://acme/on/t")  # never, as Pulsar
        finally:
            client.close()


def test_the_namespace_file_is_shared_with_redelivery_backoff(
    broker: EmbeddedBroker, namespace: str
) -> None:
    backoff = f"/admin/v2/namespaces/{namespace}/redeliveryBackoff"
    policy = {"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2.0}
    assert http(broker, "GET", backoff).status == 204  # its file is read (and cached)
    assert http(broker, "POST", ns_path(namespace), b"true").status == 204
    assert http(broker, "POST", backoff, json.dumps(policy).encode()).status == 204
    assert http(broker, "GET", ns_path(namespace)).json() is True  # not written over
    assert http(broker, "POST", ns_path(namespace), b"false").status == 204
    assert http(broker, "GET", backoff).json() == policy


# ------------------------------------------------------------------ persistence


def test_switches_survive_a_restart(tmp_path: Path) -> None:
    topic = "persistent://acme/keep/t"
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as b:
        ensure_namespace(b, "acme/keep")
        create_topic(b, topic)
        assert http(b, "POST", ns_path("acme/keep"), b"true").status == 204
        assert http(b, "POST", topic_path("persistent://acme/keep/t2"), b"false").status == 404
        create_topic(b, "persistent://acme/keep/t2")
        assert http(b, "POST", topic_path("persistent://acme/keep/t2"), b"false").status == 204
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as b:
        assert http(b, "GET", ns_path("acme/keep")).json() is True
        assert http(b, "GET", topic_path("persistent://acme/keep/t2")).json() is False
        client = pulsar.Client(b.service_url, logger=quiet_logger())
        try:
            assert deduplicates(client, topic)
            assert not deduplicates(client, "persistent://acme/keep/t2")
        finally:
            client.close()
