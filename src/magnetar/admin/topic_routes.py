"""Admin REST routes for one topic, as Pulsar's PersistentTopics v2 has them::

    GET  /admin/v2/{domain}/{tenant}/{namespace}/{topic}/stats
    GET  .../{topic}/partitioned-stats[?perPartition=false]
    GET  .../{topic}/internalStats
    GET  .../{topic}/lastMessageId
    GET  .../{topic}/examinemessage?initialPosition=earliest|latest&messagePosition=N
    PUT  .../{topic}/unload
    POST .../{topic}/partitions          (body: the new, larger partition count)
    GET  /admin/v2/brokers/health, /admin/v2/brokers/ready   ("ok")

A message (examinemessage, and a subscription's peek) is answered as Pulsar answers
one: the payload, decompressed, as the body, and its metadata in ``X-Pulsar-*``
headers. Errors are Pulsar's statuses with ``{"reason": ...}`` (admin/errors.py).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from aiohttp import web

from magnetar.admin import stats
from magnetar.admin.errors import fail
from magnetar.broker.features import admin_ops
from magnetar.broker.topics.topic import TopicUnavailable
from magnetar.protocol.compression import decompress
from magnetar.protocol.frames import parse_payload
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.topic import Topic

TOPIC = "/admin/v2/{domain}/{tenant}/{namespace}/{topic}"


def add_topic_routes(app: web.Application, service: BrokerService) -> None:
    routes = TopicRoutes(service)
    app.add_routes(
        [
            web.get(TOPIC + "/stats", routes.stats),
            web.get(TOPIC + "/partitioned-stats", routes.partitioned_stats),
            web.get(TOPIC + "/internalStats", routes.internal_stats),
            web.get(TOPIC + "/lastMessageId", routes.last_message_id),
            web.get(TOPIC + "/examinemessage", routes.examine_message),
            web.put(TOPIC + "/unload", routes.unload),
            web.post(TOPIC + "/partitions", routes.update_partitions),
            web.get("/admin/v2/brokers/health", routes.health),
            web.get("/admin/v2/brokers/ready", routes.health),
        ]
    )


# ------------------------------------------------------------ what a path names


def topic_name(request: web.Request) -> TopicName:
    info = request.match_info
    try:  # a bad domain too: TopicName names it
        return TopicName.parse(f"{info['domain']}://{info['tenant']}/{info['namespace']}/{info['topic']}")
    except InvalidTopicName as exc:
        fail(web.HTTPPreconditionFailed, str(exc))


def load(service: BrokerService, name: TopicName, create: bool = False) -> Topic:
    """The topic, loaded if it is not (404 if it does not exist, 503 while unloading);
    ``create``: created where ``allow_auto_topic_creation`` lets a client's use create
    it (as Pulsar's create-subscription does)."""
    topic: Topic | None
    try:
        if create:
            topic = service.get_topic(name, create=True)
        else:
            topic = service.find_topic(name)
    except TopicUnavailable as exc:
        fail(web.HTTPServiceUnavailable, str(exc))
    except (LookupError, ValueError):
        topic = None
    if topic is None:
        fail(web.HTTPNotFound, f"topic {name} not found")  # the words tests expect
    return topic


def one_topic(service: BrokerService, request: web.Request, what: str) -> Topic:
    """A non-partitioned topic or one partition; 405 for a partitioned topic, as
    Pulsar refuses ``what`` on one."""
    name = topic_name(request)
    if name.partition_index < 0 and service.store.get_partitions(str(name)):
        fail(web.HTTPMethodNotAllowed, f"{what} on a partitioned topic is not allowed")
    return load(service, name)


def all_topics(
    service: BrokerService, request: web.Request, create: bool = False
) -> list[Topic]:
    """The topic, or every partition of a partitioned one."""
    name = topic_name(request)
    count = service.store.get_partitions(str(name)) if name.partition_index < 0 else 0
    names = [name.partition(i) for i in range(count)] if count else [name]
    return [load(service, each, create) for each in names]


def positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        fail(web.HTTPBadRequest, f"{what} must be an integer, not {text!r}")
    if value < 1:
        fail(web.HTTPPreconditionFailed, f"{what} must be 1 or more")
    return value


def message_response(topic: Topic, entry_id: int) -> web.Response:
    """The entry as Pulsar's peek/examine answer: payload body, X-Pulsar-* headers."""
    section = parse_payload(topic.ledger.read(entry_id), verify_checksum=False)
    metadata = pb.MessageMetadata()
    metadata.MergeFromString(section.metadata)
    headers = {"X-Pulsar-Message-ID": stats.position(topic, entry_id)}
    properties = {kv.key: kv.value for kv in metadata.properties}
    for key, value in properties.items():
        headers[f"X-Pulsar-PROPERTY-{key}"] = value
    if properties:  # newer clients read them all from one JSON header
        headers["X-Pulsar-PROPERTY"] = json.dumps(properties)
    headers["X-Pulsar-publish-time"] = stats.iso_time(metadata.publish_time / 1000)
    if metadata.event_time:
        headers["X-Pulsar-event-time"] = stats.iso_time(metadata.event_time / 1000)
    if metadata.HasField("num_messages_in_batch"):
        headers["X-Pulsar-num-batch-message"] = str(metadata.num_messages_in_batch)
    headers["X-Pulsar-producer-name"] = metadata.producer_name
    headers["X-Pulsar-sequence-id"] = str(metadata.sequence_id)
    if metadata.HasField("partition_key"):
        headers["X-Pulsar-partition-key"] = metadata.partition_key
    if metadata.null_value:
        headers["X-Pulsar-null-value"] = "true"
    payload = bytes(section.payload)
    if metadata.compression:
        payload = decompress(metadata.compression, payload, metadata.uncompressed_size)
    headers["X-Pulsar-batch-size"] = str(len(payload))
    return web.Response(body=payload, headers=headers, content_type="application/octet-stream")


class TopicRoutes:
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    async def stats(self, request: web.Request) -> web.Response:
        name = topic_name(request)
        if name.partition_index < 0 and self.service.store.get_partitions(str(name)):
            fail(web.HTTPNotFound, f"Topic {name} not found: it is a partitioned topic "
                 "(its stats are at partitioned-stats)")
        return web.json_response(stats.topic_stats(self.service, load(self.service, name)))

    async def partitioned_stats(self, request: web.Request) -> web.Response:
        name = topic_name(request)
        if not self.service.store.get_partitions(str(name)):
            fail(web.HTTPNotFound, f"Partitioned topic {name} not found")
        per_partition = request.query.get("perPartition", "true").lower() != "false"
        topics = all_topics(self.service, request)
        return web.json_response(stats.partitioned_stats(self.service, topics, per_partition))

    async def internal_stats(self, request: web.Request) -> web.Response:
        topic = one_topic(self.service, request, "Internal stats")
        return web.json_response(stats.internal_stats(topic))

    async def last_message_id(self, request: web.Request) -> web.Response:
        topic = one_topic(self.service, request, "Get the last message id")
        last = topic.last_message_id()
        doc = {"ledgerId": last.ledger_id, "entryId": last.entry_id,
               "partitionIndex": last.partition}
        if last.batch_index >= 0:
            doc["batchIndex"] = last.batch_index
        return web.json_response(doc)

    async def examine_message(self, request: web.Request) -> web.Response:
        topic = one_topic(self.service, request, "Examine messages")
        initial = request.query.get("initialPosition", "latest").lower()
        if initial not in (admin_ops.EARLIEST, admin_ops.LATEST):
            fail(web.HTTPPreconditionFailed,
                 f"initialPosition must be earliest or latest, not {initial!r}")
        n = positive_int(request.query.get("messagePosition", "1"), "messagePosition")
        entry_id = admin_ops.examine_position(topic, initial, n)
        if entry_id is None:
            fail(web.HTTPNotFound, f"Message not found at position {n} from the {initial}")
        return message_response(topic, entry_id)

    async def unload(self, request: web.Request) -> web.Response:
        await admin_ops.unload(self.service, all_topics(self.service, request))
        return web.Response(status=204)

    async def update_partitions(self, request: web.Request) -> web.Response:
        name = topic_name(request)
        text = await request.text()
        try:
            count = int(text)
        except ValueError:
            fail(web.HTTPBadRequest, f"the body must be the number of partitions, not {text!r}")
        try:
            admin_ops.grow_partitions(self.service, str(name), count)
        except LookupError as exc:
            fail(web.HTTPNotFound, str(exc))
        except ValueError as exc:
            fail(web.HTTPConflict if count > 0 else web.HTTPPreconditionFailed, str(exc))
        return web.Response(status=204)

    async def health(self, request: web.Request) -> web.Response:
        if not self.service.serving:
            fail(web.HTTPServiceUnavailable, "the broker is not serving")
        return web.Response(text="ok")
