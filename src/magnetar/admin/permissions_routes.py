"""Pulsar's permission routes: grant (POST a JSON list of actions), list (GET) and
revoke (DELETE) what a role may do on a namespace or a topic::

    /admin/v2/namespaces/{tenant}/{namespace}/permissions[/{role}]
    /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/permissions[/{role}]

Actions are ``produce`` and ``consume``; Pulsar's ``functions``, ``sources``,
``sinks`` and ``packages`` are answered 501 (magnetar has none of them). A topic's
GET lists its namespace's grants merged with its own, as Pulsar's does. Grants are
kept (in the namespace's policies file) whether or not authorization is on; they are
enforced while it is.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.auth.authorization import (
    AuthorizationService,
    UnsupportedAction,
    check_actions,
)
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/permissions"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/permissions"


def add_permission_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes (before the topic routes, whose patterns match them too)."""
    routes = PermissionRoutes(service)
    app.add_routes(
        [
            web.get(NAMESPACE, routes.namespace_permissions),
            web.post(NAMESPACE + "/{role}", routes.grant_namespace),
            web.delete(NAMESPACE + "/{role}", routes.revoke_namespace),
            web.get(TOPIC, routes.topic_permissions),
            web.post(TOPIC + "/{role}", routes.grant_topic),
            web.delete(TOPIC + "/{role}", routes.revoke_topic),
        ]
    )


def _reason(status: int, text: str) -> web.HTTPException:
    exc = web.HTTPException(
        text=json.dumps({"reason": text}), content_type="application/json"
    )
    exc.set_status(status)
    return exc


class PermissionRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._store: AuthorizationService | None = None

    @property
    def store(self) -> AuthorizationService:
        """The broker's authorization service, or (authorization off) one that only
        keeps the grants, in the same files."""
        if self.service.authorization is not None:
            return self.service.authorization
        if self._store is None:
            self._store = AuthorizationService(
                (), self.service.config.data_dir, self.service._namespace_policies_written
            )
        return self._store

    async def namespace_permissions(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        return web.json_response(self.store.namespace_permissions(tenant, namespace))

    async def grant_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        actions = await _actions(request)
        self.store.grant_namespace(tenant, namespace, request.match_info["role"], actions)
        return web.Response(status=204)

    async def revoke_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = _namespace(request)
        self.store.revoke_namespace(tenant, namespace, request.match_info["role"])
        return web.Response(status=204)

    async def topic_permissions(self, request: web.Request) -> web.Response:
        return web.json_response(self.store.topic_permissions(_topic(request)))

    async def grant_topic(self, request: web.Request) -> web.Response:
        name = _topic(request)
        actions = await _actions(request)
        self.store.grant_topic(name, request.match_info["role"], actions)
        return web.Response(status=204)

    async def revoke_topic(self, request: web.Request) -> web.Response:
        name = _topic(request)
        if not self.store.revoke_topic(name, request.match_info["role"]):
            # Pulsar's answer when the role's grant is the namespace's, not the topic's
            raise _reason(412, "Permissions are not set at the topic level")
        return web.Response(status=204)


def _namespace(request: web.Request) -> tuple[str, str]:
    tenant = request.match_info["tenant"]
    namespace = request.match_info["namespace"]
    try:
        TopicName.parse(f"persistent://{tenant}/{namespace}/x")
    except InvalidTopicName as exc:
        raise _reason(412, str(exc)) from None
    return tenant, namespace


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    if info["domain"] not in ("persistent", "non-persistent"):
        raise _reason(412, f"invalid topic domain {info['domain']!r}")
    try:
        return TopicName.parse(
            f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}"
        )
    except InvalidTopicName as exc:
        raise _reason(412, str(exc)) from None


async def _actions(request: web.Request) -> list[str]:
    text = await request.text()
    try:
        doc = json.loads(text) if text.strip() else None
    except ValueError:
        raise _reason(400, f"the body is not JSON: {text[:80]!r}") from None
    if not isinstance(doc, list):
        raise _reason(400, 'the body must be a JSON list of actions, e.g. ["produce"]')
    try:
        return check_actions(doc)
    except UnsupportedAction as exc:
        raise _reason(501, str(exc)) from None
    except ValueError as exc:
        raise _reason(400, str(exc)) from None
