"""Authentication and authorization of the admin API, as Pulsar's AuthenticationFilter
and its admin resources' checks: ``Authorization: Bearer <token>`` (or ``Basic``, or a
TLS client certificate on the HTTPS port). Without credentials a request gets 401, with
a role that may not do it 403, each with Pulsar's ``{"reason": ...}`` body.

With authorization on, superusers may use every route; a tenant's admin roles every
route under that tenant's namespaces and topics (policies, permissions, topics and
partitions, subscriptions, schemas, compaction, dedup, the tenant's namespace list and
creation), but not the tenant itself, other tenants or the clusters, as Pulsar's
tenant and namespace operations allow them; another role may only read what a topic
lookup would tell it (a topic's stats and partitions, the HTTP lookup) for topics it
may produce to or consume from. ``/metrics`` stays open unless
``authenticate_metrics_endpoint`` (as in Pulsar).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.permissions_routes import add_permission_routes
from magnetar.broker.auth.providers import Authenticated, AuthenticationFailed
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# GETs a role with lookup permission on the topic may make.
_TOPIC_READS = re.compile(
    r"^/(?:admin/v2|lookup/v2/topic)/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)"
    r"(?:/(?:stats|partitioned-stats|partitions|internalStats|lastMessageId|subscriptions))?/?$"
)
_METRICS = ("/metrics", "/metrics/")
# Routes naming a tenant that only a superuser may use (Pulsar's TenantsBase).
_SUPERUSER_ONLY = "/admin/v2/tenants/"


def reason(status: int, text: str) -> web.Response:
    return web.json_response({"reason": text}, status=status)


def secure_admin(app: web.Application, service: BrokerService) -> None:
    """Add the permission routes, and, when authentication is on, put it in front of
    every route (first of the middlewares)."""
    add_permission_routes(app, service)
    if service.authentication is not None:
        app.middlewares.insert(0, _middleware(service))  # type: ignore[arg-type]


def _middleware(
    service: BrokerService,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    authentication = service.authentication
    assert authentication is not None
    open_metrics = not service.config.authenticate_metrics_endpoint

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if open_metrics and request.path in _METRICS:
            return await handler(request)
        transport = request.transport
        cert = transport.get_extra_info("peercert") if transport is not None else None
        try:
            provider, credentials = authentication.authenticate_http(
                request.headers.get("Authorization"), cert if isinstance(cert, dict) else None
            )
            identity: Authenticated
            if provider is None:
                identity = authentication.anonymous("Authentication required")
            elif provider.blocking:
                loop = asyncio.get_running_loop()
                identity = await loop.run_in_executor(None, provider.authenticate, credentials)
            else:
                identity = provider.authenticate(credentials)
        except AuthenticationFailed as exc:
            return reason(401, str(exc))
        if not _allowed(service, identity.role, request):
            return reason(
                403,
                f"Don't have permission to administrate resources with role {identity.role!r}",
            )
        return await handler(request)

    return check


def _allowed(service: BrokerService, role: str, request: web.Request) -> bool:
    authorization = service.authorization
    if authorization is None or authorization.is_superuser(role):
        return True
    tenant = request.match_info.get("tenant")
    if (
        tenant is not None
        and request.match_info.get("domain", "persistent") in ("persistent", "non-persistent")
        and not _resource(request).startswith(_SUPERUSER_ONLY)
        and authorization.is_tenant_admin(role, tenant)
    ):
        return True
    if request.method not in ("GET", "HEAD"):
        return False
    match = _TOPIC_READS.match(request.path)
    if match is None:
        return False
    domain, tenant, namespace, topic = match.groups()
    try:
        name = TopicName.parse(f"{domain}://{tenant}/{namespace}/{topic}")
    except InvalidTopicName:
        return False
    return authorization.can_lookup(role, name)


def _resource(request: web.Request) -> str:
    """The matched route's template ("" if none matched)."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else ""
