"""Pulsar's cluster routes against a real broker: PUT creates (204) or answers 409 for a
cluster that exists (``standalone`` always does, as a setup script written for a Pulsar
standalone finds), GET lists and reads them, tenants may allow a registered cluster,
DELETE refuses one a tenant allows; registrations survive a restart; the standalone
cluster's URLs are the broker's advertised addresses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import http

from magnetar.testing import EmbeddedBroker

from .test_tenants_namespaces import refused

EAST = {"serviceUrl": "http://east.example.com:8080",
        "brokerServiceUrl": "pulsar://east.example.com:6650"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(admin=True, data_dir=tmp_path) as b:
        yield b


def test_put_creates_a_cluster_once(broker: EmbeddedBroker) -> None:
    assert refused(http(broker, "PUT", "/admin/v2/clusters/standalone", {
        "serviceUrl": "http://localhost:8080"}), 409, "already exists")
    assert http(broker, "PUT", "/admin/v2/clusters/east", EAST).status == 204
    assert refused(http(broker, "PUT", "/admin/v2/clusters/east", EAST), 409, "already exists")
    assert http(broker, "GET", "/admin/v2/clusters").json() == ["east", "standalone"]
    assert http(broker, "GET", "/admin/v2/clusters/east").json() == EAST
    assert refused(http(broker, "PUT", "/admin/v2/clusters/bad%20name", EAST), 412, "not valid")
    assert refused(http(broker, "PUT", "/admin/v2/clusters/west", [1]), 400, "JSON object")
    # a tenant may allow it now, and then it is not deleted
    info = {"adminRoles": [], "allowedClusters": ["standalone", "east"]}
    assert http(broker, "PUT", "/admin/v2/tenants/t-east", info).status == 204
    assert refused(http(broker, "DELETE", "/admin/v2/clusters/east"), 412, "t-east")
    assert refused(http(broker, "DELETE", "/admin/v2/clusters/standalone"), 412, "standalone")
    assert http(broker, "DELETE", "/admin/v2/tenants/t-east").status == 204
    assert http(broker, "DELETE", "/admin/v2/clusters/east").status == 204
    assert refused(http(broker, "GET", "/admin/v2/clusters/east"), 404, "Cluster")
    assert refused(http(broker, "PUT", "/admin/v2/tenants/t-east", info), 412, "east")


def test_clusters_survive_a_restart(broker: EmbeddedBroker) -> None:
    assert http(broker, "PUT", "/admin/v2/clusters/east", EAST).status == 204
    broker.restart()
    assert http(broker, "GET", "/admin/v2/clusters/east").json() == EAST


def test_standalone_reflects_the_broker_addresses(broker: EmbeddedBroker) -> None:
    cluster = http(broker, "GET", "/admin/v2/clusters/standalone").json()
    assert cluster["brokerServiceUrl"] == broker.service_url
    assert cluster["serviceUrl"] == broker.admin_url.replace("localhost", "127.0.0.1")
    assert "brokerServiceUrlTls" not in cluster


def test_standalone_reflects_the_advertised_listeners(tmp_path: Path) -> None:
    listeners = ("internal:pulsar://10.1.2.3:6650,internal:pulsar+ssl://10.1.2.3:6651,"
                 "internal:http://10.1.2.3:8080,internal:https://10.1.2.3:8443,"
                 "external:pulsar://broker.example.com:6650")
    with EmbeddedBroker(admin=True, data_dir=tmp_path, advertised_listeners=listeners) as b:
        assert http(b, "GET", "/admin/v2/clusters/standalone").json() == {
            "serviceUrl": "http://10.1.2.3:8080",
            "serviceUrlTls": "https://10.1.2.3:8443",
            "brokerServiceUrl": "pulsar://10.1.2.3:6650",
            "brokerServiceUrlTls": "pulsar+ssl://10.1.2.3:6651",
            "brokerClientTlsEnabled": False,
            "tlsAllowInsecureConnection": False,
            # Pulsar's defaults, as a Pulsar standalone answers them
            "brokerClientTlsEnabledWithKeyStore": False,
            "brokerClientTlsTrustStoreType": "JKS",
            "brokerClientTlsKeyStoreType": "JKS",
            "migrated": False,
        }
