"""SUBSCRIBE, FLOW, REDELIVER, UNSUBSCRIBE, CLOSE_CONSUMER, SEEK and the consumer's
queries (last message id, stats), and what the broker tells a consumer's client on its
own initiative (closed)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth import checks
from magnetar.broker.auth.authorization import CONSUME
from magnetar.broker.features.schemas import IncompatibleSchema
from magnetar.broker.session import outgoing
from magnetar.broker.session.handlers.common import get_topic, topic_name
from magnetar.broker.session.handlers.errors import CommandError
from magnetar.broker.topics.compacted_dispatch import compacted_last_message_id
from magnetar.broker.topics.consumer import Consumer
from magnetar.broker.topics.subscription import SubscriptionError
from magnetar.protocol.capabilities import capabilities
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.protocol.topic_name import name_problem

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.topics.topic import Topic
    from magnetar.protocol.frames import Frame

log = logging.getLogger("magnetar.broker.connection")


def handle_subscribe(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.subscribe
    if request.consumer_id in cnx.consumers:
        existing = cnx.consumers[request.consumer_id]
        if existing.subscription.name == request.subscription and not existing.closed:
            cnx.write_success(request.request_id)
            return
        raise CommandError(
            pb.NotAllowedError,
            f"consumer id {request.consumer_id} is already in use on this connection",
        )
    if not request.subscription:
        raise CommandError(pb.NotAllowedError, "subscription name is empty")
    name = topic_name(request.topic)
    checks.require_subscribe(cnx, name)  # before the topic is created for it
    problem = name_problem("subscription", request.subscription)
    if problem:
        raise CommandError(pb.NotAllowedError, problem)
    topic = get_topic(cnx, name, create=request.force_topic_creation)
    if request.HasField("schema"):
        # Judged before the subscription is touched, so that a refused consumer holds
        # nothing: the next subscribe on an Exclusive subscription is not ConsumerBusy.
        try:
            topic.schemas.admit_consumer(request.schema, _active(topic))
        except IncompatibleSchema as exc:
            raise CommandError(pb.IncompatibleSchema, str(exc)) from None
    if request.read_compacted:
        _check_read_compacted(topic, request.subType)
    start = request.start_message_id if request.HasField("start_message_id") else None
    try:
        sub = topic.subscription(
            request.subscription,
            request.subType,
            request.durable,
            request.initialPosition,
            start,
            request.read_compacted,
        )
    except SubscriptionError as exc:
        raise CommandError(exc.error, str(exc)) from None
    ranges: list[tuple[int, int]] | None = None
    if request.HasField("keySharedMeta") and request.keySharedMeta.keySharedMode == pb.STICKY:
        ranges = [(r.start, r.end) for r in request.keySharedMeta.hashRanges]
    declared = capabilities(request.metadata)
    consumer = Consumer(
        cnx=cnx,
        consumer_id=request.consumer_id,
        name=request.consumer_name or f"consumer-{cnx.id}-{request.consumer_id}",
        subscription=sub,
        priority_level=request.priority_level,
        consumer_epoch=request.consumer_epoch if request.HasField("consumer_epoch") else None,
        hash_ranges=ranges,
        metadata={kv.key: kv.value for kv in request.metadata},
        reads_foreign_entries=declared.reads_foreign_entries,
        backs_off_itself=declared.backs_off_itself,
    )
    try:
        sub.add_consumer(consumer)
        sub.read_compacted = request.read_compacted
    except SubscriptionError as exc:
        topic.maybe_drop_reader(sub)
        raise CommandError(exc.error, str(exc)) from None
    cnx.consumers[request.consumer_id] = consumer
    log.info(
        "consumer %s subscribed to %s/%s (%s%s) from %s",
        consumer.name,
        topic.name,
        sub.name,
        sub.type_name,
        "" if sub.durable else ", non-durable",
        cnx.remote_address,
    )
    cnx.write_success(request.request_id)
    sub.notify_consumer_active(consumer)


def _check_read_compacted(topic: Topic, sub_type: int) -> None:
    """Pulsar's rules for ``read_compacted`` (its words, too)."""
    if not topic.topic_name.persistent:
        raise CommandError(pb.NotAllowedError, "readCompacted only valid on persistent topics")
    if sub_type not in (pb.CommandSubscribe.Exclusive, pb.CommandSubscribe.Failover):
        raise CommandError(
            pb.NotAllowedError, "readCompacted only allowed on failover or exclusive subscriptions"
        )


def _active(topic: Topic) -> bool:
    """Pulsar's test before a consumer's schema may become the topic's: no producer,
    no consumer and no stored entry means idle."""
    if topic.producers or any(sub.consumers for sub in topic.subscriptions.values()):
        return True
    return topic.ledger.next_entry_id > topic.ledger.first_entry_id


def open_consumer(cnx: Session, consumer_id: int) -> Consumer:
    consumer = cnx.consumers.get(consumer_id)
    if consumer is None:
        raise CommandError(
            pb.ConsumerNotFound, f"consumer id {consumer_id} is not open on this connection"
        )
    return consumer


def handle_flow(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    flow = command.flow
    consumer = cnx.consumers.get(flow.consumer_id)
    if consumer is None:
        log.info("FLOW for unknown consumer %d from %s", flow.consumer_id, cnx.remote_address)
        return
    consumer.subscription.on_flow(consumer, flow.messagePermits)


def handle_redeliver(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.redeliverUnacknowledgedMessages
    consumer = cnx.consumers.get(request.consumer_id)
    if consumer is None:
        return
    sub = consumer.subscription
    if request.HasField("consumer_epoch"):
        consumer.consumer_epoch = request.consumer_epoch
    if not request.message_ids:
        sub.redeliver(consumer, None)
        return
    topic = sub.topic
    ids = [
        entry_id
        for m in request.message_ids
        if (entry_id := topic.exact_entry_id(m.ledgerId, m.entryId)) is not None
    ]
    if sub.is_single_active():
        sub.rewind(consumer, ids)  # order is total: everything pending goes again
    else:
        sub.redeliver(consumer, ids)


def handle_unsubscribe(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.unsubscribe
    consumer = open_consumer(cnx, request.consumer_id)
    sub = consumer.subscription
    others = [c for c in sub.consumers if c is not consumer]
    if others and not request.force:
        raise CommandError(
            pb.NotAllowedError,
            f"subscription '{sub.name}' has {len(others)} other connected consumer(s)",
        )
    for other in others:
        other.cnx.consumer_closed_by_broker(other)
    cnx.consumers.pop(request.consumer_id, None)
    sub.remove_consumer(consumer)
    sub.topic.remove_subscription(sub.name)
    log.info("unsubscribed %s from %s", sub.name, sub.topic.name)
    cnx.write_success(request.request_id)


def handle_close_consumer(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.close_consumer
    consumer = cnx.consumers.pop(request.consumer_id, None)
    if consumer is not None:
        detach_consumer(consumer)
        # Acks made just before a clean close survive a crash right after it.
        consumer.subscription.cursor.flush()
    cnx.write_success(request.request_id)


def detach_consumer(consumer: Consumer) -> None:
    sub = consumer.subscription
    sub.remove_consumer(consumer)
    sub.topic.maybe_drop_reader(sub)


def write_close_consumer(cnx: Session, consumer_id: int) -> None:
    cnx.write_command(outgoing.close_consumer(consumer_id))


def handle_seek(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.seek
    consumer = open_consumer(cnx, request.consumer_id)
    checks.require(cnx, consumer.subscription.topic.topic_name, CONSUME, "seek")
    sub = consumer.subscription
    topic = sub.topic
    if request.HasField("message_id"):
        mid = MessageId.from_pb(request.message_id)
        if mid.is_earliest:
            target = topic.earliest_entry_id(sub.read_compacted)
        elif mid.is_latest:
            target = topic.last_visible_entry_id + 1
        else:
            # Past the end means the end, and before the first entry the first, as
            # Pulsar resets a cursor to the nearest valid position.
            target = topic.entry_id_of(mid.ledger_id, mid.entry_id)
            target = max(topic.ledger.first_entry_id, min(target, topic.last_visible_entry_id + 1))
    elif request.HasField("message_publish_time"):
        target = topic.find_by_publish_time(request.message_publish_time)
    else:
        raise CommandError(pb.NotAllowedError, "SEEK needs a message id or a publish time")
    # As in Pulsar, the subscription's consumers are disconnected and come
    # back at the new position with fresh permits.
    for other in list(sub.consumers):
        other.cnx.consumer_closed_by_broker(other)
    sub.seek(target)
    if not sub.durable:
        topic.subscriptions.setdefault(sub.name, sub)
    log.info("seek %s/%s to entry %d", topic.name, sub.name, target)
    cnx.write_success(request.request_id)


def handle_get_last_message_id(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.getLastMessageId
    consumer = open_consumer(cnx, request.consumer_id)
    checks.require(cnx, consumer.subscription.topic.topic_name, CONSUME, "get the last message id")
    topic = consumer.subscription.topic
    last = topic.last_message_id()
    if consumer.subscription.read_compacted:
        last = compacted_last_message_id(topic) or last
    mark_delete = consumer.subscription.cursor.mark_delete
    cnx.write_command(
        outgoing.last_message_id(
            request.request_id, last.to_pb(), topic.message_id(mark_delete).to_pb()
        )
    )


def handle_consumer_stats(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.consumerStats
    consumer = cnx.consumers.get(request.consumer_id)
    response = pb.CommandConsumerStatsResponse(request_id=request.request_id)
    if consumer is None:
        response.error_code = pb.ConsumerNotFound
        response.error_message = f"consumer {request.consumer_id} not found"
    else:
        response.consumerName = consumer.name
        response.availablePermits = max(consumer.permits, 0)
        response.unackedMessages = len(consumer.pending)
        response.msgBacklog = consumer.subscription.backlog()
        response.type = consumer.subscription.type_name
        response.address = cnx.remote_address
    cnx.write_command(outgoing.consumer_stats(response))
