"""Admin REST routes for clusters, tenants and namespaces, as Pulsar's admin API v2 has
them, and the guard that answers 404 for any route under a namespace that does not exist::

    GET                 /admin/v2/tenants
    GET|PUT|POST|DELETE /admin/v2/tenants/{tenant}
    GET                 /admin/v2/namespaces/{tenant}             ["tenant/ns", ...]
    GET|PUT|DELETE      /admin/v2/namespaces/{tenant}/{namespace}

A tenant is ``{"adminRoles": [], "allowedClusters": ["standalone"]}`` (an empty body
creates one like that). Errors carry Pulsar's body ``{"reason": ...}`` and status: 404
for a tenant or namespace that does not exist, 409 for one that exists already or is
not empty, 412 for an invalid name or an unknown cluster (clusters.py), 405 for ``?force=true``
deletions (Pulsar's default ``forceDeleteNamespaceAllowed=false``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from aiohttp import web

from magnetar.admin.namespace_policies import PolicyRefused, initial_policies, pulsar_policies
from magnetar.broker.policies.namespaces import (
    CLUSTER,
    AlreadyExists,
    NamespaceNotFound,
    NotEmpty,
    TenantNotFound,
)
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage.metadata import NamespacePolicies
from magnetar.storage.namespaces_store import TenantInfo

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
F = TypeVar("F", bound=Callable[..., Any])

_CREATES_NAMESPACE = "_magnetar_creates_namespace"
_CLIENT_LOOKUP = "_magnetar_client_lookup"


def creates_namespace(handler: F) -> F:
    """Mark a route the namespace guard lets through although its namespace is missing."""
    setattr(handler, _CREATES_NAMESPACE, True)
    return handler


def client_lookup(handler: F) -> F:
    """Mark a route clients use to look topics up (partitions, topic lists, lookups):
    with ``allow_auto_namespace_creation`` a missing namespace passes, as it does in
    the binary protocol, since the topic's creation would create it."""
    setattr(handler, _CLIENT_LOOKUP, True)
    return handler


def fail(error: type[web.HTTPException], message: str) -> NoReturn:
    """Raise ``error`` with Pulsar's error body ``{"reason": message}``."""
    raise error(
        reason=" ".join(message.split())[:300],  # a status line holds one short line
        text=json.dumps({"reason": message}),
        content_type="application/json",
    )


def namespace_guard(service: BrokerService) -> Any:
    """Middleware: a route whose path names a tenant and namespace (topics, policies,
    schemas, lookups) answers 404 while that namespace does not exist. Invalid names
    and domains are left to the route, which answers 412 for them."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        info = request.match_info
        tenant, namespace = info.get("tenant"), info.get("namespace")
        if (
            tenant is not None
            and namespace is not None
            and not getattr(handler, _CREATES_NAMESPACE, False)
            and info.get("domain", "persistent") in ("persistent", "non-persistent")
            and _valid(tenant, namespace)
        ):
            full = f"{tenant}/{namespace}"
            registry = service.namespaces
            passes = getattr(handler, _CLIENT_LOOKUP, False) and registry.auto_create
            if not registry.exists(full) and not passes:
                fail(web.HTTPNotFound, f"Namespace {full} does not exist")
        return await handler(request)

    return guard


def _valid(tenant: str, namespace: str = "ns") -> bool:
    try:  # the same rules as a topic name's tenant and namespace
        TopicName.parse(f"persistent://{tenant}/{namespace}/x")
    except InvalidTopicName:
        return False
    return True


def add_tenant_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes (before the topic routes, whose patterns match these paths)."""
    routes = TenantRoutes(service)
    app.add_routes(
        [
            web.get("/admin/v2/tenants", routes.list_tenants),
            web.get("/admin/v2/tenants/{tenant}", routes.get_tenant),
            web.put("/admin/v2/tenants/{tenant}", routes.create_tenant),
            web.post("/admin/v2/tenants/{tenant}", routes.update_tenant),
            web.delete("/admin/v2/tenants/{tenant}", routes.delete_tenant),
            web.get("/admin/v2/namespaces/{tenant}", routes.list_namespaces),
            web.get("/admin/v2/namespaces/{tenant}/{namespace}", routes.get_namespace),
            web.put("/admin/v2/namespaces/{tenant}/{namespace}", routes.create_namespace),
            web.delete("/admin/v2/namespaces/{tenant}/{namespace}", routes.delete_namespace),
        ]
    )


class TenantRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.registry = service.namespaces

    # ------------------------------------------------------------ tenants

    async def list_tenants(self, request: web.Request) -> web.Response:
        return web.json_response(self.registry.tenants())

    async def get_tenant(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(self.registry.tenant(_tenant(request)).to_json())
        except TenantNotFound:
            fail(web.HTTPNotFound, "Tenant does not exist")

    async def create_tenant(self, request: web.Request) -> web.Response:
        tenant = _tenant(request)
        info = await self._tenant_info(request)
        try:
            self.registry.create_tenant(tenant, info)
        except AlreadyExists:
            fail(web.HTTPConflict, "Tenant already exists")
        return web.Response(status=204)

    async def update_tenant(self, request: web.Request) -> web.Response:
        tenant = _tenant(request)
        info = await self._tenant_info(request)
        try:
            self.registry.update_tenant(tenant, info)
        except TenantNotFound:
            fail(web.HTTPNotFound, "Tenant does not exist")
        return web.Response(status=204)

    async def delete_tenant(self, request: web.Request) -> web.Response:
        tenant = _tenant(request)
        _refuse_force(request, "tenants")
        try:
            self.registry.delete_tenant(tenant)
        except TenantNotFound:
            fail(web.HTTPNotFound, "Tenant does not exist")
        except NotEmpty as exc:
            fail(web.HTTPConflict, str(exc))
        return web.Response(status=204)

    async def _tenant_info(self, request: web.Request) -> TenantInfo:
        """The body's TenantInfo; an empty body is a tenant of this cluster."""
        text = await request.text()
        if not text.strip():
            return TenantInfo(allowed_clusters=[CLUSTER])
        try:
            info = TenantInfo.from_json(json.loads(text))
        except ValueError as exc:
            fail(web.HTTPBadRequest, f"not a tenant info: {exc}")
        from magnetar.admin.clusters import cluster_names  # it imports this module

        known = cluster_names(self.service.config.data_dir)
        unknown = [c for c in info.allowed_clusters if c not in known]
        if unknown:  # Pulsar's status and words
            fail(web.HTTPPreconditionFailed, f"Clusters do not exist: {unknown}")
        return info

    # ------------------------------------------------------------ namespaces

    async def list_namespaces(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(self.registry.namespaces(_tenant(request)))
        except TenantNotFound:
            fail(web.HTTPNotFound, "Tenant does not exist")

    async def get_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)  # the guard answered for a missing one
        path = NamespacePolicies.path_for(self.service.config.data_dir, tenant, namespace)
        return web.json_response(pulsar_policies(NamespacePolicies.load(path).policies))

    @creates_namespace
    async def create_namespace(self, request: web.Request) -> web.Response:
        """Create the namespace with the policies of the body (Pulsar's Policies)."""
        tenant, namespace = _namespace(request)
        full = f"{tenant}/{namespace}"
        text = await request.text()
        body: Any = {}
        if text.strip():
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                fail(web.HTTPBadRequest, "the body must be a JSON object of policies")
        try:
            policies = initial_policies(body)
        except PolicyRefused as exc:
            fail(web.HTTPPreconditionFailed if exc.status == 412 else web.HTTPBadRequest,
                 str(exc))
        try:
            self.registry.tenant(tenant)
        except TenantNotFound:
            fail(web.HTTPNotFound, "Tenant does not exist")
        if self.registry.exists(full):
            fail(web.HTTPConflict, "Namespace already exists")
        if policies:  # before the namespace exists, so that it never exists without them
            path = NamespacePolicies.path_for(self.service.config.data_dir, tenant, namespace)
            NamespacePolicies(path, policies).save()
        self.registry.create_namespace(full)
        # What any holder cached of the namespace's (missing) policies file is stale.
        self.service._namespace_deleted(tenant, namespace)
        return web.Response(status=204)

    async def delete_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        _refuse_force(request, "namespaces")
        try:
            self.registry.delete_namespace(f"{tenant}/{namespace}")
        except NamespaceNotFound:
            fail(web.HTTPNotFound, "Namespace does not exist")
        except NotEmpty as exc:
            fail(web.HTTPConflict, str(exc))
        return web.Response(status=204)


def _tenant(request: web.Request) -> str:
    tenant = request.match_info["tenant"]
    if not _valid(tenant):
        fail(web.HTTPPreconditionFailed, f"Tenant name is not valid: {tenant!r}")
    return tenant


def _namespace(request: web.Request) -> tuple[str, str]:
    tenant, namespace = request.match_info["tenant"], request.match_info["namespace"]
    if not _valid(tenant, namespace):
        fail(web.HTTPPreconditionFailed, f"Namespace name is not valid: {tenant}/{namespace}")
    return tenant, namespace


def _refuse_force(request: web.Request, what: str) -> None:
    """``?force=true`` (delete with all it holds): refused as Pulsar does by default."""
    if request.query.get("force", "false").lower() == "true":
        message = f"Broker doesn't allow forced deletion of {what}"
        raise web.HTTPMethodNotAllowed(
            request.method,
            ["GET", "PUT", "POST", "DELETE"],
            reason=message,
            text=json.dumps({"reason": message}),
            content_type="application/json",
        )


