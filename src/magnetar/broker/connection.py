"""One client connection (Pulsar's ServerCnx): decodes frames and calls into topics.

Writes are gathered and flushed once per event-loop iteration, so a burst of
receipts or messages costs one syscall. A connection that cannot keep up
(transport paused) stops receiving dispatches until it drains.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from magnetar import __version__
from magnetar.broker.client_quirks import understands_end_of_topic
from magnetar.broker.consumer import Consumer
from magnetar.broker.entry_info import info_from_metadata
from magnetar.broker.exclusive import ProducerRefused
from magnetar.broker.producer import SHARED, Producer
from magnetar.broker.rpc import ReplyRejected
from magnetar.broker.schemas import IncompatibleSchema, SchemaRegistry, version_bytes
from magnetar.broker.subscription import SubscriptionError
from magnetar.broker.topic_name import InvalidTopicName, TopicName
from magnetar.protocol.command_checks import command_body
from magnetar.protocol.errors import ChecksumMismatch, FrameTooLarge, ProtocolError
from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    encode_command,
    max_frame_size,
    parse_metadata,
    parse_payload,
)
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.storage.store import too_long_for_a_file

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic

log = logging.getLogger("magnetar.broker.connection")

MAX_PROTOCOL_VERSION = 21
T = BaseCommand.Type
_connection_ids = itertools.count(1)


class CommandError(Exception):
    """Raised by a handler: answered with ERROR for the request that caused it."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class ServerCnx(asyncio.Protocol):
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self.loop = service.loop
        self.id = next(_connection_ids)
        self.decoder = FrameDecoder(max_frame_size(service.config.max_message_size))
        self._activity = service.idle_poller.activity
        self.transport: asyncio.Transport | None = None
        self.remote_address = "?"
        self.connected = False  # CONNECT seen
        self.alive = False
        self.writable = True
        self.protocol_version = 0
        self.client_version = ""
        self.supports_request_reply = False
        self.understands_end_of_topic = False
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self._out: list[bytes] = []
        self._flush_scheduled = False
        self._last_seen = 0.0
        self._keepalive: asyncio.TimerHandle | None = None
        self._ping_outstanding = False
        self._handlers: dict[int, Callable[[BaseCommand, Frame], Any]] = {
            T.CONNECT: self.handle_connect,
            T.PING: self.handle_ping,
            T.PONG: self.handle_pong,
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics,
            T.PRODUCER: self.handle_producer,
            T.SEND: self.handle_send,
            T.CLOSE_PRODUCER: self.handle_close_producer,
            T.SUBSCRIBE: self.handle_subscribe,
            T.FLOW: self.handle_flow,
            T.ACK: self.handle_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            T.UNSUBSCRIBE: self.handle_unsubscribe,
            T.CLOSE_CONSUMER: self.handle_close_consumer,
            T.SEEK: self.handle_seek,
            T.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            T.GET_SCHEMA: self.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
            T.CONSUMER_STATS: self.handle_consumer_stats,
        }

    # ------------------------------------------------------------ transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.alive = True
        self._last_seen = self.loop.time()
        self.service.connection_opened(self)
        self._arm_keepalive()

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if self._keepalive is not None:
            self._keepalive.cancel()
        log.debug("connection %s from %s closed", self.id, self.remote_address)
        self._release_everything()
        self.service.connection_closed(self)

    def pause_writing(self) -> None:
        self.writable = False

    def resume_writing(self) -> None:
        self.writable = True
        for consumer in self.consumers.values():
            consumer.subscription.schedule_dispatch()

    def data_received(self, data: bytes) -> None:
        self._last_seen = self.loop.time()
        self._activity()
        try:
            frames = self.decoder.feed(data)
        except ProtocolError as exc:
            self._framing_failure(exc)
            return
        for frame in frames:
            if not self.alive:
                return
            self._handle_frame(frame)
        failure = self.decoder.failure  # after the good frames that came before it
        if failure is not None and self.alive:
            self._framing_failure(failure)

    def _framing_failure(self, exc: ProtocolError) -> None:
        if isinstance(exc, FrameTooLarge):
            self._protocol_failure(f"frame too large: {exc}", pb.NotAllowedError)
        else:
            self._protocol_failure(f"malformed frame: {exc}", pb.UnknownError)

    def _handle_frame(self, frame: Frame) -> None:
        if frame.unknown_type is not None:
            log.warning(
                "connection %s from %s sent unsupported command type %d",
                self.id,
                self.remote_address,
                frame.unknown_type,
            )
            self.write_error(
                0, pb.NotAllowedError, f"unsupported command type {frame.unknown_type}"
            )
            return
        command = frame.command
        kind = command.type
        if not self.connected and kind != T.CONNECT:
            self._protocol_failure(
                f"command {T.Name(kind)} sent before CONNECT", pb.NotAllowedError
            )
            return
        handler = self._handlers.get(kind)
        if handler is None:
            log.warning(
                "connection %s from %s sent unexpected command %s",
                self.id,
                self.remote_address,
                T.Name(kind),
            )
            self.write_error(0, pb.NotAllowedError, f"unexpected command {T.Name(kind)}")
            return
        try:
            handler(command, frame)
        except CommandError as exc:
            self.write_error(_request_id(command), exc.error, str(exc))
        except Exception as exc:
            log.exception("error handling %s from %s", T.Name(kind), self.remote_address)
            # An OSError's text names files; the client gets the cause without the paths.
            cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            self.write_error(_request_id(command), pb.UnknownError, f"internal error: {cause}")

    def _protocol_failure(self, message: str, error: int) -> None:
        log.warning("closing connection %s from %s: %s", self.id, self.remote_address, message)
        self.write_error(0, error, message)
        self.alive = False  # nothing more is read from it, or routed to it
        self.close()

    def write(self, data: bytes) -> None:
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._flush)

    def flush_now(self) -> None:
        """Write what is queued now instead of at the end of this loop round."""
        if self._out:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if not out or self.transport is None or self.transport.is_closing():
            out.clear()
            return
        self._out = []
        self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    def write_command(self, command: BaseCommand) -> None:
        self.write(encode_command(command))

    def write_error(self, request_id: int, error: int, message: str) -> None:
        self.write_command(
            BaseCommand(
                type=T.ERROR,
                error=pb.CommandError(request_id=request_id, error=error, message=message),  # type: ignore[arg-type]
            )
        )

    def write_success(self, request_id: int) -> None:
        self.write_command(
            BaseCommand(type=T.SUCCESS, success=pb.CommandSuccess(request_id=request_id))
        )

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._flush()
            self.transport.close()

    # ------------------------------------------------------------ keepalive

    def _arm_keepalive(self) -> None:
        interval = self.service.config.keepalive_interval
        if interval > 0:
            self._keepalive = self.loop.call_later(interval, self._check_keepalive)

    def _check_keepalive(self) -> None:
        if not self.alive:
            return
        interval = self.service.config.keepalive_interval
        idle = self.loop.time() - self._last_seen
        if self._ping_outstanding and idle >= 2 * interval:
            log.warning(
                "closing connection %s from %s: no answer to ping for %.0fs",
                self.id,
                self.remote_address,
                idle,
            )
            self.close()
            return
        if idle >= interval and self.connected:
            self._ping_outstanding = True
            self.write_command(BaseCommand(type=T.PING, ping=pb.CommandPing()))
        self._arm_keepalive()

    def handle_ping(self, command: BaseCommand, frame: Frame) -> None:
        self.write_command(BaseCommand(type=T.PONG, pong=pb.CommandPong()))

    def handle_pong(self, command: BaseCommand, frame: Frame) -> None:
        self._ping_outstanding = False

    # ------------------------------------------------------------ handshake

    def handle_connect(self, command: BaseCommand, frame: Frame) -> None:
        if self.connected:
            raise CommandError(pb.NotAllowedError, "CONNECT sent twice on one connection")
        connect = command.connect
        self.connected = True
        self.client_version = connect.client_version
        self.protocol_version = min(connect.protocol_version, MAX_PROTOCOL_VERSION)
        self.supports_request_reply = connect.feature_flags.supports_request_reply
        self.understands_end_of_topic = understands_end_of_topic(
            self.client_version, self.protocol_version
        )
        log.debug(
            "connection %s from %s: client %s, protocol v%d",
            self.id,
            self.remote_address,
            self.client_version,
            self.protocol_version,
        )
        self.write_command(
            BaseCommand(
                type=T.CONNECTED,
                connected=pb.CommandConnected(
                    server_version=f"magnetar/{__version__}",
                    protocol_version=self.protocol_version,
                    max_message_size=self.service.config.max_message_size,
                    feature_flags=pb.FeatureFlags(supports_request_reply=True),
                ),
            )
        )

    # ------------------------------------------------------------ lookup

    def _topic_name(self, name: str) -> TopicName:
        try:
            return TopicName.parse(name)
        except InvalidTopicName as exc:
            raise CommandError(pb.InvalidTopicName, str(exc)) from None

    def handle_lookup(self, command: BaseCommand, frame: Frame) -> None:
        lookup = command.lookupTopic
        response = pb.CommandLookupTopicResponse(request_id=lookup.request_id)
        try:
            TopicName.parse(lookup.topic)
        except InvalidTopicName as exc:
            response.response = pb.CommandLookupTopicResponse.Failed
            response.error = pb.InvalidTopicName
            response.message = str(exc)
        else:
            response.response = pb.CommandLookupTopicResponse.Connect
            response.brokerServiceUrl = self.service.config.service_url
            response.authoritative = True
        self.write_command(BaseCommand(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))

    def handle_partitioned_metadata(self, command: BaseCommand, frame: Frame) -> None:
        request = command.partitionMetadata
        response = pb.CommandPartitionedTopicMetadataResponse(request_id=request.request_id)
        try:
            name = TopicName.parse(request.topic)
        except InvalidTopicName as exc:
            response.response = pb.CommandPartitionedTopicMetadataResponse.Failed
            response.error = pb.InvalidTopicName
            response.message = str(exc)
        else:
            response.partitions = self.service.partitions_for_lookup(
                name, request.metadata_auto_creation_enabled
            )
            response.response = pb.CommandPartitionedTopicMetadataResponse.Success
        self.write_command(
            BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=response)
        )

    def handle_get_topics(self, command: BaseCommand, frame: Frame) -> None:
        request = command.getTopicsOfNamespace
        topics = self.service.topics_of_namespace(request.namespace, request.mode)
        self.write_command(
            BaseCommand(
                type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE,
                getTopicsOfNamespaceResponse=pb.CommandGetTopicsOfNamespaceResponse(
                    request_id=request.request_id, topics=topics, filtered=False, changed=True
                ),
            )
        )

    # ------------------------------------------------------------ producers

    def _get_topic(self, name: TopicName, create: bool) -> Topic:
        try:
            return self.service.get_topic(name, create=create)
        except LookupError as exc:
            raise CommandError(pb.TopicNotFound, str(exc)) from None
        except ValueError as exc:
            raise CommandError(pb.NotAllowedError, str(exc)) from None

    def handle_producer(self, command: BaseCommand, frame: Frame) -> None:
        request = command.producer
        producer_id = request.producer_id
        existing = self.producers.get(producer_id)
        if existing is not None and not existing.fenced:
            if existing.topic_name == str(self._topic_name(request.topic)) and existing.ready:
                # The client retried a request we already granted.
                self._write_producer_success(existing, request.request_id)
                return
            raise CommandError(
                pb.NotAllowedError,
                f"producer id {producer_id} is already in use on this connection",
            )
        name = self._topic_name(request.topic)
        topic = self._get_topic(name, create=True)
        if topic.terminated:
            raise CommandError(pb.TopicTerminatedError, f"topic {topic.name} is terminated")
        if topic.failure:
            raise CommandError(pb.PersistenceError, topic.failure)
        if request.HasField("producer_name") and request.producer_name:
            producer_name = request.producer_name
            if topic.access.name_in_use(producer_name):
                raise CommandError(
                    pb.ProducerBusy,
                    f"producer with name '{producer_name}' is already connected to topic "
                    f"{topic.name}",
                )
        else:
            producer_name = self.service.generate_producer_name()
        producer = Producer(
            cnx=self,
            producer_id=producer_id,
            name=producer_name,
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
        requested_epoch = request.topic_epoch if request.HasField("topic_epoch") else None
        if existing is not None:
            del self.producers[producer_id]
        try:
            ready = topic.access.admit(producer, requested_epoch)
        except ProducerRefused as exc:
            if exc.error == pb.ProducerFenced:
                log.info("refused producer %s on %s: %s", producer_name, topic.name, exc)
            raise CommandError(exc.error, str(exc)) from None
        self.producers[producer_id] = producer
        log.info(
            "producer %s (%s) attached to %s from %s%s",
            producer_name,
            producer.access_mode_name,
            topic.name,
            self.remote_address,
            "" if ready else " (waiting for exclusive access)",
        )
        self._write_producer_success(producer, request.request_id)
        if ready:
            self.service.replies.producer_attached(topic, producer)

    def _write_producer_success(self, producer: Producer, request_id: int) -> None:
        success = pb.CommandProducerSuccess(
            request_id=request_id,
            producer_name=producer.name,
            last_sequence_id=-1,
            producer_ready=producer.ready,
        )
        if producer.schema_version is not None:
            success.schema_version = producer.schema_version
        if producer.access_mode != SHARED and producer.topic_epoch is not None:
            success.topic_epoch = producer.topic_epoch
        self.write_command(BaseCommand(type=T.PRODUCER_SUCCESS, producer_success=success))

    def producer_promoted(self, producer: Producer) -> None:
        """A WaitForExclusive producer reached the front of the line."""
        if self.producers.get(producer.producer_id) is producer:
            self._write_producer_success(producer, producer.request_id)
            topic = self.service.topics.get(producer.topic_name)
            if topic is not None:
                self.service.replies.producer_attached(topic, producer)

    def producer_fenced(self, producer: Producer) -> None:
        """Another producer took the topic with ExclusiveWithFencing."""
        if self.producers.get(producer.producer_id) is not producer or not self.alive:
            return
        if not producer.ready:
            self.write_error(
                producer.request_id,
                pb.ProducerFenced,
                f"producer '{producer.name}' was fenced while waiting for {producer.topic_name}",
            )
            del self.producers[producer.producer_id]
            return
        self._write_close_producer(producer.producer_id)

    def _write_close_producer(self, producer_id: int) -> None:
        self.write_command(
            BaseCommand(
                type=T.CLOSE_PRODUCER,
                close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=0),
            )
        )

    def close_producer_by_broker(self, producer: Producer) -> None:
        """Detach ``producer`` and tell its client, which will try to attach again."""
        if self.producers.get(producer.producer_id) is producer:
            del self.producers[producer.producer_id]
            self._detach_producer(producer)
        if self.alive:
            self._write_close_producer(producer.producer_id)

    def handle_send(self, command: BaseCommand, frame: Frame) -> None:
        send = command.send
        producer = self.producers.get(send.producer_id)
        if producer is None:
            self._send_error(
                send,
                pb.NotAllowedError,
                f"producer id {send.producer_id} is not open on this connection",
            )
            return
        if producer.fenced:
            self._send_error(
                send,
                pb.ProducerFenced,
                f"producer '{producer.name}' was fenced by a newer exclusive producer",
            )
            return
        if not producer.ready:
            self._send_error(
                send,
                pb.NotAllowedError,
                f"producer '{producer.name}' is waiting for exclusive access",
            )
            return
        body = frame.body
        try:
            section = parse_payload(body)
            metadata = parse_metadata(section)
        except ChecksumMismatch as exc:
            self._send_error(send, pb.ChecksumError, str(exc))
            return
        except ProtocolError as exc:
            self._send_error(send, pb.NotAllowedError, f"bad message: {exc}")
            return
        # The limit is on the payload, as clients apply it; metadata rides in the
        # frame's padding (chunks of a large message are exactly max size each).
        max_size = self.service.config.max_message_size
        if len(section.payload) > max_size:
            self._send_error(
                send,
                pb.NotAllowedError,
                f"message of {len(section.payload)} bytes exceeds the maximum message size "
                f"of {max_size} bytes",
            )
            return
        topic = self.service.topics.get(producer.topic_name)
        if topic is None or topic.closed:
            self._send_error(send, pb.ServiceNotReady, f"topic {producer.topic_name} is not loaded")
            return
        if topic.terminated:
            self._send_error(send, pb.TopicTerminatedError, f"topic {topic.name} is terminated")
            return
        if topic.failure:
            self._send_error(send, pb.PersistenceError, topic.failure)
            return
        # The entry's own metadata says how many messages it holds (as Pulsar's
        # dispatcher reads it); CommandSend.num_messages is the producer's word only.
        info = info_from_metadata(metadata)
        topic.publish(producer, send.sequence_id, send.highest_sequence_id, body, info)

    def _send_error(self, send: pb.CommandSend, error: int, message: str) -> None:
        log.info("send error to %s: %s", self.remote_address, message)
        self.write_command(
            BaseCommand(
                type=T.SEND_ERROR,
                send_error=pb.CommandSendError(
                    producer_id=send.producer_id,
                    sequence_id=send.sequence_id,
                    error=error,  # type: ignore[arg-type]
                    message=message,
                ),
            )
        )

    def handle_close_producer(self, command: BaseCommand, frame: Frame) -> None:
        request = command.close_producer
        producer = self.producers.pop(request.producer_id, None)
        if producer is not None:
            self._detach_producer(producer, explicit=True)
        self.write_success(request.request_id)

    def _detach_producer(self, producer: Producer, explicit: bool = False) -> None:
        topic = self.service.topics.get(producer.topic_name)
        if topic is not None:
            topic.access.release(producer)
            self.service.on_producer_closed(topic, producer, explicit)

    # ------------------------------------------------------------ consumers

    def handle_subscribe(self, command: BaseCommand, frame: Frame) -> None:
        request = command.subscribe
        if request.consumer_id in self.consumers:
            existing = self.consumers[request.consumer_id]
            if existing.subscription.name == request.subscription and not existing.closed:
                self.write_success(request.request_id)
                return
            raise CommandError(
                pb.NotAllowedError,
                f"consumer id {request.consumer_id} is already in use on this connection",
            )
        if not request.subscription:
            raise CommandError(pb.NotAllowedError, "subscription name is empty")
        name = self._topic_name(request.topic)
        too_long = too_long_for_a_file(request.subscription)
        if too_long:
            raise CommandError(pb.NotAllowedError, f"subscription name {too_long}")
        topic = self._get_topic(name, create=request.force_topic_creation)
        if request.HasField("schema"):
            try:
                topic.schemas.add_or_get(request.schema)
            except IncompatibleSchema as exc:
                raise CommandError(pb.IncompatibleSchema, str(exc)) from None
        start = request.start_message_id if request.HasField("start_message_id") else None
        try:
            sub = topic.subscription(
                request.subscription,
                request.subType,
                request.durable,
                request.initialPosition,
                start,
            )
        except SubscriptionError as exc:
            raise CommandError(exc.error, str(exc)) from None
        ranges: list[tuple[int, int]] | None = None
        if request.HasField("keySharedMeta") and request.keySharedMeta.keySharedMode == pb.STICKY:
            ranges = [(r.start, r.end) for r in request.keySharedMeta.hashRanges]
        consumer = Consumer(
            cnx=self,
            consumer_id=request.consumer_id,
            name=request.consumer_name or f"consumer-{self.id}-{request.consumer_id}",
            subscription=sub,
            priority_level=request.priority_level,
            consumer_epoch=request.consumer_epoch if request.HasField("consumer_epoch") else None,
            hash_ranges=ranges,
        )
        try:
            sub.add_consumer(consumer)
        except SubscriptionError as exc:
            topic.maybe_drop_reader(sub)
            raise CommandError(exc.error, str(exc)) from None
        self.consumers[request.consumer_id] = consumer
        log.info(
            "consumer %s subscribed to %s/%s (%s%s) from %s",
            consumer.name,
            topic.name,
            sub.name,
            sub.type_name,
            "" if sub.durable else ", non-durable",
            self.remote_address,
        )
        self.write_success(request.request_id)
        sub.notify_consumer_active(consumer)

    def _consumer(self, consumer_id: int) -> Consumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise CommandError(
                pb.ConsumerNotFound, f"consumer id {consumer_id} is not open on this connection"
            )
        return consumer

    def handle_flow(self, command: BaseCommand, frame: Frame) -> None:
        flow = command.flow
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            log.info("FLOW for unknown consumer %d from %s", flow.consumer_id, self.remote_address)
            return
        consumer.subscription.on_flow(consumer, flow.messagePermits)

    def handle_ack(self, command: BaseCommand, frame: Frame) -> None:
        ack = command.ack
        consumer = self.consumers.get(ack.consumer_id)
        if consumer is None:
            if ack.HasField("request_id"):
                self._ack_response(
                    ack, pb.ConsumerNotFound, f"consumer {ack.consumer_id} not found"
                )
            return
        if ack.HasField("reply_to_client"):
            try:
                self.service.replies.forward(consumer, ack, frame.body)
            except ReplyRejected as exc:
                log.info("reply from %s rejected: %s", consumer.name, exc)
                if ack.HasField("request_id"):
                    self._ack_response(ack, pb.NotAllowedError, str(exc))
                else:
                    self.write_error(0, pb.NotAllowedError, str(exc))
                return
        sub = consumer.subscription
        topic = sub.topic
        if ack.ack_type == pb.CommandAck.Cumulative:
            if sub.sub_type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
                if ack.HasField("request_id"):
                    self._ack_response(
                        ack,
                        pb.NotAllowedError,
                        "cumulative ack is not allowed on shared subscriptions",
                    )
                return
            if len(ack.message_id) != 1:
                if ack.HasField("request_id"):
                    self._ack_response(
                        ack, pb.NotAllowedError, "a cumulative ack names exactly one message id"
                    )
                return
            mid = ack.message_id[0]
            entry_id = topic.entry_id_of(mid.ledgerId, mid.entryId)
            if _partial_batch(mid):
                entry_id -= 1
            if entry_id > topic.last_visible_entry_id:
                # Acking what does not exist yet would swallow it when it comes.
                if ack.HasField("request_id"):
                    self._ack_response(
                        ack, pb.NotAllowedError, f"cannot ack past the end of {topic.name}"
                    )
                return
            if entry_id >= 0:
                sub.ack_cumulative(consumer, entry_id)
        else:
            last = topic.last_visible_entry_id
            entry_ids = [
                entry_id
                for mid in ack.message_id
                if not _partial_batch(mid)
                and (entry_id := topic.entry_id_of(mid.ledgerId, mid.entryId)) <= last
            ]
            if entry_ids:
                sub.ack_individual(consumer, entry_ids)
        if ack.HasField("request_id"):
            self._ack_response(ack, None, None)

    def _ack_response(self, ack: pb.CommandAck, error: int | None, message: str | None) -> None:
        response = pb.CommandAckResponse(consumer_id=ack.consumer_id, request_id=ack.request_id)
        if error is not None:
            response.error = error  # type: ignore[assignment]
            response.message = message or ""
        self.write_command(BaseCommand(type=T.ACK_RESPONSE, ackResponse=response))

    def handle_redeliver(self, command: BaseCommand, frame: Frame) -> None:
        request = command.redeliverUnacknowledgedMessages
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            return
        sub = consumer.subscription
        if request.HasField("consumer_epoch"):
            consumer.consumer_epoch = request.consumer_epoch
        if request.message_ids and not sub.is_single_active():
            topic = sub.topic
            ids = [topic.entry_id_of(m.ledgerId, m.entryId) for m in request.message_ids]
            sub.redeliver(consumer, ids)
        else:
            sub.redeliver(consumer, None)

    def handle_unsubscribe(self, command: BaseCommand, frame: Frame) -> None:
        request = command.unsubscribe
        consumer = self._consumer(request.consumer_id)
        sub = consumer.subscription
        others = [c for c in sub.consumers if c is not consumer]
        if others and not request.force:
            raise CommandError(
                pb.NotAllowedError,
                f"subscription '{sub.name}' has {len(others)} other connected consumer(s)",
            )
        for other in others:
            other.cnx.consumer_closed_by_broker(other)
        self.consumers.pop(request.consumer_id, None)
        sub.remove_consumer(consumer)
        sub.topic.remove_subscription(sub.name)
        log.info("unsubscribed %s from %s", sub.name, sub.topic.name)
        self.write_success(request.request_id)

    def handle_close_consumer(self, command: BaseCommand, frame: Frame) -> None:
        request = command.close_consumer
        consumer = self.consumers.pop(request.consumer_id, None)
        if consumer is not None:
            self._detach_consumer(consumer)
        self.write_success(request.request_id)

    def _detach_consumer(self, consumer: Consumer) -> None:
        sub = consumer.subscription
        sub.remove_consumer(consumer)
        sub.topic.maybe_drop_reader(sub)

    def consumer_closed_by_broker(self, consumer: Consumer) -> None:
        """Tell the client its consumer is gone (it will subscribe again)."""
        if self.consumers.get(consumer.consumer_id) is consumer:
            del self.consumers[consumer.consumer_id]
            sub = consumer.subscription
            sub.remove_consumer(consumer)
        if self.alive:
            self.write_command(
                BaseCommand(
                    type=T.CLOSE_CONSUMER,
                    close_consumer=pb.CommandCloseConsumer(
                        consumer_id=consumer.consumer_id, request_id=0
                    ),
                )
            )

    def handle_seek(self, command: BaseCommand, frame: Frame) -> None:
        request = command.seek
        consumer = self._consumer(request.consumer_id)
        sub = consumer.subscription
        topic = sub.topic
        if request.HasField("message_id"):
            mid = MessageId.from_pb(request.message_id)
            if mid.is_earliest:
                target = topic.ledger.first_entry_id
            elif mid.is_latest:
                target = topic.last_visible_entry_id + 1
            else:
                # Past the end means the end, and before the first entry the first, as
                # Pulsar resets a cursor to the nearest valid position.
                target = topic.entry_id_of(mid.ledger_id, mid.entry_id)
                target = max(
                    topic.ledger.first_entry_id, min(target, topic.last_visible_entry_id + 1)
                )
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
        self.write_success(request.request_id)

    def handle_get_last_message_id(self, command: BaseCommand, frame: Frame) -> None:
        request = command.getLastMessageId
        consumer = self._consumer(request.consumer_id)
        topic = consumer.subscription.topic
        last = topic.last_message_id()
        mark_delete = consumer.subscription.cursor.mark_delete
        self.write_command(
            BaseCommand(
                type=T.GET_LAST_MESSAGE_ID_RESPONSE,
                getLastMessageIdResponse=pb.CommandGetLastMessageIdResponse(
                    request_id=request.request_id,
                    last_message_id=last.to_pb(),
                    consumer_mark_delete_position=topic.message_id(mark_delete).to_pb(),
                ),
            )
        )

    def handle_consumer_stats(self, command: BaseCommand, frame: Frame) -> None:
        request = command.consumerStats
        consumer = self.consumers.get(request.consumer_id)
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
            response.address = self.remote_address
        self.write_command(
            BaseCommand(type=T.CONSUMER_STATS_RESPONSE, consumerStatsResponse=response)
        )

    # ------------------------------------------------------------ schemas

    def handle_get_schema(self, command: BaseCommand, frame: Frame) -> None:
        request = command.getSchema
        response = pb.CommandGetSchemaResponse(request_id=request.request_id)
        name = self._topic_name(request.topic)
        topic = self.service.find_topic(name)
        version = None
        if request.HasField("schema_version") and len(request.schema_version) == 8:
            version = int.from_bytes(request.schema_version, "big", signed=True)
        entry = topic.schemas.get(version) if topic is not None else None
        if entry is None:
            response.error_code = pb.TopicNotFound
            response.error_message = f"no schema found for topic {name}"
        else:
            response.schema.CopyFrom(SchemaRegistry.to_pb(entry))
            response.schema_version = version_bytes(entry.version)
        self.write_command(BaseCommand(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=response))

    def handle_get_or_create_schema(self, command: BaseCommand, frame: Frame) -> None:
        request = command.getOrCreateSchema
        response = pb.CommandGetOrCreateSchemaResponse(request_id=request.request_id)
        topic = self._get_topic(self._topic_name(request.topic), create=True)
        try:
            version = topic.schemas.add_or_get(request.schema)
        except IncompatibleSchema as exc:
            response.error_code = pb.IncompatibleSchema
            response.error_message = str(exc)
        else:
            if version is not None:
                response.schema_version = version_bytes(version)
        self.write_command(
            BaseCommand(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=response)
        )

    # ------------------------------------------------------------ teardown

    def _release_everything(self) -> None:
        producers = list(self.producers.values())
        consumers = list(self.consumers.values())
        self.producers.clear()
        self.consumers.clear()
        for producer in producers:
            self._detach_producer(producer)
        for consumer in consumers:
            self._detach_consumer(consumer)


def _partial_batch(mid: pb.MessageIdData) -> bool:
    """An ack for some messages of a batch: the entry stays unacknowledged."""
    return bool(mid.ack_set) and any(word != 0 for word in mid.ack_set)


def _request_id(command: BaseCommand) -> int:
    """The request id of the command's own body (0 if its type has none)."""
    body = command_body(command)
    return int(getattr(body, "request_id", 0))
