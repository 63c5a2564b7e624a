"""Admin REST routes for policies, in the style of Pulsar's namespace and topic policies.

Pulsar has no redelivery backoff policy; these paths follow its pattern (POST sets,
GET reads, DELETE removes; a GET of an unset policy answers 204, ``?applied=true``
on a topic gives the one in force, as Pulsar's topic policies do)::

    /admin/v2/namespaces/{tenant}/{namespace}/redeliveryBackoff
    /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/redeliveryBackoff

with the body ``{"minDelayMs": 1000, "maxDelayMs": 8000, "multiplier": 2}``. A topic's
policy overrides its namespace's, which overrides the broker's configuration. A
partitioned topic's policy is set on (and read from) its partitions.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.paths import namespace_of, topics_of
from magnetar.broker.policies.redelivery_backoff import RedeliveryBackoffPolicy

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

NAMESPACE_PATH = "/admin/v2/namespaces/{tenant}/{namespace}/redeliveryBackoff"
TOPIC_PATH = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/redeliveryBackoff"


def add_policy_routes(app: web.Application, service: BrokerService) -> None:
    """Register the policy routes (before routes whose patterns would also match)."""
    routes = PolicyRoutes(service)
    app.add_routes(
        [
            web.get(NAMESPACE_PATH, routes.get_namespace),
            web.post(NAMESPACE_PATH, routes.set_namespace),
            web.delete(NAMESPACE_PATH, routes.remove_namespace),
            web.get(TOPIC_PATH, routes.get_topic),
            web.post(TOPIC_PATH, routes.set_topic),
            web.delete(TOPIC_PATH, routes.remove_topic),
        ]
    )


class PolicyRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    # ------------------------------------------------------------ namespaces

    async def get_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        policy = self.service.backoff_policies.namespace_policy(tenant, namespace)
        return _policy_response(policy)

    async def set_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        policy = await _policy_body(request)
        self.service.backoff_policies.set_namespace_policy(tenant, namespace, policy)
        return web.Response(status=204)

    async def remove_namespace(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        self.service.backoff_policies.set_namespace_policy(tenant, namespace, None)
        return web.Response(status=204)

    # ------------------------------------------------------------ topics

    async def get_topic(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        policies = self.service.backoff_policies
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(policies.applied(topic).to_json())
        return _policy_response(policies.topic_policy(topic))

    async def set_topic(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        policy = await _policy_body(request)
        for topic in topics:
            self.service.backoff_policies.set_topic_policy(topic, policy)
        return web.Response(status=204)

    async def remove_topic(self, request: web.Request) -> web.Response:
        for topic in self._topics(request):
            self.service.backoff_policies.set_topic_policy(topic, None)
        return web.Response(status=204)

    def _topics(self, request: web.Request) -> list[Topic]:
        return topics_of(self.service, request)




async def _policy_body(request: web.Request) -> RedeliveryBackoffPolicy:
    text = await request.text()
    try:
        doc = json.loads(text)
    except ValueError:
        raise web.HTTPBadRequest(reason=f"the body is not JSON: {text[:80]!r}") from None
    try:
        return RedeliveryBackoffPolicy.from_json(doc)
    except ValueError as exc:  # Pulsar answers an invalid policy value with 412
        raise web.HTTPPreconditionFailed(reason=str(exc)) from None


def _policy_response(policy: RedeliveryBackoffPolicy | None) -> web.Response:
    if policy is None:
        return web.Response(status=204)  # as Pulsar answers an unset policy
    return web.json_response(policy.to_json())
