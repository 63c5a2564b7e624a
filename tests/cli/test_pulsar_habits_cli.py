"""pulsar-admin's, pulsar-client's and pulsar-perf's spellings, as subprocesses against a
real broker: namespace policies and permissions, topic permissions, compaction and
cursor commands, schemas, options after the group, and the client flags."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pulsar

from magnetar.testing import EmbeddedBroker

from .helpers import magnetar


def admin(broker: EmbeddedBroker, *args: str) -> tuple[int, str, str]:
    done = magnetar("admin", *args, "--admin-url", broker.admin_url)  # after the command
    return done.returncode, done.stdout, done.stderr


def ok(broker: EmbeddedBroker, *args: str) -> object:
    code, out, err = admin(broker, *args)
    assert code == 0, (args, err)
    return json.loads(out) if out.strip() else None


def test_namespace_policies_in_pulsar_admin_spellings(broker: EmbeddedBroker) -> None:
    ns = f"public/habits-{uuid.uuid4().hex[:8]}"
    ok(broker, "namespaces", "create", ns)
    ok(broker, "namespaces", "set-retention", ns, "--size", "100M", "--time", "3h")
    assert ok(broker, "namespaces", "get-retention", ns) == {
        "retentionTimeInMinutes": 180, "retentionSizeInMB": 100}
    ok(broker, "namespaces", "set-message-ttl", ns, "-ttl", "1h")
    assert ok(broker, "namespaces", "get-message-ttl", ns) == 3600
    ok(broker, "namespaces", "set-backlog-quota", ns, "-l", "10M", "-p", "producer_request_hold")
    quotas = ok(broker, "namespaces", "get-backlog-quotas", ns)
    assert isinstance(quotas, dict)
    assert quotas["destination_storage"]["limitSize"] == 10 * 1024 * 1024
    ok(broker, "namespaces", "set-deduplication", ns, "--enable")
    assert ok(broker, "namespaces", "get-deduplication", ns) is True
    ok(broker, "namespaces", "set-compaction-threshold", ns, "-t", "1M")
    assert ok(broker, "namespaces", "get-compaction-threshold", ns) == 1024 * 1024
    ok(broker, "namespaces", "set-schema-compatibility-strategy", ns, "-c", "FULL")
    assert ok(broker, "namespaces", "get-schema-compatibility-strategy", ns) == "FULL"
    ok(broker, "namespaces", "grant-permission", ns, "--role", "app",
       "--actions", "produce,consume")
    assert ok(broker, "namespaces", "permissions", ns) == {"app": ["consume", "produce"]}
    ok(broker, "namespaces", "revoke-permission", ns, "--role", "app")
    assert ok(broker, "namespaces", "permissions", ns) == {}
    policies = ok(broker, "namespaces", "policies", ns)
    assert isinstance(policies, dict)
    assert policies["message_ttl_in_seconds"] == 3600
    ok(broker, "namespaces", "remove-message-ttl", ns)
    assert ok(broker, "namespaces", "get-message-ttl", ns) is None


def test_topic_commands_in_pulsar_admin_spellings(broker: EmbeddedBroker,
                                                  client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key="k")
    ok(broker, "topics", "create-subscription", topic, "-s", "sub", "--messageId", "earliest")
    ok(broker, "topics", "skip", topic, "-s", "sub", "-n", "1")
    ok(broker, "topics", "reset-cursor", topic, "-s", "sub", "-t", "1h")  # an hour ago
    stats = ok(broker, "topics", "stats", topic)
    assert isinstance(stats, dict) and stats["subscriptions"]["sub"]["msgBacklog"] == 4
    examined = ok(broker, "topics", "examine-message", topic, "--initialPosition", "earliest",
                  "--messagePosition", "2")
    assert isinstance(examined, dict) and examined["payload"] == "m1"
    ok(broker, "topics", "grant-permission", topic, "--role", "reader", "--actions", "consume")
    assert ok(broker, "topics", "permissions", topic) == {"reader": ["consume"]}
    ok(broker, "topics", "compact", topic)
    status = ok(broker, "topics", "compaction-status", topic, "-w")
    assert isinstance(status, dict) and status["status"] == "SUCCESS"
    ok(broker, "topics", "terminate", topic)
    partitioned = topic + "-p"
    ok(broker, "topics", "create-partitioned-topic", partitioned, "-p", "2")
    ok(broker, "topics", "delete-partitioned-topic", partitioned, "-f")


def test_schemas_upload_get_delete(broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = f"persistent://public/default/schema-{uuid.uuid4().hex[:8]}"
    record = {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}
    definition = tmp_path / "schema.json"
    definition.write_text(json.dumps({"type": "JSON", "schema": json.dumps(record),
                                      "properties": {}}))
    ok(broker, "schemas", "upload", topic, "-f", str(definition))
    got = ok(broker, "schemas", "get", topic)
    assert isinstance(got, dict) and got["type"] == "JSON"
    assert json.loads(got["data"]) == record
    ok(broker, "schemas", "delete", topic)
    code, _, err = admin(broker, "schemas", "get", topic)
    assert code == 1 and "404" in err


def test_options_anywhere_on_the_line(broker: EmbeddedBroker) -> None:
    for args in (["--table", "tenants", "list"], ["tenants", "--table", "list"],
                 ["tenants", "list", "--table"]):
        done = magnetar("admin", *args, "--admin-url", broker.admin_url)
        assert done.returncode == 0, done.stderr
        assert "┃" in done.stdout


def test_pulsar_client_produce_and_consume_flags(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("produce", topic, "--url", broker.service_url, "-m", "a,b,c",
                    "--properties", "k1=v1,k2=v2", "-db")
    assert done.returncode == 0, done.stderr
    assert "3 messages successfully produced" in done.stdout
    done = magnetar("consume", topic, "--url", broker.service_url, "-s", "s",
                    "-t", "Shared", "-p", "Earliest", "-m", "NonDurable", "-n", "3", "--hex")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["payload"] for m in lines] == [b"a".hex(), b"b".hex(), b"c".hex()]
    assert lines[0]["properties"] == {"k1": "v1", "k2": "v2"}


def test_pulsar_perf_flags(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("perf", "produce", topic, "-u", broker.service_url, "-m", "200",
                    "-time", "120", "-s", "100", "-b", "1", "-i", "60")
    assert done.returncode == 0, done.stderr
    assert "200 messages in" in done.stdout
    done = magnetar("perf", "consume", topic, "-u", broker.service_url, "-m", "200",
                    "-ss", "perf-sub", "-st", "Shared", "-sp", "Earliest", "-i", "60")
    assert done.returncode == 0, done.stderr
    assert "200 messages in" in done.stdout
