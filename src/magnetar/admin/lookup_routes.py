"""Pulsar's HTTP lookup service: what a client whose service URL is the admin address
(``http://host:8080``) asks instead of the binary LOOKUP and GET_TOPICS_OF_NAMESPACE::

    GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}[?listenerName=name]
        {"brokerUrl": "pulsar://host:6650", "httpUrl": "http://host:8080",
         "nativeUrl": "pulsar://host:6650", "brokerUrlSsl": ""}
    GET /admin/v2/namespaces/{tenant}/{namespace}/topics[?mode=PERSISTENT|NON_PERSISTENT|ALL]

Partition counts come from ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions``
(the topic routes). The lookup answers as Pulsar's ``LookupData`` serializes: the TLS
addresses only when the listener has them, ``nativeUrl`` and ``brokerUrlSsl`` for old
clients. The listener comes from ``listenerName`` or the ``X-Pulsar-ListenerName``
header, as Pulsar reads them. As the binary LOOKUP, it answers for a topic that does
not exist yet (Pulsar's HTTP lookup answers 404 there when auto-creation is off): the
PRODUCER or SUBSCRIBE that follows answers TopicNotFound, which the official client
reports as such, where an HTTP error would reach it as a ConnectError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from aiohttp import web

from magnetar.admin.tenants import client_lookup, fail
from magnetar.broker.session.listeners import ListenerNotFound, select
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

LISTENER_HEADER = "X-Pulsar-ListenerName"
_MODES = {
    "PERSISTENT": pb.CommandGetTopicsOfNamespace.PERSISTENT,
    "NON_PERSISTENT": pb.CommandGetTopicsOfNamespace.NON_PERSISTENT,
    "ALL": pb.CommandGetTopicsOfNamespace.ALL,
}


def add_lookup_routes(
    app: web.Application, service: BrokerService, admin_port: Callable[[], int]
) -> None:
    """Register the routes (before the topic routes); ``admin_port`` is the port the
    admin server serves on, for the ``httpUrl`` of an answer."""
    routes = LookupRoutes(service, admin_port)
    app.add_routes(
        [
            web.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", routes.lookup),
            web.get("/admin/v2/namespaces/{tenant}/{namespace}/topics", routes.namespace_topics),
        ]
    )


class LookupRoutes:
    def __init__(self, service: BrokerService, admin_port: Callable[[], int]) -> None:
        self.service = service
        self.admin_port = admin_port

    @client_lookup
    async def lookup(self, request: web.Request) -> web.Response:
        _topic(request)  # a valid name; whether the topic exists, PRODUCER or SUBSCRIBE says
        service = self.service
        wanted = request.query.get("listenerName") or request.headers.get(LISTENER_HEADER)
        try:
            listener = select(service.config, wanted)
        except ListenerNotFound as exc:
            fail(web.HTTPBadRequest, str(exc))
        broker_url = listener.broker_url or listener.broker_url_tls
        host = urlsplit(broker_url).hostname or "127.0.0.1"
        if ":" in host:
            host = f"[{host}]"
        answer = {
            "brokerUrl": listener.broker_url,
            "httpUrl": listener.http_url or f"http://{host}:{self.admin_port()}",
            "nativeUrl": listener.broker_url,
            "brokerUrlSsl": "",
        }
        if listener.broker_url_tls:
            answer["brokerUrlTls"] = listener.broker_url_tls
        if listener.http_url_tls:
            answer["httpUrlTls"] = listener.http_url_tls
        return web.json_response(answer)

    @client_lookup
    async def namespace_topics(self, request: web.Request) -> web.Response:
        info = request.match_info
        mode = request.query.get("mode", "PERSISTENT").upper()
        if mode not in _MODES:
            fail(web.HTTPBadRequest, f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
        namespace = f"{info['tenant']}/{info['namespace']}"
        return web.json_response(self.service.topics_of_namespace(namespace, _MODES[mode]))


def _topic(request: web.Request) -> TopicName:
    info = request.match_info
    domain = info["domain"]
    if domain not in ("persistent", "non-persistent"):
        fail(
            web.HTTPPreconditionFailed,
            f"invalid topic domain {domain!r}: expected persistent or non-persistent",
        )
    try:
        return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        fail(web.HTTPPreconditionFailed, str(exc))
