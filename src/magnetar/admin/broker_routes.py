"""Pulsar's broker-level admin routes, as a one-broker cluster answers them::

    GET /admin/v2/brokers/{cluster}              ["host:port"]: this broker's web address
    GET /admin/v2/brokers/version                the broker's version (plain text, as Pulsar)
    GET /admin/v2/brokers/leaderBroker           this broker (it leads itself)
    GET /admin/v2/namespaces/{tenant}/{namespace}/bundles
                                                 BundlesData: one bundle, the full range
    GET /admin/v2/broker-stats/{stat}            404 naming /metrics (not implemented)

A cluster registered by a setup script has no brokers here (``[]``); an unknown one is
404 as ``GET /admin/v2/clusters/{cluster}`` answers it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from aiohttp import web

import magnetar
from magnetar.admin.clusters import cluster_names
from magnetar.admin.tenants import fail
from magnetar.broker.policies.namespaces import CLUSTER

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

# Pulsar's BundlesData of a namespace that is one bundle.
ONE_BUNDLE = {"boundaries": ["0x00000000", "0xffffffff"], "numBundles": 1}


def add_broker_routes(
    app: web.Application, service: BrokerService, standalone: Callable[[], dict[str, Any]]
) -> None:
    """Register the routes; ``standalone`` gives this cluster's ClusterData (its URLs)."""
    routes = BrokerRoutes(service, standalone)
    app.add_routes([
        web.get("/admin/v2/brokers/version", routes.version),
        web.get("/admin/v2/brokers/leaderBroker", routes.leader),
        web.get("/admin/v2/brokers/{cluster}", routes.active_brokers),
        web.get("/admin/v2/namespaces/{tenant}/{namespace}/bundles", routes.bundles),
        web.get("/admin/v2/broker-stats/{stat}", routes.broker_stats),
    ])


class BrokerRoutes:
    def __init__(self, service: BrokerService, standalone: Callable[[], dict[str, Any]]) -> None:
        self.service = service
        self.standalone = standalone

    def _address(self) -> str:
        """This broker's web service address, ``host:port``, as Pulsar lists brokers."""
        return urlsplit(str(self.standalone()["serviceUrl"])).netloc

    async def version(self, request: web.Request) -> web.Response:
        return web.Response(text=magnetar.__version__)

    async def leader(self, request: web.Request) -> web.Response:
        address = self._address()
        return web.json_response({"serviceUrl": self.standalone()["serviceUrl"],
                                  "brokerId": address})

    async def active_brokers(self, request: web.Request) -> web.Response:
        cluster = request.match_info["cluster"]
        if cluster == CLUSTER:
            return web.json_response([self._address()])
        if cluster in cluster_names(Path(self.service.config.data_dir)):
            return web.json_response([])  # registered, served by no broker here
        fail(web.HTTPNotFound, "Cluster does not exist")

    async def bundles(self, request: web.Request) -> web.Response:
        namespace = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        if not self.service.namespaces.exists(namespace):
            fail(web.HTTPNotFound, "Namespace does not exist")
        return web.json_response(ONE_BUNDLE)

    async def broker_stats(self, request: web.Request) -> web.Response:
        fail(web.HTTPNotFound, f"broker-stats/{request.match_info['stat']} is not "
             "implemented by magnetar: its metrics are at /metrics (Prometheus text)")
