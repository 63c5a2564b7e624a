"""The admin HTTP server (aiohttp) running in the broker's event loop."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.auth_middleware import secure_admin
from magnetar.admin.broker_routes import add_broker_routes
from magnetar.admin.clusters import add_cluster_routes
from magnetar.admin.compaction_routes import add_compaction_routes
from magnetar.admin.dedup_routes import add_dedup_routes
from magnetar.admin.errors import json_errors
from magnetar.admin.https import serve_https
from magnetar.admin.inputs import checked_input
from magnetar.admin.lookup_routes import add_lookup_routes
from magnetar.admin.policies import add_policy_routes
from magnetar.admin.raw_entries import add_raw_entry_routes
from magnetar.admin.retention_routes import add_retention_routes
from magnetar.admin.schema_routes import add_schema_routes
from magnetar.admin.subscription_routes import add_subscription_routes
from magnetar.admin.tenants import add_tenant_routes, client_lookup, namespace_guard
from magnetar.admin.topic_routes import add_topic_routes
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

log = logging.getLogger("magnetar.admin")


def _topic(request: web.Request) -> TopicName:
    domain = request.match_info["domain"]
    try:
        return TopicName.parse(
            f"{domain}://{request.match_info['tenant']}/{request.match_info['namespace']}/"
            f"{request.match_info['topic']}"
        )
    except InvalidTopicName as exc:
        raise web.HTTPPreconditionFailed(reason=str(exc)) from None


def _domain(request: web.Request) -> str:
    # The topic routes reject a bad domain through TopicName; the namespace routes must too,
    # or any other word would list the non-persistent topics.
    domain = request.match_info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise web.HTTPPreconditionFailed(
            reason=f"invalid topic domain {domain!r}: expected persistent or non-persistent"
        )
    return domain


class AdminServer:
    """The admin application; ``AdminListener`` (admin/listener.py) owns its ports and
    builds it on the first connection."""

    def __init__(self, service: BrokerService, port: Callable[[], int]) -> None:
        self.service = service
        # Errors as Pulsar's {"reason": ...} (outermost); names and bodies the broker
        # cannot take (400); 404 if no namespace.
        self.app = web.Application(
            middlewares=[json_errors, checked_input, namespace_guard(service)]
        )
        secure_admin(self.app, service)  # authentication first; the permission routes
        add_policy_routes(self.app, service)  # first: DELETE .../{topic} would match them
        add_dedup_routes(self.app, service)  # likewise
        add_compaction_routes(self.app, service)  # likewise
        add_retention_routes(self.app, service)  # retention, TTL, backlog quotas; likewise
        add_raw_entry_routes(self.app, service)  # PIP-96 ingest
        add_schema_routes(self.app, service)  # schemas and their compatibility policies
        add_tenant_routes(self.app, service)  # before the topic routes, which match them too
        clusters = add_cluster_routes(self.app, service, lambda: (port(), self.tls_port))
        add_broker_routes(self.app, service, clusters.standalone)  # brokers, bundles
        add_lookup_routes(self.app, service, port)  # HTTP lookup service
        add_topic_routes(self.app, service)  # stats, internalStats, examine, unload...
        add_subscription_routes(self.app, service)  # create, skip, resetcursor...
        self.runner: web.AppRunner | None = None
        self.tls_port = 0  # the HTTPS port served, once serving
        base = "/admin/v2/{domain}/{tenant}/{namespace}"
        self.app.add_routes(
            [
                web.get("/metrics", self.metrics),
                web.get("/metrics/", self.metrics),
                web.get(base, self.list_topics),
                web.get(base + "/partitioned", self.list_partitioned),
                web.get(base + "/{topic}/partitions", self.get_partitions),
                web.put(base + "/{topic}/partitions", self.create_partitions),
                web.delete(base + "/{topic}/partitions", self.delete_partitions),
                web.put(base + "/{topic}", self.create_topic),
                web.post(base + "/{topic}/terminate", self.terminate_topic),
                web.delete(base + "/{topic}", self.delete_topic),
            ]
        )

    async def serve_on(self, sock: socket.socket | None, tls_sock: socket.socket | None) -> None:
        """Serve HTTP on ``sock`` and HTTPS on ``tls_sock`` (bound, maybe listening)."""
        self.runner = web.AppRunner(self.app, access_log=None)
        await self.runner.setup()
        if sock is not None:
            await web.SockSite(self.runner, sock).start()
        if tls_sock is not None and self.service.tls_context is not None:
            self.tls_port = tls_sock.getsockname()[1]
            await serve_https(self.runner, tls_sock, self.service.tls_context)

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            body=await self.service.metrics.render_async(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def list_topics(self, request: web.Request) -> web.Response:
        ns = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        mode = 0 if _domain(request) == "persistent" else 1
        return web.json_response(self.service.topics_of_namespace(ns, mode))

    async def list_partitioned(self, request: web.Request) -> web.Response:
        prefix = (
            f"{_domain(request)}://{request.match_info['tenant']}/"
            f"{request.match_info['namespace']}/"
        )
        names = [n for n in self.service.store.list_partitioned() if n.startswith(prefix)]
        return web.json_response(sorted(names))

    @client_lookup
    async def get_partitions(self, request: web.Request) -> web.Response:
        name = _topic(request)
        # A client's HTTP lookup asks with checkAllowAutoCreation=true, which creates the
        # topic partitioned when default_partitions says so, as the binary request does.
        auto = request.query.get("checkAllowAutoCreation", "false").lower() == "true"
        return web.json_response({"partitions": self.service.partitions_for_lookup(name, auto)})

    async def create_partitions(self, request: web.Request) -> web.Response:
        name = _topic(request)
        text = await request.text()
        try:
            count = int(text)
        except ValueError:
            raise web.HTTPBadRequest(
                reason=f"the body must be the number of partitions, not {text!r}"
            ) from None
        if count < 1:  # Pulsar's status and words
            raise web.HTTPNotAcceptable(reason="Number of partitions should be more than 0")
        try:
            self.service.create_partitioned_topic(str(name), count)
        except FileExistsError as exc:
            raise web.HTTPConflict(reason=str(exc)) from None
        except ValueError as exc:
            raise web.HTTPPreconditionFailed(reason=str(exc)) from None
        return web.Response(status=204)

    async def delete_partitions(self, request: web.Request) -> web.Response:
        name = _topic(request)
        force = request.query.get("force", "false") == "true"
        try:
            await self.service.delete_partitioned_topic(str(name), force=force)
        except LookupError as exc:
            raise web.HTTPNotFound(reason=str(exc)) from None
        except RuntimeError as exc:
            raise web.HTTPPreconditionFailed(reason=str(exc)) from None
        return web.Response(status=204)

    async def create_topic(self, request: web.Request) -> web.Response:
        name = _topic(request)
        if not self.service.store.get_partitions(str(name)) and self.service.find_topic(name):
            raise web.HTTPConflict(reason=f"topic {name} already exists")  # as Pulsar
        try:
            self.service.get_topic(name, create=True, explicit=True)
        except ValueError as exc:  # a partitioned topic has that name; Pulsar says 409 too
            raise web.HTTPConflict(reason=str(exc)) from None
        return web.Response(status=204)

    async def terminate_topic(self, request: web.Request) -> web.Response:
        name = _topic(request)
        try:
            last = self.service.terminate_topic(str(name))
        except LookupError as exc:
            raise web.HTTPNotFound(reason=str(exc)) from None
        except ValueError:  # partitioned: Pulsar answers 405 with this reason
            raise web.HTTPMethodNotAllowed(
                request.method, [], reason="Termination of a partitioned topic is not allowed"
            ) from None
        # Pulsar answers with the last message id itself, as its REST API spells one.
        return web.json_response(
            {"ledgerId": last.ledger_id, "entryId": last.entry_id, "partitionIndex": -1}
        )

    async def delete_topic(self, request: web.Request) -> web.Response:
        name = _topic(request)
        force = request.query.get("force", "false") == "true"
        # As in Pulsar: a partitioned topic is not deleted here (this would drop nothing and
        # answer 204), and deleting a topic that does not exist is a 404, not a silent 204.
        if self.service.store.get_partitions(str(name)):
            raise web.HTTPConflict(reason=f"topic {name} is a partitioned topic")
        if self.service.find_topic(name) is None:
            raise web.HTTPNotFound(reason=f"topic {name} not found")
        try:
            await self.service.delete_topic(str(name), force=force)
        except RuntimeError as exc:
            raise web.HTTPPreconditionFailed(reason=str(exc)) from None
        return web.Response(status=204)
