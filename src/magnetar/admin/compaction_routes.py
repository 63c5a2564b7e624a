"""Admin REST routes for topic compaction, as Pulsar's::

    PUT    /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction
    GET    /admin/v2/persistent/{tenant}/{namespace}/{topic}/compaction
    POST   /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold
    GET    /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold
    DELETE /admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold
    POST|GET|DELETE /admin/v2/persistent/{tenant}/{namespace}/{topic}/compactionThreshold

PUT triggers a compaction (204; 409 "Compaction already in progress" while one runs);
GET reports the last one as Pulsar's LongRunningProcessStatus,
``{"status": "NOT_RUN|RUNNING|SUCCESS|ERROR", "lastError": ""}``. On a partitioned topic
both act on every partition (the status: the least advanced of them, an error first).
A threshold is a number of bytes (the body ``1048576``; 0 turns it off, a negative
one is refused with 412); GET of an unset one answers 204, ``?applied=true`` on a
topic gives the one in force.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin.paths import namespace_of, topics_of
from magnetar.broker.features.compaction_service import (
    CompactionAlreadyRunning,
    CompactionNotAllowed,
)

if TYPE_CHECKING:
    from magnetar.broker.features.compaction_service import CompactionService
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

TOPIC_BASE = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"
COMPACTION_PATH = TOPIC_BASE + "/compaction"
TOPIC_THRESHOLD_PATH = TOPIC_BASE + "/compactionThreshold"
NAMESPACE_THRESHOLD_PATH = "/admin/v2/namespaces/{tenant}/{namespace}/compactionThreshold"

# Several partitions: the status that says the least about success wins.
_STATUS_ORDER = ("ERROR", "RUNNING", "NOT_RUN", "SUCCESS")


def add_compaction_routes(app: web.Application, service: BrokerService) -> None:
    """Register the routes (before the generic topic routes, which would match them)."""
    routes = CompactionRoutes(service)
    app.add_routes(
        [
            web.put(COMPACTION_PATH, routes.trigger),
            web.get(COMPACTION_PATH, routes.status),
            web.get(NAMESPACE_THRESHOLD_PATH, routes.get_namespace_threshold),
            web.post(NAMESPACE_THRESHOLD_PATH, routes.set_namespace_threshold),
            web.delete(NAMESPACE_THRESHOLD_PATH, routes.remove_namespace_threshold),
            web.get(TOPIC_THRESHOLD_PATH, routes.get_topic_threshold),
            web.post(TOPIC_THRESHOLD_PATH, routes.set_topic_threshold),
            web.delete(TOPIC_THRESHOLD_PATH, routes.remove_topic_threshold),
        ]
    )


class CompactionRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    @property
    def compaction(self) -> CompactionService:
        return self.service.compaction

    # ------------------------------------------------------------ compaction

    async def trigger(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        for topic in topics:
            if self.compaction.state(topic).running:
                raise web.HTTPConflict(reason="Compaction already in progress")
        for topic in topics:
            try:
                self.compaction.trigger(topic)
            except CompactionAlreadyRunning as exc:
                raise web.HTTPConflict(reason=str(exc)) from None
            except CompactionNotAllowed as exc:
                raise web.HTTPMethodNotAllowed(request.method, [], reason=str(exc)) from None
        return web.Response(status=204)

    async def status(self, request: web.Request) -> web.Response:
        statuses = [self.compaction.status(topic) for topic in self._topics(request)]
        worst = min(statuses, key=lambda s: _STATUS_ORDER.index(s["status"]))
        return web.json_response(worst)

    # ------------------------------------------------------------ thresholds

    async def get_namespace_threshold(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        return _threshold_response(self.compaction.namespace_threshold(tenant, namespace))

    async def set_namespace_threshold(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        value = await _threshold_body(request)
        self.compaction.set_namespace_threshold(tenant, namespace, value)
        return web.Response(status=204)

    async def remove_namespace_threshold(self, request: web.Request) -> web.Response:
        tenant, namespace = namespace_of(request)
        self.compaction.set_namespace_threshold(tenant, namespace, None)
        return web.Response(status=204)

    async def get_topic_threshold(self, request: web.Request) -> web.Response:
        topic = self._topics(request)[0]
        if request.query.get("applied", "false").lower() == "true":
            return web.json_response(self.compaction.applied_threshold(topic))
        return _threshold_response(self.compaction.topic_threshold(topic))

    async def set_topic_threshold(self, request: web.Request) -> web.Response:
        topics = self._topics(request)
        value = await _threshold_body(request)
        for topic in topics:
            self.compaction.set_topic_threshold(topic, value)
        return web.Response(status=204)

    async def remove_topic_threshold(self, request: web.Request) -> web.Response:
        for topic in self._topics(request):
            self.compaction.set_topic_threshold(topic, None)
        return web.Response(status=204)

    def _topics(self, request: web.Request) -> list[Topic]:
        return topics_of(self.service, request)




async def _threshold_body(request: web.Request) -> int:
    """The body Pulsar's admin client sends: the number of bytes, as JSON."""
    text = await request.text()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, bool) or not isinstance(value, int):
        raise web.HTTPBadRequest(reason=f"the body must be a number of bytes, not {text[:80]!r}")
    if value < 0:  # Pulsar's status and words
        raise web.HTTPPreconditionFailed(reason="compactionThreshold must be 0 or more")
    return value


def _threshold_response(value: int | None) -> web.Response:
    if value is None:
        return web.Response(status=204)  # as Pulsar answers an unset policy
    return web.json_response(value)
