"""Admin REST routes for the deduplication switch of namespaces and topics, as Pulsar's::

    /admin/v2/namespaces/{tenant}/{namespace}/deduplication
    /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/deduplicationEnabled

(the topic's also as ``.../{topic}/deduplication``). POST sets it with the body ``true``
or ``false``, GET reads it (204 when unset; ``?applied=true`` on a topic gives the
switch in force), DELETE removes it. A topic's switch overrides its namespace's, which
overrides ``broker_deduplication_enabled``; a change applies at once to the loaded
topics it concerns, and to the others when they load. A partitioned topic's switch is
set on (and read from) its partitions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.paths import namespace_of, topics_of

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

NAMESPACE_PATH = "/admin/v2/namespaces/{tenant}/{namespace}/deduplication"
TOPIC_PATHS = (
    "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/deduplicationEnabled",  # Pulsar's
    "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/deduplication",
)


def add_dedup_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes (before the generic topic routes, which would match them)."""
    routes = DedupRoutes(service)
    table = [
        web.get(NAMESPACE_PATH, routes.get_namespace),
        web.post(NAMESPACE_PATH, routes.set_namespace),
        web.delete(NAMESPACE_PATH, routes.remove_namespace),
    ]
    for path in TOPIC_PATHS:
        table += [
            web.get(path, routes.get_topic),
            web.post(path, routes.set_topic),
            web.delete(path, routes.remove_topic),
        ]
    app.add_routes(table)


class DedupRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    # ------------------------------------------------------------ namespaces

    async def get_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        return _switch_response(self.service.dedup_policies.namespace_policy(tenant, namespace))

    async def set_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        self._set_namespace(tenant, namespace, await _switch_body(request))
        return web.Response(status=204)

    async def remove_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        self._set_namespace(tenant, namespace, None)
        return web.Response(status=204)

    def _set_namespace(self, tenant: str, namespace: str, enabled: bool | None) -> None:
        service = self.service
        service.dedup_policies.set_namespace_policy(tenant, namespace, enabled)
        for topic in list(service.topics.values()):
            name = topic.topic_name
            if (name.tenant, name.namespace) == (tenant, namespace) and not topic.closed:
                service.apply_deduplication(topic)

    # ------------------------------------------------------------ topics

    async def get_topic(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        policies = self.service.dedup_policies
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(policies.applied(topic))
        return _switch_response(policies.topic_policy(topic))

    async def set_topic(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        self._set_topics(topics, await _switch_body(request))
        return web.Response(status=204)

    async def remove_topic(self, request: web.Request) -> web.Response:
        self._set_topics(self._topics(request), None)
        return web.Response(status=204)

    def _set_topics(self, topics: list[Topic], enabled: bool | None) -> None:
        service = self.service
        for topic in topics:
            service.dedup_policies.set_topic_policy(topic, enabled)
            service.apply_deduplication(topic)

    def _topics(self, request: web.Request) -> list[Topic]:
        return topics_of(self.service, request)




async def _switch_body(request: web.Request) -> bool:
    """The body Pulsar's admin client sends: the JSON ``true`` or ``false``."""
    text = await request.text()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, bool):
        raise web.HTTPBadRequest(reason=f"the body must be true or false, not {text[:80]!r}")
    return value


def _switch_response(enabled: bool | None) -> web.Response:
    if enabled is None:
        return web.Response(status=204)  # as Pulsar answers an unset policy
    return web.json_response(enabled)
