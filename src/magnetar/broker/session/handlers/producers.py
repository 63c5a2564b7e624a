"""PRODUCER, SEND and CLOSE_PRODUCER, and what the broker tells a producer's client
on its own initiative (promoted from waiting, fenced, closed)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth import checks
from magnetar.broker.features.dedup import DUP, NOT_DUP, highest_sequence_id, is_tracked
from magnetar.broker.features.exclusive import ProducerRefused
from magnetar.broker.features.schemas import IncompatibleSchema, version_bytes
from magnetar.broker.session import outgoing
from magnetar.broker.session.entry_checks import batch_refusal, oversize_refusal
from magnetar.broker.session.handlers.common import get_topic, topic_name
from magnetar.broker.session.handlers.errors import CommandError
from magnetar.broker.topics.entry_info import EntryInfo, info_from_metadata
from magnetar.broker.topics.producer import SHARED, Producer
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol.fastpath import encode_send_receipt, message_id_bytes
from magnetar.protocol.frames import build_entry, parse_metadata, view_payload
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.protocol.request_reply import REQUEST_ROLE_PROPERTY, request_properties

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.topics.topic import Topic
    from magnetar.protocol.frames import Frame

log = logging.getLogger("magnetar.broker.connection")


def handle_producer(
    cnx: Session, command: BaseCommand, frame: Frame, probed: bool = False
) -> None:
    request = command.producer
    producer_id = request.producer_id
    existing = cnx.producers.get(producer_id)
    if existing is not None and not existing.fenced:
        if existing.topic_name == str(topic_name(request.topic)) and existing.ready:
            # The client retried a request we already granted.
            write_producer_success(cnx, existing, request.request_id)
            return
        raise CommandError(
            pb.NotAllowedError,
            f"producer id {producer_id} is already in use on this connection",
        )
    topic = _topic_to_produce_on(cnx, request)
    if request.HasField("producer_name") and request.producer_name:
        producer_name = request.producer_name
        if topic.access.name_in_use(producer_name):
            other = topic.access.producer_named(producer_name)
            if not probed and other is not None and other.cnx is not cnx:
                # Its connection may be half-open (the peer vanished without a FIN):
                # ask it, and let this producer take over if it does not answer.
                other.cnx.check_liveness(
                    lambda alive: _after_probe(cnx, command, frame, alive, producer_name)
                )
                return
            raise CommandError(
                pb.ProducerBusy,
                f"producer with name '{producer_name}' is already connected to topic {topic.name}",
            )
    else:
        producer_name = cnx.service.generate_producer_name()
    producer = _new_producer(cnx, request, topic, producer_name)
    requested_epoch = request.topic_epoch if request.HasField("topic_epoch") else None
    if existing is not None:
        del cnx.producers[producer_id]
    try:
        ready = topic.access.admit(producer, requested_epoch)
    except ProducerRefused as exc:
        if exc.error == pb.ProducerFenced:
            log.info("refused producer %s on %s: %s", producer_name, topic.name, exc)
        raise CommandError(exc.error, str(exc)) from None
    cnx.producers[producer_id] = producer
    topic.dedup.producer_added(producer_name)
    if request.initial_subscription_name and request.initial_subscription_name not in (
        topic.subscriptions
    ):
        _create_initial_subscription(topic, request.initial_subscription_name)
    log.info(
        "producer %s (%s) attached to %s from %s%s",
        producer_name,
        producer.access_mode_name,
        topic.name,
        cnx.remote_address,
        "" if ready else " (waiting for exclusive access)",
    )
    write_producer_success(cnx, producer, request.request_id)
    if ready:
        cnx.service.replies.producer_attached(topic, producer)


def _topic_to_produce_on(cnx: Session, request: pb.CommandProducer) -> Topic:
    """The topic a PRODUCER names, loaded (created if allowed), if the role may produce
    on it and it takes producers now; else CommandError."""
    name = topic_name(request.topic)
    # Before the topic is created for it.
    checks.require_producer(cnx, name, request.initial_subscription_name)
    topic = get_topic(cnx, name, create=True)
    if topic.terminated:
        raise CommandError(pb.TopicTerminatedError, f"topic {topic.name} is terminated")
    if topic.failure:
        raise CommandError(pb.PersistenceError, topic.failure)
    refusal = cnx.service.topic_policies.producer_refusal(topic)  # over a backlog quota
    if refusal is not None:
        raise CommandError(*refusal)
    return topic


def _new_producer(
    cnx: Session, request: pb.CommandProducer, topic: Topic, name: str
) -> Producer:
    """The producer a PRODUCER asks for, its schema registered (or CommandError)."""
    producer = Producer(
        cnx=cnx,
        producer_id=request.producer_id,
        name=name,
        topic_name=topic.name,
        access_mode=request.producer_access_mode,
        user_provided_name=request.user_provided_producer_name,
        request_id=request.request_id,
        metadata={kv.key: kv.value for kv in request.metadata},
    )
    if request.HasField("schema"):
        try:
            version = topic.schemas.add_or_get(request.schema)
        except IncompatibleSchema as exc:
            raise CommandError(pb.IncompatibleSchema, str(exc)) from None
        producer.schema_version = version_bytes(version) if version is not None else None
    return producer


def _create_initial_subscription(topic: Topic, name: str) -> None:
    """PIP-124: a producer may ask for a durable subscription at the earliest
    position, created with it (a dead-letter topic's, say), so that what it publishes
    is kept for whoever subscribes later. It takes the type of its first consumer."""
    topic.subscription(name, pb.CommandSubscribe.Exclusive, True, pb.CommandSubscribe.Earliest,
                       None)


def _after_probe(
    cnx: Session, command: BaseCommand, frame: Frame, other_alive: bool, name: str
) -> None:
    if not cnx.alive:
        return
    try:
        if other_alive:
            raise CommandError(
                pb.ProducerBusy,
                f"producer with name '{name}' is already connected to topic "
                f"{command.producer.topic}",
            )
        handle_producer(cnx, command, frame, probed=True)
    except CommandError as exc:
        cnx.write_error(command.producer.request_id, exc.error, str(exc))


def write_producer_success(cnx: Session, producer: Producer, request_id: int) -> None:
    # Deduplication's highest sequence id of this name, so that the client goes on
    # from it (-1: none, or deduplication off), as Pulsar's Producer.getLastSequenceId.
    topic = cnx.service.topics.get(producer.topic_name)
    success = pb.CommandProducerSuccess(
        request_id=request_id,
        producer_name=producer.name,
        last_sequence_id=-1 if topic is None else topic.dedup.last_sequence_id(producer.name),
        producer_ready=producer.ready,
    )
    if producer.schema_version is not None:
        success.schema_version = producer.schema_version
    if producer.access_mode != SHARED and producer.topic_epoch is not None:
        success.topic_epoch = producer.topic_epoch
    cnx.write_command(outgoing.producer_success(success))


def write_close_producer(cnx: Session, producer_id: int) -> None:
    cnx.write_command(outgoing.close_producer(producer_id))


def handle_send(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    send = command.send
    producer = _sending_producer(cnx, send)
    if producer is None:
        return
    body = frame.body
    entry = _checked_entry(cnx, send, body)
    if entry is None:
        return
    payload, metadata, info = entry
    topic = _topic_to_store(cnx, send, producer)
    if topic is None:
        return
    if metadata.HasField("chunk_id"):  # once per entry, for the stats' msgChunkPublished
        topic.msg_chunk_published = True
    request_timeout = None
    if metadata.properties:  # the cheap test first: most messages have none
        request_timeout, stamped_role = request_properties(metadata.properties)
        if request_timeout is not None or stamped_role is not None:
            if request_timeout is not None and _answer_resent_request(cnx, send, topic, producer):
                return
            if stamped_role is not None or cnx.config.authentication_enabled:
                # (Else there is nothing to stamp or strip: the entry is stored as sent,
                # not serialized and checksummed again.)
                body = _stamp_requester(cnx, payload, metadata)
                too_large = oversize_refusal(
                    len(body), info.num_messages, cnx.config.max_message_size
                )
                if too_large is not None:  # the role stamped on it took it over
                    send_error(cnx, send, pb.NotAllowedError, too_large)
                    return
    dedup_highest = None
    if topic.dedup.enabled and is_tracked(metadata):
        send_highest = send.highest_sequence_id if send.HasField("highest_sequence_id") else -1
        dedup_highest = highest_sequence_id(send.sequence_id, send_highest, metadata)
        verdict = topic.dedup.check(producer.name, send.sequence_id, dedup_highest)
        if verdict != NOT_DUP:
            _answer_duplicate(cnx, send, verdict == DUP, topic.name, producer.name)
            return
    # The entry's own metadata (info, above) says how many messages it holds, as
    # Pulsar's dispatcher reads it; CommandSend.num_messages is the producer's word only.
    # Pending from here to its receipt: past the connection's or the broker's limit
    # the connection stops being read (backpressure on the producer's socket).
    size = len(body)
    cnx.publish_started(producer, size)
    try:
        position = topic.publish(
            producer,
            send.sequence_id,
            send.highest_sequence_id,
            body,
            info,
            lambda: cnx.publish_done(producer, size),
            dedup_highest,
        )
    except BaseException:
        cnx.publish_done(producer, size)
        raise
    if request_timeout is not None:
        cnx.service.requests.remember(
            topic.name, producer.name, send.sequence_id, position, request_timeout
        )


def _sending_producer(cnx: Session, send: pb.CommandSend) -> Producer | None:
    """The producer a SEND names, if it may send now; else None, the SEND refused."""
    producer = cnx.producers.get(send.producer_id)
    if producer is None:
        send_error(
            cnx,
            send,
            pb.NotAllowedError,
            f"producer id {send.producer_id} is not open on this connection",
        )
        return None
    if producer.fenced:
        send_error(
            cnx,
            send,
            pb.ProducerFenced,
            f"producer '{producer.name}' was fenced by a newer exclusive producer",
        )
        return None
    if not producer.ready:
        send_error(
            cnx,
            send,
            pb.NotAllowedError,
            f"producer '{producer.name}' is waiting for exclusive access",
        )
        return None
    return producer


def _checked_entry(
    cnx: Session, send: pb.CommandSend, body: bytes | memoryview
) -> tuple[memoryview, pb.MessageMetadata, EntryInfo] | None:
    """A SEND's entry, parsed, if the broker may store it (entry_checks.py); else None,
    the SEND refused. Its payload is a view into ``body``: never copied, as only
    checks read it."""
    try:
        raw_metadata, payload, _ = view_payload(body)
        metadata = parse_metadata(raw_metadata)
    except ChecksumMismatch as exc:
        send_error(cnx, send, pb.ChecksumError, str(exc))
        return None
    except ProtocolError as exc:
        send_error(cnx, send, pb.NotAllowedError, f"bad message: {exc}")
        return None
    # The limit is on the payload, as clients apply it; metadata rides in the
    # frame's padding (chunks of a large message are exactly max size each), as long
    # as the MESSAGE frame a consumer gets stays within its frame limit.
    max_size = cnx.config.max_message_size
    if len(payload) > max_size:
        send_error(
            cnx,
            send,
            pb.NotAllowedError,
            f"message of {len(payload)} bytes exceeds the maximum message size "
            f"of {max_size} bytes",
        )
        return None
    # The payload runs to the end of the entry: the check reads it from the entry's bytes.
    refusal = batch_refusal(
        metadata, body, cnx.config.max_messages_per_batch, len(body) - len(payload)
    )
    info = info_from_metadata(metadata)
    if refusal is None:
        refusal = oversize_refusal(len(body), info.num_messages, max_size)
    if refusal is not None:
        send_error(cnx, send, pb.NotAllowedError, refusal)
        return None
    return payload, metadata, info


def _topic_to_store(cnx: Session, send: pb.CommandSend, producer: Producer) -> Topic | None:
    """The producer's topic, if it takes entries now; else None, the SEND refused."""
    topic = cnx.service.topics.get(producer.topic_name)
    if topic is None or topic.closed:
        send_error(cnx, send, pb.ServiceNotReady, f"topic {producer.topic_name} is not loaded")
        return None
    if topic.terminated:
        send_error(cnx, send, pb.TopicTerminatedError, f"topic {topic.name} is terminated")
        return None
    if topic.failure:
        send_error(cnx, send, pb.PersistenceError, topic.failure)
        return None
    return topic


def _answer_resent_request(
    cnx: Session, send: pb.CommandSend, topic: Topic, producer: Producer
) -> bool:
    """PIP-371: a request stored already (its receipt was lost, the client sent it again
    after reconnecting) is answered with its first copy's id, not stored twice; one
    whose first copy is not durable yet is refused as deduplication refuses it, and
    the client sends it again. False: not a copy of a remembered request."""
    first = cnx.service.requests.first_copy(topic.name, producer.name, send.sequence_id)
    if first is None:
        return False
    if first > topic.ledger.last_confirmed_entry_id:
        _answer_duplicate(cnx, send, False, topic.name, producer.name)
        return True
    mid = topic.message_id(first)
    cnx.write(
        encode_send_receipt(
            send.producer_id,
            send.sequence_id,
            message_id_bytes(mid.ledger_id, mid.entry_id, -1),
            send.highest_sequence_id,
        )
    )
    log.info("request %d of %s on %s sent again: answered with its first copy %s",
             send.sequence_id, producer.name, topic.name, mid)
    return True


def _stamp_requester(
    cnx: Session, payload: memoryview, metadata: pb.MessageMetadata
) -> bytes:
    """The entry to store for a request: with authentication on, stamped with the role
    that publishes it (a reply goes only to that role's producer); a producer's own
    role property is dropped either way, so none is ever taken on trust."""
    kept = [kv for kv in metadata.properties if kv.key != REQUEST_ROLE_PROPERTY]
    del metadata.properties[:]
    metadata.properties.extend(kept)
    role = cnx.role if cnx.config.authentication_enabled else None
    if role is not None:
        metadata.properties.add(key=REQUEST_ROLE_PROPERTY, value=role)
    return build_entry(metadata.SerializeToString(), payload)


_DUPLICATE_ID = message_id_bytes(-1, -1, -1)


def _answer_duplicate(
    cnx: Session, send: pb.CommandSend, stored: bool, topic: str, producer: str
) -> None:
    """Pulsar's answers to a duplicate: one already stored gets a receipt for message
    id -1:-1 at once, and nothing is stored again; one whose first copy is still being
    written gets a PersistenceError, on which the client reconnects and sends it again
    (by then it is stored, or its first copy failed and this one goes through)."""
    if stored:
        cnx.write(
            encode_send_receipt(
                send.producer_id, send.sequence_id, _DUPLICATE_ID, send.highest_sequence_id
            )
        )
        return
    send_error(
        cnx,
        send,
        pb.PersistenceError,
        f"[{topic}][{producer}] Cannot determine whether the message is a duplicate at "
        "this time",
    )


def send_error(cnx: Session, send: pb.CommandSend, error: int, message: str) -> None:
    log.info("send error to %s: %s", cnx.remote_address, message)
    cnx.write_command(outgoing.send_error(send.producer_id, send.sequence_id, error, message))


def handle_close_producer(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    request = command.close_producer
    producer = cnx.producers.pop(request.producer_id, None)
    if producer is not None:
        detach_producer(cnx, producer, explicit=True)
    cnx.write_success(request.request_id)


def detach_producer(cnx: Session, producer: Producer, explicit: bool = False) -> None:
    # Receipts that may never come (a failed ledger drops them) must not hold the
    # connection's or the broker's publish limits.
    cnx.release_publishes(producer)
    topic = cnx.service.topics.get(producer.topic_name)
    if topic is not None:
        topic.dedup.producer_removed(producer.name)
        topic.access.release(producer)
        cnx.service.on_producer_closed(topic, producer, explicit)
