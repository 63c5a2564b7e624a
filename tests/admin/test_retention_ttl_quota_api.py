"""Retention, message TTL and backlog quotas through the admin REST API, against a real
broker: Pulsar's paths and JSON, set/get/delete per namespace and per topic, which one
is in force (topic over namespace over the broker's settings) through ``?applied=true``,
Pulsar's refusals, partitioned topics, persistence across a restart. What the broker
does with them: tests/broker/test_policies_enforced.py."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admin_http import http

from magnetar.testing import EmbeddedBroker

BROKER_DEFAULTS: dict[str, Any] = {
    "default_retention_time_in_minutes": 30,
    "default_retention_size_in_mb": -1,
    "ttl_duration_default_in_seconds": 3600,
    "backlog_quota_default_limit_bytes": 1 << 30,
    "backlog_quota_default_limit_second": -1,
    "backlog_quota_default_retention_policy": "producer_exception",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(
        admin=True, data_dir=tmp_path_factory.mktemp("retention"), **BROKER_DEFAULTS
    ) as b:
        yield b


@pytest.fixture
def namespace(broker: EmbeddedBroker) -> str:
    """A namespace of this test's own, created where namespaces must exist (a broker
    without those routes lets any namespace be used)."""
    name = f"acme/ns-{uuid.uuid4().hex[:8]}"
    http(broker, "PUT", "/admin/v2/tenants/acme",
         {"adminRoles": [], "allowedClusters": ["standalone"]})
    http(broker, "PUT", f"/admin/v2/namespaces/{name}")
    return name


@pytest.fixture
def topic(broker: EmbeddedBroker, namespace: str) -> str:
    name = f"persistent://{namespace}/t-{uuid.uuid4().hex[:8]}"
    assert http(broker, "PUT", topic_base(name)).status == 204
    return name


def ns_base(namespace: str) -> str:
    return f"/admin/v2/namespaces/{namespace}"


def topic_base(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


QUOTA = {"limitSize": 1024, "limitTime": -1, "policy": "consumer_backlog_eviction"}
QUOTA_JSON = {"limit": 1024, "limitSize": 1024, "limitTime": -1,
              "policy": "consumer_backlog_eviction"}
AGE_QUOTA = {"limitTime": 120, "policy": "producer_request_hold"}
AGE_QUOTA_JSON = {"limit": -1, "limitSize": -1, "limitTime": 120,
                  "policy": "producer_request_hold"}


# ------------------------------------------------------------------ namespaces


def test_namespace_retention_set_get_delete(broker: EmbeddedBroker, namespace: str) -> None:
    path = ns_base(namespace) + "/retention"
    assert http(broker, "GET", path).status == 204  # unset
    policy = {"retentionTimeInMinutes": 60, "retentionSizeInMB": -1}
    assert http(broker, "POST", path, policy).status == 204
    assert http(broker, "GET", path).json() == policy
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", path).status == 204


@pytest.mark.parametrize("body", [
    {"retentionTimeInMinutes": 0, "retentionSizeInMB": 10},  # a single 0
    {"retentionTimeInMinutes": -2, "retentionSizeInMB": -1},
    {"retentionTimeInMinutes": 5, "retentionSizeInMB": -5},
])
def test_retention_pulsar_refuses_is_refused(
    broker: EmbeddedBroker, namespace: str, body: dict[str, int]
) -> None:
    reply = http(broker, "POST", ns_base(namespace) + "/retention", body)
    assert reply.status == 412
    assert http(broker, "GET", ns_base(namespace) + "/retention").status == 204  # not stored


def test_namespace_ttl_set_get_delete(broker: EmbeddedBroker, namespace: str) -> None:
    path = ns_base(namespace) + "/messageTTL"
    assert http(broker, "GET", path).status == 204
    assert http(broker, "POST", path, 120).status == 204
    assert http(broker, "GET", path).json() == 120
    assert http(broker, "POST", path, -1).status == 412
    assert http(broker, "POST", path, b"soon").status == 400
    assert http(broker, "GET", path).json() == 120
    assert http(broker, "DELETE", path).status == 204
    assert http(broker, "GET", path).status == 204


def test_namespace_backlog_quotas_by_type(broker: EmbeddedBroker, namespace: str) -> None:
    base = ns_base(namespace)
    assert http(broker, "GET", base + "/backlogQuotaMap").json() == {}
    assert http(broker, "POST", base + "/backlogQuota", QUOTA).status == 204  # default type
    assert http(broker, "POST", base + "/backlogQuota?backlogQuotaType=message_age",
                AGE_QUOTA).status == 204
    assert http(broker, "GET", base + "/backlogQuotaMap").json() == {
        "destination_storage": QUOTA_JSON, "message_age": AGE_QUOTA_JSON,
    }
    assert http(broker, "DELETE",
                base + "/backlogQuota?backlogQuotaType=destination_storage").status == 204
    assert http(broker, "GET", base + "/backlogQuotaMap").json() == {
        "message_age": AGE_QUOTA_JSON,
    }
    assert http(broker, "POST", base + "/backlogQuota?backlogQuotaType=bytes",
                QUOTA).status == 400
    assert http(broker, "POST", base + "/backlogQuota",
                {"limitSize": 10, "policy": "drop_it"}).status == 412


def test_a_quota_must_stay_under_the_retention(broker: EmbeddedBroker, namespace: str) -> None:
    base = ns_base(namespace)
    assert http(broker, "POST", base + "/retention",
                {"retentionTimeInMinutes": -1, "retentionSizeInMB": 1}).status == 204
    big = {"limitSize": 2 * 1024 * 1024, "policy": "producer_exception"}
    reply = http(broker, "POST", base + "/backlogQuota", big)
    assert reply.status == 412
    assert "retention" in reply.text.lower()
    assert http(broker, "POST", base + "/backlogQuota",
                {"limitSize": 1024, "limitTime": 600, "policy": "producer_exception"}).status == 204
    # And the other way round: retention may not shrink below the quota (10 min).
    reply = http(broker, "POST", base + "/retention",
                 {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1})
    assert reply.status == 412
    assert http(broker, "GET", base + "/retention").json() == {
        "retentionTimeInMinutes": -1, "retentionSizeInMB": 1,
    }
    assert http(broker, "POST", base + "/retention",
                {"retentionTimeInMinutes": 11, "retentionSizeInMB": -1}).status == 204


# ------------------------------------------------------------------ topics


def test_topic_policies_override_namespace_which_overrides_the_broker(
    broker: EmbeddedBroker, namespace: str, topic: str
) -> None:
    ns, tp = ns_base(namespace), topic_base(topic)
    # Nothing set: the broker's settings are in force.
    assert http(broker, "GET", tp + "/retention").status == 204
    assert http(broker, "GET", tp + "/retention?applied=true").json() == {
        "retentionTimeInMinutes": 30, "retentionSizeInMB": -1,
    }
    assert http(broker, "GET", tp + "/messageTTL?applied=true").json() == 3600
    default_quota = {"limit": 1 << 30, "limitSize": 1 << 30, "limitTime": -1,
                     "policy": "producer_exception"}
    assert http(broker, "GET", tp + "/backlogQuotaMap?applied=true").json() == {
        "destination_storage": default_quota, "message_age": default_quota,
    }
    assert http(broker, "GET", tp + "/backlogQuotaMap").json() == {}

    # The namespace's.
    ns_retention = {"retentionTimeInMinutes": 10, "retentionSizeInMB": 100}
    assert http(broker, "POST", ns + "/retention", ns_retention).status == 204
    assert http(broker, "POST", ns + "/messageTTL", 60).status == 204
    assert http(broker, "POST", ns + "/backlogQuota", QUOTA).status == 204
    assert http(broker, "GET", tp + "/retention?applied=true").json() == ns_retention
    assert http(broker, "GET", tp + "/messageTTL?applied=true").json() == 60
    assert http(broker, "GET", tp + "/backlogQuotaMap?applied=true").json() == {
        "destination_storage": QUOTA_JSON,
    }

    # The topic's, set the way Pulsar's admin client sends them.
    topic_retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 500}
    assert http(broker, "POST", tp + "/retention", topic_retention).status == 204
    assert http(broker, "POST", tp + "/messageTTL?messageTTL=0").status == 204  # 0: off
    assert http(broker, "POST", tp + "/backlogQuota?backlogQuotaType=message_age",
                AGE_QUOTA).status == 204
    assert http(broker, "GET", tp + "/retention").json() == topic_retention
    assert http(broker, "GET", tp + "/retention?applied=true").json() == topic_retention
    assert http(broker, "GET", tp + "/messageTTL").json() == 0
    assert http(broker, "GET", tp + "/messageTTL?applied=true").json() == 0
    assert http(broker, "GET", tp + "/backlogQuotaMap").json() == {"message_age": AGE_QUOTA_JSON}
    assert http(broker, "GET", tp + "/backlogQuotaMap?applied=true").json() == {
        "message_age": AGE_QUOTA_JSON,
    }
    assert http(broker, "POST", tp + "/messageTTL?messageTTL=-5").status == 412

    # Deleting the topic's brings the namespace's back.
    for name in ("/retention", "/messageTTL", "/backlogQuota?backlogQuotaType=message_age"):
        assert http(broker, "DELETE", tp + name).status == 204
    assert http(broker, "GET", tp + "/retention?applied=true").json() == ns_retention
    assert http(broker, "GET", tp + "/messageTTL?applied=true").json() == 60
    assert http(broker, "GET", tp + "/messageTTL").status == 204


def test_the_stats_show_the_quotas_in_force(
    broker: EmbeddedBroker, topic: str
) -> None:
    tp = topic_base(topic)
    assert http(broker, "POST", tp + "/backlogQuota", QUOTA).status == 204
    assert http(broker, "POST", tp + "/backlogQuota?backlogQuotaType=message_age",
                AGE_QUOTA).status == 204
    stats = http(broker, "GET", tp + "/stats").json()
    assert stats["backlogQuotaLimitSize"] == 1024
    assert stats["backlogQuotaLimitTime"] == 120
    assert stats["backlogSize"] == 0
    assert stats["oldestBacklogMessageAgeSeconds"] == -1


def test_a_missing_topic_is_404(broker: EmbeddedBroker, namespace: str) -> None:
    missing = topic_base(f"persistent://{namespace}/nope-{uuid.uuid4().hex[:6]}")
    for method, name, body in (
        ("GET", "/retention", None),
        ("POST", "/retention", {"retentionTimeInMinutes": 1, "retentionSizeInMB": -1}),
        ("POST", "/messageTTL?messageTTL=5", None),
        ("GET", "/backlogQuotaMap", None),
    ):
        assert http(broker, method, missing + name, body).status == 404


def test_a_partitioned_topic_sets_its_partitions(broker: EmbeddedBroker, namespace: str) -> None:
    name = f"persistent://{namespace}/parted-{uuid.uuid4().hex[:6]}"
    assert http(broker, "PUT", topic_base(name) + "/partitions", b"3").status == 204
    retention = {"retentionTimeInMinutes": 5, "retentionSizeInMB": -1}
    assert http(broker, "POST", topic_base(name) + "/retention", retention).status == 204
    assert http(broker, "POST", topic_base(name) + "/messageTTL?messageTTL=9").status == 204
    assert http(broker, "GET", topic_base(name) + "/retention").json() == retention
    for index in range(3):
        partition = topic_base(f"{name}-partition-{index}")
        assert http(broker, "GET", partition + "/retention").json() == retention
        assert http(broker, "GET", partition + "/messageTTL").json() == 9


def test_policies_survive_a_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    broker = EmbeddedBroker(admin=True, data_dir=tmp_path_factory.mktemp("restart"))
    broker.start()
    try:
        namespace = f"acme/ns-{uuid.uuid4().hex[:8]}"
        http(broker, "PUT", "/admin/v2/tenants/acme",
             {"adminRoles": [], "allowedClusters": ["standalone"]})
        http(broker, "PUT", f"/admin/v2/namespaces/{namespace}")
        topic = f"persistent://{namespace}/kept"
        assert http(broker, "PUT", topic_base(topic)).status == 204
        ns, tp = ns_base(namespace), topic_base(topic)
        ns_retention = {"retentionTimeInMinutes": 15, "retentionSizeInMB": -1}
        topic_retention = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 7}
        assert http(broker, "POST", ns + "/retention", ns_retention).status == 204
        assert http(broker, "POST", ns + "/messageTTL", 45).status == 204
        assert http(broker, "POST", ns + "/backlogQuota", QUOTA).status == 204
        assert http(broker, "POST", tp + "/retention", topic_retention).status == 204
        assert http(broker, "POST", tp + "/messageTTL?messageTTL=30").status == 204
        assert http(broker, "POST", tp + "/backlogQuota?backlogQuotaType=message_age",
                    AGE_QUOTA).status == 204
        broker.restart()
        assert http(broker, "GET", ns + "/retention").json() == ns_retention
        assert http(broker, "GET", ns + "/messageTTL").json() == 45
        assert http(broker, "GET", ns + "/backlogQuotaMap").json() == {
            "destination_storage": QUOTA_JSON,
        }
        assert http(broker, "GET", tp + "/retention").json() == topic_retention
        assert http(broker, "GET", tp + "/messageTTL").json() == 30
        assert http(broker, "GET", tp + "/backlogQuotaMap").json() == {
            "message_age": AGE_QUOTA_JSON,
        }
    finally:
        broker.close()
