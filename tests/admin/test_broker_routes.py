"""Pulsar's broker-level routes as pulsar-admin calls them (``brokers list``,
``brokers version``, ``brokers leader-broker``, ``namespaces bundles``... no longer 404
or 405), ``broker-stats`` answered with a named 404, and the standalone cluster's
ClusterData with its URLs and Pulsar's defaults; the official client reaches the
broker through the addresses they give."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pulsar
import pytest
from admin_http import http

import magnetar
from magnetar.testing import EmbeddedBroker


@pytest.fixture(scope="module")
def broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True) as b:
        yield b


def test_brokers_list_version_and_leader(broker: EmbeddedBroker) -> None:
    cluster = http(broker, "GET", "/admin/v2/clusters/standalone").json()
    address = cluster["serviceUrl"].split("://", 1)[1]
    assert http(broker, "GET", "/admin/v2/brokers/standalone").json() == [address]
    version = http(broker, "GET", "/admin/v2/brokers/version")
    assert version.status == 200 and version.text == magnetar.__version__
    leader = http(broker, "GET", "/admin/v2/brokers/leaderBroker").json()
    assert leader == {"serviceUrl": cluster["serviceUrl"], "brokerId": address}
    missing = http(broker, "GET", "/admin/v2/brokers/nowhere")
    assert missing.status == 404 and missing.json() == {"reason": "Cluster does not exist"}
    assert http(broker, "GET", "/admin/v2/brokers/health").text == "ok"  # still itself


def test_cluster_data_has_every_url_and_pulsars_defaults(
    broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> None:
    data = http(broker, "GET", "/admin/v2/clusters/standalone").json()
    assert data["serviceUrl"] == broker.admin_url.replace("localhost", "127.0.0.1")
    assert data["brokerServiceUrl"] == broker.service_url
    assert data["brokerClientTlsTrustStoreType"] == "JKS" and data["migrated"] is False
    # Both URLs work: the binary one for the client, the HTTP one for lookups.
    for url in (data["brokerServiceUrl"], data["serviceUrl"]):
        client = client_factory(url)
        producer = client.create_producer("persistent://public/default/cluster-urls")
        producer.send(b"x")


def test_namespace_bundles_and_broker_stats(broker: EmbeddedBroker) -> None:
    bundles = http(broker, "GET", "/admin/v2/namespaces/public/default/bundles")
    assert bundles.status == 200
    assert bundles.json() == {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}
    missing = http(broker, "GET", "/admin/v2/namespaces/public/nothing-here/bundles")
    assert missing.status == 404 and "reason" in missing.json()
    for stat in ("metrics", "topics", "mbeans"):
        reply = http(broker, "GET", f"/admin/v2/broker-stats/{stat}")
        assert reply.status == 404
        assert "/metrics" in reply.json()["reason"]
