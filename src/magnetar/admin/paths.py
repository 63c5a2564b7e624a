"""What an admin route's path names: a namespace, a topic, and the loaded topics it
stands for (every partition of a partitioned one). Refusals are Pulsar's: 412 for a
malformed name, 404 for a topic that does not exist, 503 for one that cannot load."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.broker.topics.topic import TopicUnavailable
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic


def namespace_of(request: web.Request) -> tuple[str, str]:
    tenant = request.match_info["tenant"]
    namespace = request.match_info["namespace"]
    try:  # the same rules as a topic name's tenant and namespace
        TopicName.parse(f"persistent://{tenant}/{namespace}/x")
    except InvalidTopicName as exc:
        raise web.HTTPPreconditionFailed(reason=str(exc)) from None
    return tenant, namespace


def topic_name_of(request: web.Request) -> TopicName:
    info = request.match_info
    domain = info["domain"]
    if domain not in ("persistent", "non-persistent"):
        raise web.HTTPPreconditionFailed(
            reason=f"invalid topic domain {domain!r}: expected persistent or non-persistent"
        )
    try:
        return TopicName.parse(f"{domain}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        raise web.HTTPPreconditionFailed(reason=str(exc)) from None


def topics_of(service: BrokerService, request: web.Request) -> list[Topic]:
    """The topic the path names, or every partition of a partitioned one (404 if it
    does not exist; it is loaded if it is not)."""
    name = topic_name_of(request)
    count = service.store.get_partitions(str(name))
    names = [name.partition(i) for i in range(count)] if count else [name]
    topics = []
    for each in names:
        try:
            topic = service.find_topic(each)
        except TopicUnavailable as exc:
            raise web.HTTPServiceUnavailable(reason=str(exc)) from None
        if topic is None:
            raise web.HTTPNotFound(reason=f"Topic {each} not found")
        topics.append(topic)
    return topics


def applied(request: web.Request) -> bool:
    """``?applied=true``: the policy in force (topic, else namespace, else broker)."""
    return request.query.get("applied", "false").lower() == "true"
