"""Admin REST routes for a topic's subscriptions, as Pulsar's PersistentTopics v2::

    GET    .../{topic}/subscriptions                               ["sub", ...]
    PUT    .../{topic}/subscription/{sub}[?messageId=earliest]     (body: a MessageId)
    DELETE .../{topic}/subscription/{sub}[?force=true]
    POST   .../{topic}/subscription/{sub}/skip/{n}
    POST   .../{topic}/subscription/{sub}/skip_all
    POST   .../{topic}/subscription/{sub}/resetcursor/{timestamp}
    POST   .../{topic}/subscription/{sub}/resetcursor              (body: a MessageId)
    POST   .../{topic}/subscription/{sub}/expireMessages/{seconds}
    GET    .../{topic}/subscription/{sub}/position/{n}             (peek the n-th message)

``...`` is ``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}``. A MessageId
body is ``{"ledgerId": 12, "entryId": 3}`` (``-1, -1`` is the earliest, Long.MAX the
latest), or the JSON string ``"earliest"``/``"latest"``; PUT without a body creates the
subscription at the latest. On a partitioned topic every partition is acted on
(peek excepted: 405, as Pulsar). A reset closes the subscription's consumers, whose
clients resubscribe at the new position (broker/features/admin_ops.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from aiohttp import web

from magnetar.admin.errors import fail
from magnetar.admin.topic_routes import TOPIC, all_topics, message_response, one_topic
from magnetar.broker.features import admin_ops

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic

SUB = TOPIC + "/subscription/{sub}"


def add_subscription_routes(app: web.Application, service: BrokerService) -> None:
    routes = SubscriptionRoutes(service)
    app.add_routes(
        [
            web.get(TOPIC + "/subscriptions", routes.list),
            web.put(SUB, routes.create),
            web.delete(SUB, routes.delete),
            web.post(SUB + "/skip/{count}", routes.skip),
            web.post(SUB + "/skip_all", routes.skip_all),
            web.post(SUB + "/resetcursor/{timestamp}", routes.reset_to_time),
            web.post(SUB + "/resetcursor", routes.reset_to_message_id),
            web.post(SUB + "/expireMessages/{seconds}", routes.expire),
            web.get(SUB + "/position/{position}", routes.peek),
        ]
    )


def _int(request: web.Request, key: str, minimum: int) -> int:
    text = request.match_info[key]
    try:
        value = int(text)
    except ValueError:
        fail(web.HTTPBadRequest, f"{key} must be an integer, not {text!r}")
    if value < minimum:
        fail(web.HTTPPreconditionFailed, f"{key} must be {minimum} or more")
    return value


async def _message_id_body(request: web.Request, default: str | None) -> Any:
    """The MessageId a body names: ``(ledgerId, entryId)``, or earliest/latest."""
    text = (await request.text()).strip()
    if not text:
        if default is None:
            fail(web.HTTPBadRequest, "the body must be a message id")
        return default
    try:
        doc = json.loads(text)
    except ValueError:
        doc = text  # a bare word
    if isinstance(doc, str) and doc.lower() in (admin_ops.EARLIEST, admin_ops.LATEST):
        return doc.lower()
    if isinstance(doc, dict):
        ledger_id, entry_id = doc.get("ledgerId"), doc.get("entryId")
        if isinstance(ledger_id, int) and isinstance(entry_id, int):
            return ledger_id, entry_id
    fail(web.HTTPBadRequest,
         'the body must be a message id: {"ledgerId": ..., "entryId": ...}, '
         '"earliest" or "latest"')


def _target(topic: Topic, where: Any) -> int:
    if isinstance(where, tuple):
        return admin_ops.target_of_message_id(topic, *where)
    return admin_ops.target_of(topic, where)


class SubscriptionRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def _subs(self, request: web.Request) -> list[Subscription]:
        """The subscription on the topic, or on each partition (404 if any lacks it)."""
        name = request.match_info["sub"]
        subs = []
        for topic in all_topics(self.service, request):
            sub = topic.subscriptions.get(name)
            if sub is None:
                fail(web.HTTPNotFound, "Subscription not found")
            subs.append(sub)
        return subs

    async def list(self, request: web.Request) -> web.Response:
        names: set[str] = set()
        for topic in all_topics(self.service, request):
            names.update(topic.subscriptions)
        return web.json_response(sorted(names))

    async def create(self, request: web.Request) -> web.Response:
        name = request.match_info["sub"]
        query = request.query.get("messageId")
        where = await _message_id_body(request, query.lower() if query else admin_ops.LATEST)
        topics = all_topics(self.service, request, create=True)
        if any(name in topic.subscriptions for topic in topics):
            fail(web.HTTPConflict, "Subscription already exists for topic")
        for topic in topics:
            admin_ops.create_subscription(topic, name, _target(topic, where))
        return web.Response(status=204)

    async def delete(self, request: web.Request) -> web.Response:
        force = request.query.get("force", "false").lower() == "true"
        subs = self._subs(request)
        if not force and any(sub.consumers for sub in subs):
            fail(web.HTTPPreconditionFailed, "Subscription has active connected consumers")
        for sub in subs:
            admin_ops.delete_subscription(sub.topic, sub.name, force=True)
        return web.Response(status=204)

    async def skip(self, request: web.Request) -> web.Response:
        count = _int(request, "count", 0)
        for sub in self._subs(request):
            admin_ops.skip(sub, count)
        return web.Response(status=204)

    async def skip_all(self, request: web.Request) -> web.Response:
        for sub in self._subs(request):
            admin_ops.skip_all(sub)
        return web.Response(status=204)

    async def reset_to_time(self, request: web.Request) -> web.Response:
        timestamp = _int(request, "timestamp", 0)
        for sub in self._subs(request):
            admin_ops.reset_cursor_to_time(sub, timestamp)
        return web.Response(status=204)

    async def reset_to_message_id(self, request: web.Request) -> web.Response:
        where = await _message_id_body(request, None)
        for sub in self._subs(request):
            admin_ops.reset_cursor(sub, _target(sub.topic, where))
        return web.Response(status=204)

    async def expire(self, request: web.Request) -> web.Response:
        seconds = _int(request, "seconds", 0)
        now_ms = self.service.clock_ms()
        for sub in self._subs(request):
            admin_ops.expire_messages(sub, seconds, now_ms)
        return web.Response(status=204)

    async def peek(self, request: web.Request) -> web.Response:
        topic = one_topic(self.service, request, "Peek messages")
        n = _int(request, "position", 1)
        sub = topic.subscriptions.get(request.match_info["sub"])
        if sub is None:
            fail(web.HTTPNotFound, "Subscription not found")
        entry_id = admin_ops.peek_position(sub, n)
        if entry_id is None:
            fail(web.HTTPNotFound, "Message not found")
        return message_response(topic, entry_id)
