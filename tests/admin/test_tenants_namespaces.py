"""Clusters, tenants and namespaces over the admin REST API, against a real broker.

Pulsar's routes and answers: create, read, list, update and delete, with 404 for what
does not exist (also on every route under a missing namespace), 409 for what exists
already or is not empty, 412 for unknown clusters and invalid names, 405 for forced
deletions; the official client's topics keep a namespace from being deleted; what was
created survives a restart, ``public/default`` comes back, a deleted namespace stays
deleted, and a data directory written before namespaces were registered keeps its topics.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import Reply, http
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker

TENANT_INFO = {"adminRoles": [], "allowedClusters": ["standalone"]}


def refused(reply: Reply, status: int, reason: str) -> bool:
    """Pulsar's error answer: the status and a JSON body whose reason says ``reason``."""
    assert reply.status == status, reply
    assert reason in reply.json()["reason"], reply
    return True


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path_factory.mktemp("tenants")) as b:
        yield b


@pytest.fixture
def client(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> pulsar.Client:
    return client_factory(broker.service_url, operation_timeout_seconds=30)


@pytest.fixture
def tenant() -> str:
    return f"tn-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------ what a broker starts with


def test_a_standalone_broker_starts_with_its_cluster_tenants_and_namespaces(
    broker: EmbeddedBroker,
) -> None:
    assert http(broker, "GET", "/admin/v2/clusters").json() == ["standalone"]
    cluster = http(broker, "GET", "/admin/v2/clusters/standalone").json()
    assert cluster["brokerServiceUrl"] == broker.service_url
    assert refused(http(broker, "GET", "/admin/v2/clusters/elsewhere"), 404, "Cluster")
    tenants = http(broker, "GET", "/admin/v2/tenants").json()
    assert {"public", "pulsar"} <= set(tenants)
    assert http(broker, "GET", "/admin/v2/tenants/public").json() == TENANT_INFO
    assert http(broker, "GET", "/admin/v2/namespaces/public").json() == ["public/default"]
    assert http(broker, "GET", "/admin/v2/namespaces/pulsar").json() == ["pulsar/system"]
    policies = http(broker, "GET", "/admin/v2/namespaces/public/default").json()
    assert policies["replication_clusters"] == ["standalone"]


# ------------------------------------------------------------------ tenants


def test_tenant_create_read_update_delete(broker: EmbeddedBroker, tenant: str) -> None:
    path = f"/admin/v2/tenants/{tenant}"
    assert refused(http(broker, "GET", path), 404, "Tenant does not exist")
    assert http(broker, "PUT", path, {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
                ).status == 204
    assert refused(http(broker, "PUT", path, TENANT_INFO), 409, "Tenant already exists")
    assert http(broker, "GET", path).json() == {
        "adminRoles": ["ops"], "allowedClusters": ["standalone"],
    }
    assert tenant in http(broker, "GET", "/admin/v2/tenants").json()
    assert http(broker, "POST", path, TENANT_INFO).status == 204
    assert http(broker, "GET", path).json() == TENANT_INFO
    assert http(broker, "GET", f"/admin/v2/namespaces/{tenant}").json() == []

    assert refused(http(broker, "DELETE", path + "?force=true"), 405, "forced deletion")
    assert http(broker, "DELETE", path).status == 204
    assert refused(http(broker, "DELETE", path), 404, "Tenant does not exist")
    assert refused(http(broker, "POST", path, TENANT_INFO), 404, "Tenant does not exist")
    assert tenant not in http(broker, "GET", "/admin/v2/tenants").json()
    assert refused(http(broker, "GET", f"/admin/v2/namespaces/{tenant}"), 404, "Tenant")


def test_tenant_refusals(broker: EmbeddedBroker, tenant: str) -> None:
    path = f"/admin/v2/tenants/{tenant}"
    bad_cluster = {"adminRoles": [], "allowedClusters": ["elsewhere"]}
    assert refused(http(broker, "PUT", path, bad_cluster), 412, "Clusters do not exist")
    assert refused(http(broker, "PUT", path, {"adminRoles": "x"}), 400, "adminRoles")
    assert refused(http(broker, "PUT", "/admin/v2/tenants/bad%20name", TENANT_INFO), 412,
                   "not valid")
    assert http(broker, "GET", path).status == 404  # nothing was created
    # An empty body is a tenant of this cluster (Pulsar's CLI sends the cluster list).
    assert http(broker, "PUT", path).status == 204
    assert http(broker, "GET", path).json() == TENANT_INFO


# ------------------------------------------------------------------ namespaces


def test_namespace_create_list_get_delete(broker: EmbeddedBroker, tenant: str) -> None:
    ns = f"{tenant}/orders"
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{ns}"), 404, "Tenant does not exist")
    assert http(broker, "PUT", f"/admin/v2/tenants/{tenant}", TENANT_INFO).status == 204
    assert refused(http(broker, "GET", f"/admin/v2/namespaces/{ns}"), 404, "does not exist")
    assert http(broker, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    assert http(broker, "PUT", f"/admin/v2/namespaces/{tenant}/audit", {}).status == 204
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{ns}"), 409, "already exists")
    assert http(broker, "GET", f"/admin/v2/namespaces/{tenant}").json() == [
        f"{tenant}/audit", ns,
    ]
    assert http(broker, "GET", f"/admin/v2/namespaces/{ns}").json()["replication_clusters"] == [
        "standalone"
    ]
    assert refused(http(broker, "DELETE", f"/admin/v2/tenants/{tenant}"), 409,
                   "The tenant still has active namespaces")

    assert refused(http(broker, "DELETE", f"/admin/v2/namespaces/{ns}?force=true"), 405,
                   "forced deletion")
    assert http(broker, "DELETE", f"/admin/v2/namespaces/{ns}").status == 204
    assert refused(http(broker, "DELETE", f"/admin/v2/namespaces/{ns}"), 404, "does not exist")
    assert http(broker, "GET", f"/admin/v2/namespaces/{tenant}").json() == [f"{tenant}/audit"]
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{tenant}/bad%20ns"), 412,
                   "not valid")
    assert refused(http(broker, "PUT", f"/admin/v2/namespaces/{tenant}/x", [1]), 400, "JSON")


def test_a_namespace_with_topics_is_not_deleted(
    broker: EmbeddedBroker, client: pulsar.Client, tenant: str
) -> None:
    ns = f"{tenant}/busy"
    broker.create_namespace(ns)
    producer = client.create_producer(f"persistent://{ns}/t")
    producer.send(b"kept")
    producer.close()
    assert refused(http(broker, "DELETE", f"/admin/v2/namespaces/{ns}"), 409,
                   "Cannot delete non empty namespace")
    assert http(broker, "PUT", f"/admin/v2/persistent/{ns}/parted/partitions", 2).status == 204
    assert http(broker, "DELETE", f"/admin/v2/persistent/{ns}/t").status == 204
    assert refused(http(broker, "DELETE", f"/admin/v2/namespaces/{ns}"), 409, "non empty")
    assert http(broker, "DELETE", f"/admin/v2/persistent/{ns}/parted/partitions").status == 204
    assert http(broker, "DELETE", f"/admin/v2/namespaces/{ns}").status == 204
    with pytest.raises(pulsar.TopicNotFound):
        client.create_producer(f"persistent://{ns}/t")


def test_routes_under_a_missing_namespace_answer_404(broker: EmbeddedBroker, tenant: str) -> None:
    ns = f"{tenant}/nowhere"
    for method, path in [
        ("GET", f"/admin/v2/persistent/{ns}"),
        ("GET", f"/admin/v2/non-persistent/{ns}/partitioned"),
        ("PUT", f"/admin/v2/persistent/{ns}/t"),
        ("PUT", f"/admin/v2/persistent/{ns}/t/partitions"),
        ("GET", f"/admin/v2/persistent/{ns}/t/partitions"),
        ("GET", f"/admin/v2/persistent/{ns}/t/stats"),
        ("GET", f"/admin/v2/namespaces/{ns}/topics"),
        ("POST", f"/admin/v2/namespaces/{ns}/redeliveryBackoff"),
        ("GET", f"/admin/v2/namespaces/{ns}/deduplication"),
        ("GET", f"/admin/v2/schemas/{ns}/t/schema"),
        ("GET", f"/lookup/v2/topic/persistent/{ns}/t"),
    ]:
        body = 3 if method == "PUT" and path.endswith("partitions") else None
        reply = http(broker, method, path, body)
        assert reply.status == 404, (method, path, reply)
        assert reply.json() == {"reason": f"Namespace {ns} does not exist"}, (method, path)
    # Nothing was written for it.
    assert not (broker.data_dir / "namespaces" / tenant).exists()
    assert not (broker.data_dir / "partitioned" / tenant).exists()
    # A bad domain is still the route's to refuse.
    assert http(broker, "GET", f"/admin/v2/elsewhere/{ns}").status == 412


def test_a_deleted_namespace_forgets_its_policies(broker: EmbeddedBroker, tenant: str) -> None:
    ns = f"{tenant}/again"
    broker.create_namespace(ns)
    backoff = {"minDelayMs": 100, "maxDelayMs": 800, "multiplier": 2.0}
    assert http(broker, "POST", f"/admin/v2/namespaces/{ns}/redeliveryBackoff", backoff
                ).status == 204
    assert http(broker, "POST", f"/admin/v2/namespaces/{ns}/deduplication", True).status == 204
    assert http(broker, "POST", f"/admin/v2/namespaces/{ns}/compactionThreshold", 1024
                ).status == 204
    assert http(broker, "POST", f"/admin/v2/namespaces/{ns}/messageTTL", 60).status == 204
    for policy in ("redeliveryBackoff", "deduplication", "compactionThreshold", "messageTTL"):
        assert http(broker, "GET", f"/admin/v2/namespaces/{ns}/{policy}").status == 200, policy
    assert http(broker, "DELETE", f"/admin/v2/namespaces/{ns}").status == 204
    assert not (broker.data_dir / "namespaces" / tenant / "again").exists()
    assert http(broker, "PUT", f"/admin/v2/namespaces/{ns}").status == 204
    for policy in ("redeliveryBackoff", "deduplication", "compactionThreshold", "messageTTL"):
        reply = http(broker, "GET", f"/admin/v2/namespaces/{ns}/{policy}")
        assert reply.status == 204 or reply.json() is None, (policy, reply)


# ------------------------------------------------------------------ persistence


def test_tenants_and_namespaces_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
        assert http(broker, "PUT", "/admin/v2/tenants/acme", info).status == 204
        assert http(broker, "PUT", "/admin/v2/namespaces/acme/kept").status == 204
        assert http(broker, "PUT", "/admin/v2/namespaces/acme/dropped").status == 204
        assert http(broker, "DELETE", "/admin/v2/namespaces/acme/dropped").status == 204
        assert http(broker, "DELETE", "/admin/v2/namespaces/public/default").status == 204
        assert http(broker, "GET", "/admin/v2/namespaces/public").json() == []
        broker.restart()
        assert http(broker, "GET", "/admin/v2/tenants/acme").json() == info
        assert http(broker, "GET", "/admin/v2/namespaces/acme").json() == ["acme/kept"]
        # As a Pulsar standalone, the default namespace is put back at each start.
        assert http(broker, "GET", "/admin/v2/namespaces/public").json() == ["public/default"]


def test_a_topic_emptied_namespace_stays_deleted_after_a_restart(tmp_path: Path) -> None:
    """A deleted topic leaves its namespace's directories behind; deleting the
    namespace removes them, so the next start does not take it for one in use."""
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        broker.create_namespace("acme/brief")
        assert http(broker, "PUT", "/admin/v2/persistent/acme/brief/t").status == 204
        assert http(broker, "DELETE", "/admin/v2/persistent/acme/brief/t").status == 204
        assert http(broker, "DELETE", "/admin/v2/namespaces/acme/brief").status == 204
        broker.restart()
        assert http(broker, "GET", "/admin/v2/namespaces/acme").json() == []


def test_an_older_data_dir_keeps_the_namespaces_its_topics_are_in(tmp_path: Path) -> None:
    """A data directory from before namespaces were registered: its topics' namespaces
    (and those with policies) exist at the next start, and the topics keep their data."""
    topic = "persistent://legacy/orders/t"
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        broker.create_namespace("legacy/orders")
        broker.create_namespace("legacy/tuned")
        backoff = {"minDelayMs": 100, "maxDelayMs": 800, "multiplier": 2.0}
        assert http(broker, "POST", "/admin/v2/namespaces/legacy/tuned/redeliveryBackoff",
                    backoff).status == 204
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                               logger=quiet_logger())
        try:
            client.create_producer(topic).send(b"from before")
        finally:
            client.close()
    # What an earlier version left: no registry of tenants and namespaces at all.
    shutil.rmtree(tmp_path / "tenants")
    for marker in (tmp_path / "namespaces").glob("*/*/namespace.json"):
        marker.unlink()
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as broker:
        assert http(broker, "GET", "/admin/v2/namespaces/legacy").json() == [
            "legacy/orders", "legacy/tuned",
        ]
        assert http(broker, "GET", "/admin/v2/tenants/legacy").json() == TENANT_INFO
        assert http(broker, "GET", "/admin/v2/namespaces/legacy/tuned/redeliveryBackoff"
                    ).json() == backoff
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=30,
                               logger=quiet_logger())
        try:
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert reader.read_next(10_000).data() == b"from before"
        finally:
            client.close()
