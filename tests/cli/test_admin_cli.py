"""``magnetar admin`` as a subprocess against a real broker: JSON and table output,
exit codes 0 (done), 1 (the broker refused, reason on stderr) and 2 (usage)."""

from __future__ import annotations

import json
import uuid

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import magnetar


def admin(broker: EmbeddedBroker, *args: str) -> tuple[int, str, str]:
    done = magnetar("admin", "--admin-url", broker.admin_url, *args)
    return done.returncode, done.stdout, done.stderr


def test_tenant_and_namespace_round_trip(broker: EmbeddedBroker) -> None:
    tenant = f"cli-{uuid.uuid4().hex[:8]}"
    assert admin(broker, "tenants", "create", tenant, "-r", "ops")[0] == 0
    code, out, _ = admin(broker, "tenants", "list")
    assert code == 0 and tenant in json.loads(out)
    code, out, _ = admin(broker, "tenants", "get", tenant)
    assert code == 0
    assert json.loads(out)["adminRoles"] == ["ops"]
    assert json.loads(out)["allowedClusters"] == ["standalone"]
    assert admin(broker, "tenants", "update", tenant, "--admin-roles", "ops,dev")[0] == 0
    assert json.loads(admin(broker, "tenants", "get", tenant)[1])["adminRoles"] == ["ops", "dev"]
    assert admin(broker, "namespaces", "create", f"{tenant}/ns1")[0] == 0
    code, out, _ = admin(broker, "namespaces", "list", tenant)
    assert code == 0 and json.loads(out) == [f"{tenant}/ns1"]
    code, out, _ = admin(broker, "namespaces", "policies", f"{tenant}/ns1")
    assert code == 0 and isinstance(json.loads(out), dict)
    assert admin(broker, "namespaces", "delete", f"{tenant}/ns1")[0] == 0
    assert admin(broker, "tenants", "delete", tenant)[0] == 0
    code, out, _ = admin(broker, "tenants", "list")
    assert tenant not in json.loads(out)


def test_broker_refusal_is_exit_1_with_reason(broker: EmbeddedBroker) -> None:
    code, out, err = admin(broker, "namespaces", "list", f"nosuch-{uuid.uuid4().hex[:6]}")
    assert code == 1
    assert out == ""
    assert "404" in err
    assert err.strip().split("404:", 1)[1].strip()  # the broker's reason, not empty


def test_unreachable_broker_is_exit_1() -> None:
    done = magnetar("admin", "--admin-url", "http://127.0.0.1:9", "tenants", "list")
    assert done.returncode == 1
    assert "cannot reach" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["tenants"],  # no command
        ["topics", "skip", "t"],  # no subscription nor count
        ["topics", "stats", "a/b/c/d/e"],  # not a topic name
        ["namespaces", "create", "no-slash"],
        ["topics", "reset-cursor", "t", "-s", "s"],  # neither --time nor --message-id
    ],
)
def test_usage_errors_are_exit_2(broker: EmbeddedBroker, args: list[str]) -> None:
    code, _, err = admin(broker, *args)
    assert code == 2
    assert err


def test_table_output(broker: EmbeddedBroker) -> None:
    code, out, _ = admin(broker, "--table", "tenants", "list")
    assert code == 0
    assert "public" in out and "┃" in out  # a rich table, not JSON
    assert not out.lstrip().startswith("[")


def test_topics_stats_and_partitions(broker: EmbeddedBroker, client: pulsar.Client,
                                     topic: str) -> None:
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    code, out, _ = admin(broker, "topics", "stats", topic)
    assert code == 0 and json.loads(out)["msgInCounter"] == 3
    code, out, _ = admin(broker, "topics", "list", "public/default")
    assert code == 0 and topic in json.loads(out)
    partitioned = topic + "-p"
    assert admin(broker, "topics", "create-partitioned-topic", partitioned, "-p", "2")[0] == 0
    code, out, _ = admin(broker, "topics", "get-partitioned-topic-metadata", partitioned)
    assert code == 0 and json.loads(out)["partitions"] == 2
    assert admin(broker, "topics", "delete-partitioned-topic", partitioned)[0] == 0
    code, _, err = admin(broker, "topics", "stats", topic + "-nosuch")
    assert code == 1 and "404" in err


def test_subscription_commands_move_the_official_consumer(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    assert admin(broker, "topics", "create-subscription", topic, "-s", "sub",
                 "-m", "earliest")[0] == 0
    for i in range(5):
        producer.send(f"m{i}".encode())
    code, out, _ = admin(broker, "topics", "subscriptions", topic)
    assert code == 0 and json.loads(out) == ["sub"]
    code, out, _ = admin(broker, "topics", "peek-messages", topic, "-s", "sub", "-n", "1")
    assert code == 0 and json.loads(out)["payload"] == "m0"
    assert admin(broker, "topics", "skip", topic, "-s", "sub", "-n", "2")[0] == 0
    consumer = client.subscribe(topic, "sub")
    assert consumer.receive(timeout_millis=10_000).data() == b"m2"
    consumer.close()
    assert admin(broker, "topics", "clear-backlog", topic, "-s", "sub")[0] == 0
    code, out, _ = admin(broker, "topics", "stats", topic)
    assert json.loads(out)["subscriptions"]["sub"]["msgBacklog"] == 0
    assert admin(broker, "topics", "unsubscribe", topic, "-s", "sub")[0] == 0


@pytest.mark.parametrize("group", ["tenants", "namespaces", "topics", "clusters", "brokers"])
def test_help(group: str) -> None:
    done = magnetar("admin", group, "--help")
    assert done.returncode == 0
    assert "usage: magnetar admin " + group in done.stdout
