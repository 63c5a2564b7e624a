"""A namespace created with Pulsar's ``Policies`` body keeps every policy magnetar
implements (each policy's own route and GET of the namespace, by Pulsar's keys, show
it, also after a restart), tolerates the defaults Pulsar's admin clients send, and
refuses with 400 naming the field a policy it does not implement (the namespace is
then not created)."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from admin_http import http

from magnetar.testing import EmbeddedBroker

from .test_tenants_namespaces import refused

# What Pulsar's Java admin client sends for `new Policies()` (its defaults).
DEFAULTS: dict[str, Any] = {
    "auth_policies": {"namespace_auth": {}, "destination_auth": {},
                      "subscription_auth_roles": {}},
    "replication_clusters": [], "bundles": None, "backlog_quota_map": {},
    "clusterDispatchRate": {}, "topicDispatchRate": {}, "subscriptionDispatchRate": {},
    "replicatorDispatchRate": {}, "clusterSubscribeRate": {}, "persistence": None,
    "deduplicationEnabled": None, "autoTopicCreationOverride": None,
    "autoSubscriptionCreationOverride": None, "publishMaxMessageRate": {},
    "latency_stats_sample_rate": {}, "message_ttl_in_seconds": None,
    "subscription_expiration_time_minutes": None, "retention_policies": None,
    "deleted": False, "encryption_required": False, "delayed_delivery_policies": None,
    "inactive_topic_policies": None, "subscription_auth_mode": "None",
    "max_producers_per_topic": None, "max_consumers_per_topic": None,
    "max_consumers_per_subscription": None, "max_unacked_messages_per_consumer": None,
    "max_unacked_messages_per_subscription": None, "max_subscriptions_per_topic": None,
    "compaction_threshold": None, "offload_threshold": -1, "offload_threshold_in_seconds": -1,
    "offload_deletion_lag_ms": None, "offload_policies": None,
    "schema_auto_update_compatibility_strategy": "Full",
    "schema_compatibility_strategy": "UNDEFINED", "is_allow_auto_update_schema": None,
    "schema_validation_enforced": False, "subscription_types_enabled": [], "properties": {},
    "resource_group_name": None, "entry_filters": None, "migrated": False,
    "dispatcher_pause_on_ack_state_persistent_enabled": False, "allowed_clusters": [],
}

RETENTION = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}
QUOTA = {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"}
GRANTS = {"namespace_auth": {"token-principal": ["consume", "produce"]},
          "destination_auth": {}}


def full_body(ns: str) -> dict[str, Any]:
    body = copy.deepcopy(DEFAULTS)
    body.update({
        "auth_policies": {**GRANTS, "destination_auth": {
            f"persistent://{ns}/t": {"reader": ["consume"]}}, "subscription_auth_roles": {}},
        "replication_clusters": ["standalone"],
        "retention_policies": RETENTION,
        "message_ttl_in_seconds": 3600,
        "deduplicationEnabled": True,
        "backlog_quota_map": {"destination_storage": QUOTA},
        "schema_compatibility_strategy": "BACKWARD",
        "compaction_threshold": 1048576,
    })
    return body


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as b:
        yield b


def namespace() -> str:
    return f"public/p-{uuid.uuid4().hex[:8]}"


def test_creation_keeps_the_policies_of_the_body(broker: EmbeddedBroker) -> None:
    ns = namespace()
    assert http(broker, "PUT", f"/admin/v2/namespaces/{ns}", full_body(ns)).status == 204
    base = f"/admin/v2/namespaces/{ns}"

    def check() -> None:
        assert http(broker, "GET", f"{base}/retention").json() == RETENTION
        assert http(broker, "GET", f"{base}/messageTTL").json() == 3600
        assert http(broker, "GET", f"{base}/deduplication").json() is True
        assert http(broker, "GET", f"{base}/schemaCompatibilityStrategy").json() == "BACKWARD"
        assert http(broker, "GET", f"{base}/compactionThreshold").json() == 1048576
        quotas = http(broker, "GET", f"{base}/backlogQuotaMap").json()
        assert quotas["destination_storage"]["limitSize"] == QUOTA["limitSize"]
        assert http(broker, "GET", f"{base}/permissions").json() == GRANTS["namespace_auth"]
        assert http(broker, "GET", f"/admin/v2/persistent/{ns}/t/permissions").json() == {
            "token-principal": ["consume", "produce"], "reader": ["consume"]}
        policies = http(broker, "GET", base).json()  # by Pulsar's keys
        assert policies["retention_policies"] == RETENTION
        assert policies["message_ttl_in_seconds"] == 3600
        assert policies["deduplicationEnabled"] is True
        assert policies["schema_compatibility_strategy"] == "BACKWARD"
        assert policies["compaction_threshold"] == 1048576
        assert policies["backlog_quota_map"]["destination_storage"]["policy"] == QUOTA["policy"]
        assert policies["auth_policies"]["namespace_auth"] == GRANTS["namespace_auth"]
        assert policies["replication_clusters"] == ["standalone"]

    check()
    broker.restart()
    check()


def test_pulsars_defaults_are_tolerated_and_get_round_trips(broker: EmbeddedBroker) -> None:
    ns = namespace()
    assert http(broker, "PUT", f"/admin/v2/namespaces/{ns}", DEFAULTS).status == 204
    policies = http(broker, "GET", f"/admin/v2/namespaces/{ns}").json()
    assert policies["retention_policies"] is None
    assert policies["deduplicationEnabled"] is None
    assert policies["schema_compatibility_strategy"] == "UNDEFINED"
    assert policies["auth_policies"]["namespace_auth"] == {}
    # What GET answers is a body PUT takes (a copy of a namespace).
    assert http(broker, "PUT", f"/admin/v2/namespaces/{ns}").status == 409
    copied = namespace()
    assert http(broker, "PUT", f"/admin/v2/namespaces/{copied}", policies).status == 204


@pytest.mark.parametrize(("field", "value"), [
    ("max_producers_per_topic", 5),
    ("subscription_auth_mode", "Prefix"),
    ("replication_clusters", ["standalone", "east"]),
    ("encryption_required", True),
    ("offload_threshold", 0),
    ("is_allow_auto_update_schema", False),
    ("auth_policies", {"subscription_auth_roles": {"s": ["r"]}}),
    ("message_ttl_in_seconds", -5),
    ("retention_policies", {"retentionTimeInMinutes": 5}),
    ("schema_compatibility_strategy", "SOMETIMES"),
    ("auth_policies", {"namespace_auth": {"r": ["fly"]}}),
    ("publishMaxMessageRate", {"standalone": {"publishThrottlingRateInMsg": 10}}),
])
def test_an_unimplemented_or_bad_policy_is_refused_by_name(
    broker: EmbeddedBroker, field: str, value: object
) -> None:
    ns = namespace()
    body = {**DEFAULTS, field: value}
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{ns}", body), 400, field)
    assert http(broker, "GET", f"/admin/v2/namespaces/{ns}").status == 404


def test_a_quota_over_the_retention_is_refused(broker: EmbeddedBroker) -> None:
    ns = namespace()
    body = {"retention_policies": {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1},
            "backlog_quota_map": {"destination_storage": QUOTA}}
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{ns}", body), 412, "Backlog Quota")
    assert http(broker, "GET", f"/admin/v2/namespaces/{ns}").status == 404


def test_the_policies_file_keeps_pulsars_keys_and_reads_the_old_ones(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    ns = namespace()
    base = f"/admin/v2/namespaces/{ns}"
    assert http(broker, "PUT", base).status == 204
    assert http(broker, "POST", f"{base}/retention", RETENTION).status == 204
    assert http(broker, "POST", f"{base}/messageTTL", 120).status == 204
    assert http(broker, "POST", f"{base}/compactionThreshold", 4096).status == 204
    assert http(broker, "PUT", f"{base}/schemaCompatibilityStrategy", "FORWARD").status == 204
    assert http(broker, "POST", f"{base}/backlogQuota", QUOTA).status == 204
    tenant, name = ns.split("/")
    path = tmp_path / "namespaces" / tenant / name / "policies.json"
    stored = json.loads(path.read_text())["policies"]
    assert set(stored) == {"retention_policies", "message_ttl_in_seconds",
                           "compaction_threshold", "schema_compatibility_strategy",
                           "backlog_quota_map"}

    # A data dir written before keeps the routes' names: they are read as they were.
    old = {"retention": RETENTION, "messageTTL": 60, "compactionThreshold": 2048,
           "schemaCompatibilityStrategy": "FULL",
           "backlogQuotaMap": {"destination_storage": QUOTA}}
    path.write_text(json.dumps({"version": 1, "policies": old}))
    broker.restart()
    assert http(broker, "GET", f"{base}/messageTTL").json() == 60
    assert http(broker, "GET", f"{base}/compactionThreshold").json() == 2048
    assert http(broker, "GET", f"{base}/schemaCompatibilityStrategy").json() == "FULL"
    policies = http(broker, "GET", base).json()
    assert policies["retention_policies"] == RETENTION
    assert policies["message_ttl_in_seconds"] == 60
    assert policies["backlog_quota_map"]["destination_storage"]["limitSize"] == QUOTA["limitSize"]
    assert not set(old) & set(policies)  # magnetar's names do not leak
