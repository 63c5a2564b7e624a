"""Pulsar's cluster routes::

    GET     /admin/v2/clusters              ["standalone", ...]
    GET     /admin/v2/clusters/{cluster}    its ClusterData
    PUT     /admin/v2/clusters/{cluster}    create: 204, or 409 if it exists
    DELETE  /admin/v2/clusters/{cluster}    204; 412 for standalone or one a tenant allows

This broker is the cluster ``standalone``, as a Pulsar standalone: its ClusterData is
not stored but made from the broker's addresses (the internal listener's, or the
advertised address and ports), so that it always says where clients reach it. Other
clusters are names a setup script registers (a Pulsar ClusterData body, kept as given
under ``<data_dir>/clusters/``) so that tenants may list them in ``allowedClusters``;
nothing is replicated to them. Setup scripts written for a Pulsar standalone send
``PUT /admin/v2/clusters/standalone`` unconditionally and take its 409.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

from magnetar.admin.tenants import fail
from magnetar.broker.policies.namespaces import CLUSTER
from magnetar.broker.session.listeners import select
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.fsutil import atomic_write, fsync_dir

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

CLUSTERS_DIR = "clusters"
BASE = "/admin/v2/clusters"


def cluster_names(data_dir: Path) -> list[str]:
    """``standalone`` and the clusters registered under ``data_dir``, sorted."""
    folder = Path(data_dir) / CLUSTERS_DIR
    stored = [p.stem for p in folder.glob("*.json")] if folder.is_dir() else []
    return sorted({CLUSTER, *stored})


def add_cluster_routes(
    app: web.Application, service: BrokerService, ports: Callable[[], tuple[int, int]]
) -> ClusterRoutes:
    """Register the routes; ``ports`` gives the admin HTTP and HTTPS ports the
    application serves on (0: not served), for the standalone cluster's service URLs."""
    routes = ClusterRoutes(service, ports)
    app.add_routes([
        web.get(BASE, routes.list_clusters),
        web.get(BASE + "/{cluster}", routes.get_cluster),
        web.put(BASE + "/{cluster}", routes.create_cluster),
        web.delete(BASE + "/{cluster}", routes.delete_cluster),
    ])
    return routes


class ClusterRoutes:
    def __init__(self, service: BrokerService, ports: Callable[[], tuple[int, int]]) -> None:
        self.service = service
        self.ports = ports
        self.folder = Path(service.config.data_dir) / CLUSTERS_DIR

    async def list_clusters(self, request: web.Request) -> web.Response:
        return web.json_response(cluster_names(self.service.config.data_dir))

    async def get_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        if name == CLUSTER:
            return web.json_response(self.standalone())
        path = self._path(name)
        if path is None or not path.is_file():
            fail(web.HTTPNotFound, "Cluster does not exist")
        return web.json_response(json.loads(path.read_bytes()))

    async def create_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        path = self._path(name)
        if path is None:
            fail(web.HTTPPreconditionFailed, "Cluster name is not valid")
        data = await _cluster_data(request)
        if name == CLUSTER or path.is_file():  # Pulsar's status and words
            fail(web.HTTPConflict, "Cluster already exists")
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data).encode())
        return web.Response(status=204)

    async def delete_cluster(self, request: web.Request) -> web.Response:
        name = request.match_info["cluster"]
        if name == CLUSTER:
            fail(web.HTTPPreconditionFailed, f"Cluster {CLUSTER} is this broker")
        path = self._path(name)
        if path is None or not path.is_file():
            fail(web.HTTPNotFound, "Cluster does not exist")
        registry = self.service.namespaces
        users = [t for t in registry.tenants() if name in registry.tenant(t).allowed_clusters]
        if users:
            fail(web.HTTPPreconditionFailed, f"Cluster not empty: tenants {users} allow it")
        path.unlink()
        fsync_dir(self.folder)
        return web.Response(status=204)

    def standalone(self) -> dict[str, Any]:
        """This broker's ClusterData, from what it advertises."""
        config = self.service.config
        listener = select(config, None)
        broker_url = listener.broker_url or listener.broker_url_tls
        host = urlsplit(broker_url).hostname or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        http_port, https_port = self.ports()
        data: dict[str, Any] = {
            "serviceUrl": listener.http_url or f"http://{host}:{http_port}",
            "brokerServiceUrl": listener.broker_url,
        }
        https = listener.http_url_tls or (f"https://{host}:{https_port}" if https_port else "")
        if https:
            data["serviceUrlTls"] = https
        if listener.broker_url_tls:
            data["brokerServiceUrlTls"] = listener.broker_url_tls
        data = {key: value for key, value in data.items() if value != ""}
        # The rest of what a Pulsar standalone answers (its defaults; nulls left out).
        data.update(brokerClientTlsEnabled=False, tlsAllowInsecureConnection=False,
                    brokerClientTlsEnabledWithKeyStore=False,
                    brokerClientTlsTrustStoreType="JKS", brokerClientTlsKeyStoreType="JKS",
                    migrated=False)
        return data

    def _path(self, name: str) -> Path | None:
        """The file of cluster ``name`` (None: not a valid cluster name)."""
        try:  # Pulsar's NamedEntity rule, as for tenants
            TopicName.parse(f"persistent://{name}/ns/x")
        except InvalidTopicName:
            return None
        return self.folder / f"{name}.json"


async def _cluster_data(request: web.Request) -> dict[str, Any]:
    text = await request.text()
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if not isinstance(data, dict):
        fail(web.HTTPBadRequest, "the body must be a JSON object (Pulsar's ClusterData)")
    return data

