"""Admin REST routes for retention, message TTL and backlog quotas, as Pulsar's::

    /admin/v2/namespaces/{tenant}/{namespace}/retention         GET POST DELETE
    /admin/v2/namespaces/{tenant}/{namespace}/messageTTL        GET POST DELETE
    /admin/v2/namespaces/{tenant}/{namespace}/backlogQuota      POST DELETE  ?backlogQuotaType=
    /admin/v2/namespaces/{tenant}/{namespace}/backlogQuotaMap   GET
    /admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/...   the same four

Bodies: retention ``{"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}``, a
namespace's TTL the number of seconds, a topic's TTL the query ``?messageTTL=60`` (as
Pulsar's admin client sends it; a body is taken too), a backlog quota ``{"limitSize":
bytes, "limitTime": seconds, "policy": "producer_request_hold"}`` for the
``backlogQuotaType`` given (``destination_storage``, the default, or ``message_age``).
A GET of an unset policy answers 204, ``?applied=true`` on a topic gives the one in
force (topic, else namespace, else broker configuration). A value Pulsar refuses is
answered with its status (412) and words. A partitioned topic's policies are set on
(and read from) its partitions. Enforcement: broker/policies/topic_policies.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from aiohttp import web

from magnetar.admin.paths import applied, namespace_of, topics_of
from magnetar.broker.policies.retention_policies import (
    DESTINATION_STORAGE,
    BacklogQuota,
    Retention,
    check_quota_type,
    check_ttl,
    quota_fits_retention,
)

if TYPE_CHECKING:
    from magnetar.broker.policies.retention_policies import RetentionPolicyStore
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

T = TypeVar("T")

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}/"
TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/"


def add_retention_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes (before the generic topic routes, which would match them)."""
    ns = NamespaceRoutes(service)
    topic = TopicRoutes(service)
    table = []
    for base, routes in ((NAMESPACE, ns), (TOPIC, topic)):
        table += [
            web.get(base + "retention", routes.get_retention),
            web.post(base + "retention", routes.set_retention),
            web.delete(base + "retention", routes.remove_retention),
            web.get(base + "messageTTL", routes.get_ttl),
            web.post(base + "messageTTL", routes.set_ttl),
            web.delete(base + "messageTTL", routes.remove_ttl),
            web.post(base + "backlogQuota", routes.set_quota),
            web.delete(base + "backlogQuota", routes.remove_quota),
            web.get(base + "backlogQuotaMap", routes.get_quotas),
        ]
    app.add_routes(table)


class NamespaceRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.store: RetentionPolicyStore = service.retention_policies

    async def get_retention(self, request: web.Request) -> web.Response:
        retention = self.store.namespace_retention(*namespace_of(request))
        return _optional(None if retention is None else retention.to_json())

    async def set_retention(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        retention = _parse(Retention.from_json, await _json_body(request))
        quotas = self.store.namespace_quotas(tenant, namespace)
        if quotas:  # Pulsar checks only a namespace that has quotas of its own
            quota = quotas.get(DESTINATION_STORAGE, self.store.default_quota)
            if not quota_fits_retention(quota, retention):
                raise web.HTTPPreconditionFailed(
                    reason="Retention Quota must exceed configured backlog quota for namespace."
                )
        self.store.set_namespace_retention(tenant, namespace, retention)
        return web.Response(status=204)

    async def remove_retention(self, request: web.Request) -> web.Response:
        self.store.set_namespace_retention(*namespace_of(request), None)
        return web.Response(status=204)

    async def get_ttl(self, request: web.Request) -> web.Response:
        return _optional(self.store.namespace_ttl(*namespace_of(request)))

    async def set_ttl(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        ttl = _parse(check_ttl, await _json_body(request))
        self.store.set_namespace_ttl(tenant, namespace, ttl)
        return web.Response(status=204)

    async def remove_ttl(self, request: web.Request) -> web.Response:
        self.store.set_namespace_ttl(*namespace_of(request), None)
        return web.Response(status=204)

    async def set_quota(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        kind = _quota_type(request)
        quota = _parse(BacklogQuota.from_json, await _json_body(request))
        if not quota_fits_retention(quota, self.store.namespace_retention(tenant, namespace)):
            raise web.HTTPPreconditionFailed(
                reason="Backlog Quota exceeds configured retention quota for namespace. "
                "Please increase retention quota and retry"
            )
        self.store.set_namespace_quota(tenant, namespace, kind, quota)
        return web.Response(status=204)

    async def remove_quota(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        self.store.set_namespace_quota(tenant, namespace, _quota_type(request), None)
        return web.Response(status=204)

    async def get_quotas(self, request: web.Request) -> web.Response:
        quotas = self.store.namespace_quotas(*namespace_of(request))
        return web.json_response({kind: quota.to_json() for kind, quota in quotas.items()})


class TopicRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.store: RetentionPolicyStore = service.retention_policies

    async def get_retention(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        if applied(request):
            return web.json_response(self.store.retention(topic).to_json())
        retention = self.store.topic_retention(topic)
        return _optional(None if retention is None else retention.to_json())

    async def set_retention(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        retention = _parse(Retention.from_json, await _json_body(request))
        if not quota_fits_retention(self.store.quota(topics[0], DESTINATION_STORAGE), retention):
            raise web.HTTPPreconditionFailed(
                reason="Retention Quota must exceed configured backlog quota for topic. "
                "Please increase retention quota and retry"
            )
        for topic in topics:
            self.store.set_topic_retention(topic, retention)
        return web.Response(status=204)

    async def remove_retention(self, request: web.Request) -> web.Response:
        for topic in self._topics(request):
            self.store.set_topic_retention(topic, None)
        return web.Response(status=204)

    async def get_ttl(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        if applied(request):
            return web.json_response(self.store.ttl(topic))
        return _optional(self.store.topic_ttl(topic))

    async def set_ttl(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        raw = request.query.get("messageTTL")  # how Pulsar's admin client sends it
        if raw is not None:
            try:
                value: object = int(raw)
            except ValueError:
                reason = f"messageTTL must be a number, not {raw!r}"
                raise web.HTTPBadRequest(reason=reason) from None
        else:
            value = await _json_body(request)
        ttl = _parse(check_ttl, value)
        for topic in topics:
            self.store.set_topic_ttl(topic, ttl)
        return web.Response(status=204)

    async def remove_ttl(self, request: web.Request) -> web.Response:
        for topic in self._topics(request):
            self.store.set_topic_ttl(topic, None)
        return web.Response(status=204)

    async def set_quota(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        kind = _quota_type(request)
        quota = _parse(BacklogQuota.from_json, await _json_body(request))
        if not quota_fits_retention(quota, self.store.retention(topics[0])):
            raise web.HTTPPreconditionFailed(
                reason="Backlog Quota exceeds configured retention quota for topic. "
                "Please increase retention quota and retry"
            )
        for topic in topics:
            self.store.set_topic_quota(topic, kind, quota)
        return web.Response(status=204)

    async def remove_quota(self, request: web.Request) -> web.Response:
        kind = _quota_type(request)
        for topic in self._topics(request):
            self.store.set_topic_quota(topic, kind, None)
        return web.Response(status=204)

    async def get_quotas(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        if applied(request):
            quotas = self.store.applied_quotas(topic)
        else:
            quotas = self.store.topic_quotas(topic)
        return web.json_response({kind: quota.to_json() for kind, quota in quotas.items()})

    def _topics(self, request: web.Request) -> list[Topic]:
        return topics_of(self.service, request)





def _quota_type(request: web.Request) -> str:
    try:
        return check_quota_type(request.query.get("backlogQuotaType", DESTINATION_STORAGE))
    except ValueError as exc:
        raise web.HTTPBadRequest(reason=str(exc)) from None


async def _json_body(request: web.Request) -> object:
    text = await request.text()
    try:
        return json.loads(text)
    except ValueError:
        raise web.HTTPBadRequest(reason=f"the body is not JSON: {text[:80]!r}") from None


def _parse(parse: Callable[[object], T], doc: object) -> T:
    """``parse(doc)``; a value Pulsar refuses is answered 412 with its reason."""
    try:
        return parse(doc)
    except ValueError as exc:
        raise web.HTTPPreconditionFailed(reason=str(exc)) from None


def _optional(value: object) -> web.Response:
    if value is None:
        return web.Response(status=204)  # as Pulsar answers an unset policy
    return web.json_response(value)
