"""The subscription of one topic or one partition: receiving, acks, nacks, redelivery.

A :class:`TopicConsumer` attaches to the broker that owns its topic (and
re-attaches after a reconnect), turns MESSAGE frames into :class:`Message`
objects for its parent consumer's receiver queue, asks for more with FLOW as the
application takes them (half the queue at a time, as Pulsar's clients do) and
keeps the per-topic bookkeeping: grouped and batch-aware acks, negative acks,
the ack timeout and the start position of non-durable subscriptions.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError

from magnetar.client.backoff import Clock, RedeliveryBackoff
from magnetar.client.consuming.ack_timeout import AckTimeoutTracker
from magnetar.client.consuming.acks import AckGroupingTracker, BatchAcker, Position, bits_from_words
from magnetar.client.consuming.dead_letter import (
    DeadLetterCandidates,
    DeadLetterPolicy,
    LetterProducers,
    send_dead_letters,
)
from magnetar.client.consuming.nack import NegativeAcksTracker
from magnetar.client.consuming.payload_processor import (
    PayloadProcessingError,
    PayloadProcessor,
    process_entry,
)
from magnetar.client.consuming.receiver_queue import ReceiverQueue
from magnetar.client.errors import (
    AlreadyClosed,
    MessageTooBig,
    PulsarError,
    TimeoutError,
    error_for_code,
)
from magnetar.client.message import Message, payload_to_messages, received
from magnetar.client.request_reply.requests import ReplyReceipt
from magnetar.client.schema import SchemaInfo
from magnetar.client.transport.connection import Connection
from magnetar.client.transport.handler import ConnectionHandler, HandlerClient
from magnetar.protocol.capabilities import declared_by_client
from magnetar.protocol.client_codec import TruncatedBody, encode_flow, split_entry
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol.frames import encode_command
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb

log = logging.getLogger("magnetar.client.consumer")
T = BaseCommand.Type
_Sub = pb.CommandSubscribe

_parse_metadata = pb.MessageMetadata.FromString

SUBSCRIPTION_TYPES = {
    "exclusive": _Sub.Exclusive,
    "shared": _Sub.Shared,
    "failover": _Sub.Failover,
    "key_shared": _Sub.Key_Shared,
}
INITIAL_POSITIONS = {"latest": _Sub.Latest, "earliest": _Sub.Earliest}
DEFAULT_NACK_DELAY = 60.0  # seconds, as the official clients


@dataclass(slots=True)
class ConsumerConfig:
    subscription: str
    subscription_type: int = _Sub.Exclusive
    initial_position: int = _Sub.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    priority_level: int = 0
    ack_timeout: float | None = None
    negative_ack_redelivery_delay: float | None = None  # seconds; None: 60, or the backoff
    negative_ack_redelivery_backoff: RedeliveryBackoff | None = None
    ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_enable: bool = False
    durable: bool = True
    schema: SchemaInfo | None = None
    properties: dict[str, str] = field(default_factory=dict)
    subscription_properties: dict[str, str] = field(default_factory=dict)
    read_compacted: bool = False
    ack_group_time: float = 0.1
    ack_group_max_size: int = 1000
    start_message_id_inclusive: bool = False
    replicate_subscription_state: bool = False
    batch_index_ack_enabled: bool = False  # PIP-54: ack part of a batch at the broker
    clock: Clock | None = None
    payload_processor: PayloadProcessor | None = None  # PIP-96; None: Pulsar's format

    def __post_init__(self) -> None:
        if (self.negative_ack_redelivery_delay is not None
                and self.negative_ack_redelivery_backoff is not None):
            # PIP-106: a backoff replaces the fixed delay; the Java client refuses both.
            raise ValueError(
                "give either negative_ack_redelivery_delay or negative_ack_redelivery_backoff, "
                "not both (the backoff decides every nack's delay)"
            )
        if self.ack_timeout_redelivery_backoff is not None and not self.ack_timeout:
            raise ValueError("ack_timeout_redelivery_backoff needs an ack_timeout")

    @property
    def shared(self) -> bool:
        return self.subscription_type in (_Sub.Shared, _Sub.Key_Shared)


class RawEntry:
    """A MESSAGE frame waiting in the receiver queue, decoded when it is taken."""

    __slots__ = ("_consumer", "body", "command")

    def __init__(self, consumer: TopicConsumer, command: pb.CommandMessage, body: bytes) -> None:
        self._consumer = consumer
        self.command = command
        self.body = body


class FailedEntry(RawEntry):
    """An entry its payload processor failed on, put back at the head of the queue
    (``batch_receive`` returned the messages before it first): taking it raises again."""

    __slots__ = ("error",)

    def __init__(self, consumer: TopicConsumer, error: PayloadProcessingError) -> None:
        super().__init__(consumer, pb.CommandMessage(), b"")
        self.error = error


class TopicConsumerClient(HandlerClient, Protocol):
    """What a topic consumer needs of its client: a handle's needs and consumer ids."""

    def _next_consumer_id(self) -> int: ...


class ParentConsumer(Protocol):
    """What a topic consumer needs of the consumer it belongs to
    (:class:`~magnetar.client.consuming.consumer.Consumer`): the receiver queue it
    feeds, the letter producers, the count of refused replies, and its failure report."""

    _queue: ReceiverQueue[Message | RawEntry]
    _letters: LetterProducers | None
    refused_replies: int

    def _sub_failed(self, sub: TopicConsumer, exc: PulsarError) -> None: ...


def _prior(index: int, start: int, inclusive: bool) -> bool:
    return index < start if inclusive else index <= start


class TopicConsumer(ConnectionHandler):
    """The subscription of one topic or one partition."""

    def __init__(
        self,
        client: TopicConsumerClient,
        parent: ParentConsumer,
        topic: str,
        partition: int,
        conf: ConsumerConfig,
        queue_size: int,
        start_message_id: MessageId | None = None,
    ) -> None:
        super().__init__(client, topic)
        self._parent = parent
        self.partition = partition
        self.conf = conf
        self.consumer_id = client._next_consumer_id()
        self._queue = parent._queue
        self._queue_size = max(1, queue_size)
        self._threshold = max(1, self._queue_size // 2)
        self._permits = 0  # messages handed to the application since the last FLOW
        # Entries acked unread because they cannot be decoded (checksum, metadata,
        # compression, a batch that is not what its count says): each logged once.
        self.discarded_entries = 0
        self._consumer_epoch = 0
        self._clock: Clock = conf.clock or self._loop.time
        self._acks = AckGroupingTracker(conf.ack_group_max_size)
        self._ack_timer: asyncio.TimerHandle | None = None
        self._nacks = _nack_tracker(conf, self._clock)
        self._nacked = False  # until the first nack, acks need not look in the tracker
        self._nack_timer: asyncio.TimerHandle | None = None
        self._nack_timer_at = 0.0
        self._unacked = (
            AckTimeoutTracker(conf.ack_timeout, backoff=conf.ack_timeout_redelivery_backoff,
                              clock=self._clock) if conf.ack_timeout else None
        )
        # PIP-106 dead letters: entries that go to the DLQ on their next failure.
        policy = conf.dead_letter_policy
        self._dead_letters = (
            DeadLetterCandidates(policy.max_redeliver_count) if policy is not None else None
        )
        self._dead_letter_topic = (
            policy.dead_letter_topic_for(topic, conf.subscription) if policy is not None else ""
        )
        self._letter_tasks: set[asyncio.Task[None]] = set()
        self._unacked_timer: asyncio.TimerHandle | None = None
        self._batch_ackers: dict[Position, BatchAcker] = {}
        self._processor = conf.payload_processor
        # Non-durable subscriptions (readers) say where to start; after a reconnect
        # they resume after the last message the application took.
        self._start = start_message_id
        self._start_inclusive = conf.start_message_id_inclusive
        self._last_taken: Message | None = None
        self.is_active: bool | None = None
        self.reached_end_of_topic = False
        self._subscribed = False

    @property
    def last_dequeued(self) -> MessageId | None:
        """The id of the last message the application took (None since a seek)."""
        # Kept as the message: its id is built only if this is read.
        return None if self._last_taken is None else self._last_taken.message_id

    # ------------------------------------------------------------------ attaching

    async def start(self) -> None:
        await self._connect_first()

    async def _connection_opened(self, conn: Connection) -> None:
        conf = self.conf
        # What was prefetched from the old connection comes again from the broker.
        self._queue.remove_if(self._mine)
        if self._dead_letters is not None:
            self._dead_letters.clear()
        if not conf.durable and self.last_dequeued is not None:
            self._start = self.last_dequeued
            self._start_inclusive = False
        cid = self.consumer_id
        conn.register_consumer(cid, self)
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.SUBSCRIBE)
        sub = cmd.subscribe
        sub.topic = self.topic
        sub.subscription = conf.subscription
        sub.subType = conf.subscription_type  # type: ignore[assignment]
        sub.consumer_id = cid
        sub.request_id = request_id
        if conf.consumer_name:
            sub.consumer_name = conf.consumer_name
        sub.priority_level = conf.priority_level
        sub.durable = conf.durable
        if not conf.durable and self._start is not None:
            self._start.to_pb(sub.start_message_id)
            if self._start.partition < 0 and self.partition >= 0:
                sub.start_message_id.partition = self.partition
        for key, value in conf.properties.items():
            sub.metadata.add(key=key, value=value)
        for key, value in declared_by_client(conf.payload_processor is not None,
                                             conf.properties).items():
            sub.metadata.add(key=key, value=value)
        for key, value in conf.subscription_properties.items():
            sub.subscription_properties.add(key=key, value=value)
        if conf.read_compacted:
            sub.read_compacted = True
        if conf.replicate_subscription_state:
            sub.replicate_subscription_state = True
        if conf.schema is not None:
            conf.schema.fill(sub.schema)
        sub.initialPosition = conf.initial_position  # type: ignore[assignment]
        sub.force_topic_creation = True
        if conf.subscription_type == _Sub.Key_Shared:
            sub.keySharedMeta.keySharedMode = pb.AUTO_SPLIT
        sub.consumer_epoch = self._consumer_epoch
        try:
            await conn.request(cmd, request_id)
        except BaseException as exc:
            conn.remove_consumer(cid, self)
            if isinstance(exc, TimeoutError | asyncio.CancelledError) and not conn.closed:
                self._send_close(conn)
            raise
        if self._closed:
            conn.remove_consumer(cid, self)
            self._send_close(conn)
            raise AlreadyClosed(f"consumer on {self.topic} was closed while subscribing")
        self._conn = conn
        self._subscribed = True
        self._permits = 0
        conn.write(encode_flow(cid, self._queue_size))
        self._flush_acks()
        log.debug("consumer %s subscribed to %s on %r", cid, self.topic, conn)

    def _send_close(self, conn: Connection) -> None:
        cmd = BaseCommand(type=T.CLOSE_CONSUMER)
        cmd.close_consumer.consumer_id = self.consumer_id
        cmd.close_consumer.request_id = conn.new_request_id()
        conn.send_command(cmd)

    def _mine(self, item: Message | RawEntry) -> bool:
        return item._consumer is self

    def _on_close_consumer(self) -> None:
        conn = self._detach()
        if conn is not None:
            conn.remove_consumer(self.consumer_id, self)
        self._schedule_reconnect()

    def _on_active_consumer_change(self, is_active: bool) -> None:
        self.is_active = is_active

    def _on_reached_end_of_topic(self) -> None:
        self.reached_end_of_topic = True

    def _fatal(self, exc: PulsarError) -> None:
        super()._fatal(exc)
        self._parent._sub_failed(self, exc)

    # ------------------------------------------------------------------ receiving

    def _on_message(self, cmd: pb.CommandMessage, body: bytes) -> None:
        # Decoding waits until the application takes the entry (see decode): the
        # FLOW that frees room then goes out while later entries are still queued,
        # so the broker works on the next ones while this process decodes.
        raw = RawEntry(self, cmd, body)
        letters = self._dead_letters
        if letters is not None and cmd.redelivery_count > letters.max_redeliver_count:
            # Failed too often already (e.g. its consumer crashed): to the DLQ at once,
            # as the Java client does, whether or not the application is receiving.
            self.screen_dead_letters(raw, self.decode(raw))
            return
        self._queue.put(raw)

    def decode(self, raw: RawEntry) -> list[Message]:
        """The messages of a received entry, in order (none if all are skipped)."""
        cmd = raw.command
        mid = cmd.message_id
        ledger = mid.ledgerId
        entry = mid.entryId
        if type(raw.body) is TruncatedBody:  # over the frame limit, its tail never read
            log.error("%s: entry %d:%d is over the frame limit; discarding it unread",
                      self.topic, ledger, entry)
            self._discard(ledger, entry, pb.CommandAck.BatchDeSerializeError,
                          _message_count(raw))
            return []
        try:
            metadata_bytes, payload = split_entry(raw.body)
            metadata = _parse_metadata(metadata_bytes)
        except ChecksumMismatch:
            log.error("%s: entry %d:%d fails its checksum; discarding it",
                      self.topic, ledger, entry)
            self._discard(ledger, entry, pb.CommandAck.ChecksumMismatch, _message_count(raw))
            return []
        except (ProtocolError, DecodeError) as exc:
            log.error("%s: entry %d:%d does not parse (%s); discarding it",
                      self.topic, ledger, entry, exc)
            self._discard(ledger, entry, pb.CommandAck.BatchDeSerializeError, 1)
            return []
        batched = metadata.HasField("num_messages_in_batch")
        count = metadata.num_messages_in_batch if batched else 1
        if (self._consumer_epoch and cmd.HasField("consumer_epoch")
                and cmd.consumer_epoch < self._consumer_epoch):
            self._credit(count)  # dispatched before a redeliver-all; it comes again
            return []
        position = (ledger, entry)
        if self._acks.is_duplicate(position):
            self._credit(count)
            return []
        if self._processor is not None:  # PIP-96: the processor makes the messages
            return process_entry(self, self._processor, cmd, position, batched, metadata,
                                 metadata_bytes, payload)
        try:
            items = payload_to_messages(metadata, payload)
        except ProtocolError as exc:
            log.error("%s: entry %d:%d cannot be decoded (%s); discarding it",
                      self.topic, ledger, entry, exc)
            reason = (pb.CommandAck.DecompressionError if metadata.compression
                      else pb.CommandAck.BatchDeSerializeError)
            self._discard(ledger, entry, reason, _message_count(raw))
            return []
        start = self._start
        check_start = start is not None and start.ledger_id == ledger
        if not batched:
            if check_start and start is not None and _prior(
                entry, start.entry_id, self._start_inclusive
            ):
                self._credit(1)
                return []
            return [received(items[0][1], position, -1, self.topic, cmd.redelivery_count,
                             self, None, metadata.producer_name, metadata_bytes, None)]
        n = len(items)
        acker = self._batch_ackers.get(position)
        if acker is None or acker.size != n:
            acker = BatchAcker(n)
            self._batch_ackers[position] = acker
        ack_set = cmd.ack_set
        broker_acked = 0  # messages of a partly acked batch the broker did not send
        if ack_set:
            # They count as acked here too, so acking the others acks the entry; the
            # broker charged our permits only for the others.
            unacked = bits_from_words(ack_set) & ((1 << n) - 1)
            broker_acked = n - unacked.bit_count()
            acker.keep_only(unacked)
        skip_prior = check_start and start is not None and start.entry_id == entry
        # Usually every message of the entry is wanted: then skip the per-message tests.
        filtering = skip_prior or not acker.none_acked
        inclusive = self._start_inclusive
        producer_name = metadata.producer_name
        shared = (metadata.publish_time, metadata.schema_version or None, metadata.sequence_id)
        topic = self.topic
        redelivery_count = cmd.redelivery_count
        out: list[Message] = []
        put = out.append
        skipped = 0
        for index, (single, payload) in enumerate(items):
            if filtering and (
                acker.is_acked(index) or (
                    skip_prior and start is not None
                    and _prior(index, start.batch_index, inclusive)
                )
            ):
                skipped += 1
                continue
            put(received(payload, position, index, topic, redelivery_count, self, acker,
                         producer_name, shared, single))
        if skipped:
            if skipped > broker_acked:
                self._credit(skipped - broker_acked)
            if skipped == n and acker.complete:
                self._batch_ackers.pop(position, None)
        return out

    def _discard(self, ledger: int, entry: int, reason: int, charged: int = 1) -> None:
        """Ack an entry that can never be consumed, saying why (as Pulsar's clients do),
        so that it is never delivered again, and give back the ``charged`` permits the
        broker counted for it (its batch size: an entry claiming 5,000 messages that
        are not there took 5,000, and keeping them stalled the consumer for good)."""
        self.discarded_entries += 1
        self._credit(charged)
        conn = self._conn
        if conn is None:
            return
        cmd = BaseCommand(type=T.ACK)
        ack = cmd.ack
        ack.consumer_id = self.consumer_id
        ack.ack_type = pb.CommandAck.Individual
        ack.validation_error = reason  # type: ignore[assignment]
        data = ack.message_id.add()
        data.ledgerId = ledger
        data.entryId = entry
        conn.send_command(cmd)

    def _credit(self, count: int) -> None:
        """``count`` more messages may come: ask for them once half the queue is free."""
        self._permits += count
        if self._permits >= self._threshold:
            conn = self._conn
            if conn is not None:
                permits = self._permits
                while permits > _MAX_FLOW:  # FLOW's permits are a uint32
                    conn.write_now(encode_flow(self.consumer_id, _MAX_FLOW))
                    permits -= _MAX_FLOW
                conn.write_now(encode_flow(self.consumer_id, permits))
                self._permits = 0

    def _on_dequeued(self, msg: Message) -> None:
        """The application took ``msg`` from the receiver queue."""
        self._permits += 1
        if self._permits >= self._threshold:
            conn = self._conn
            if conn is not None:
                conn.write_now(encode_flow(self.consumer_id, self._permits))
                self._permits = 0
        self._last_taken = msg
        if self._unacked is not None:
            self._unacked.add(msg.message_id, msg.redelivery_count)
            if self._unacked_timer is None:
                self._arm_unacked_timer()

    # ------------------------------------------------------------------ acks

    def acknowledge(self, message_id: MessageId, acker: BatchAcker | None = None) -> None:
        if self._unacked is not None:
            self._unacked.remove(message_id)
        self._ack((message_id.ledger_id, message_id.entry_id), message_id.batch_index, acker)

    def acknowledge_message(self, msg: Message) -> None:
        """:meth:`acknowledge` for a message received here, without building its id."""
        if self._unacked is not None:
            self._unacked.remove(msg.message_id)
        self._ack(msg._position, msg._index, msg._acker)

    def _ack(self, position: Position, batch_index: int, acker: BatchAcker | None) -> None:
        if batch_index >= 0:
            acker = acker or self._batch_ackers.get(position)
            if acker is not None:
                if not acker.ack(batch_index):
                    # The entry is acked when all of its messages are; with batch-index
                    # acks the broker learns which are left meanwhile.
                    if self.conf.batch_index_ack_enabled:
                        self._queue_ack(position, acker.ack_set())
                    return
                if self._batch_ackers.get(position) is acker:
                    del self._batch_ackers[position]
        if self._nacked:
            self._nacks.remove(position)
        if self._dead_letters is not None:
            self._dead_letters.discard(position)
        self._queue_ack(position)

    def _queue_ack(self, position: Position, ack_set: list[int] | None = None) -> None:
        """Queue the entry's ack (with ``ack_set``: of part of its batch); it leaves with
        the group (or at once, when due)."""
        full = (self._acks.add(position) if ack_set is None
                else self._acks.add_partial(position, ack_set))
        if full or self.conf.ack_group_time <= 0:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self.conf.ack_group_time, self._flush_acks)

    def acknowledge_cumulative(
        self, message_id: MessageId, acker: BatchAcker | None = None
    ) -> None:
        ledger, entry = message_id.ledger_id, message_id.entry_id
        position = (ledger, entry)
        if self._unacked is not None:
            self._unacked.remove_up_to(message_id)
        if message_id.batch_index >= 0:
            acker = acker or self._batch_ackers.get(position)
            if acker is not None and not acker.ack_cumulative(message_id.batch_index):
                # Part of the batch is still unacked: everything before this entry is
                # done, and with batch-index acks the part of it up to the message.
                if self.conf.batch_index_ack_enabled:
                    self._queue_ack(position, acker.ack_set())
                if entry <= 0:
                    return
                position = (ledger, entry - 1)
            else:
                self._batch_ackers.pop((ledger, entry), None)
        for pos in [p for p in self._batch_ackers if p <= position]:
            del self._batch_ackers[pos]
        self._acks.add_cumulative(position)
        if self.conf.ack_group_time <= 0:
            self._flush_acks()
        elif self._ack_timer is None:
            self._ack_timer = self._loop.call_later(self.conf.ack_group_time, self._flush_acks)

    async def reply(
        self,
        message_id: MessageId,
        requester: str,
        acker: BatchAcker | None,
        body: bytes,
        is_error: bool,
    ) -> ReplyReceipt:
        """PIP-371: acknowledge ``message_id`` with a reply for its producer.

        ``requester`` is the request's producer name, or ``""`` to have the broker
        route the reply by the name stored with the request.  The ACK carries a
        request id and leaves with this loop round's other writes (not grouped with
        other acknowledgements, which may wait), so a handler answering a burst of
        requests sends its replies in one write.

        Replying is pipelined: this returns once the reply is written, with a receipt
        (a future) that the broker's verdict (ACK_RESPONSE) settles later: ``None``
        when it accepted the reply, the error for its code when it refused it (the
        request then stays unacknowledged here and at the broker, so it comes
        again).  A refused reply is logged and counted
        (:attr:`Consumer.refused_replies`) whether or not anyone awaits the receipt.
        A reply larger than the broker's ``max_message_size`` raises
        :class:`MessageTooBig` at once, before anything is sent.

        The ACK names the request by its full id (with the batch index); for a
        batch that still has unacknowledged messages it carries their ``ack_set``
        so the broker keeps the entry.
        """
        conn = await self._wait_connection()
        limit = conn.max_message_size
        if len(body) > limit:
            raise MessageTooBig(
                f"reply of {len(body)} bytes exceeds the broker's limit of {limit} bytes "
                f"(not sent; {message_id} stays unacknowledged)"
            )
        position = (message_id.ledger_id, message_id.entry_id)
        index = message_id.batch_index
        if index >= 0 and acker is None:
            acker = self._batch_ackers.get(position)
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.ACK)
        ack = cmd.ack
        ack.consumer_id = self.consumer_id
        ack.ack_type = pb.CommandAck.Individual
        ack.reply_to_client = requester
        if is_error:
            ack.reply_is_error = True
        ack.request_id = request_id
        data = message_id.to_pb(ack.message_id.add())
        data.ClearField("partition")
        whole_entry = True
        if index >= 0 and acker is not None:
            rest = acker.ack_set(without=index)
            if any(rest):
                data.ack_set.extend(rest)
                whole_entry = False
        receipt: ReplyReceipt = self._loop.create_future()
        response = conn.send_request(cmd, request_id, body=body)
        response.add_done_callback(
            lambda done: self._reply_verdict(done, receipt, message_id, acker, whole_entry)
        )
        return receipt

    def _reply_verdict(
        self,
        response: asyncio.Future[BaseCommand],
        receipt: ReplyReceipt,
        message_id: MessageId,
        acker: BatchAcker | None,
        whole_entry: bool,
    ) -> None:
        """The broker's verdict on a reply: the ack's bookkeeping, or a refusal that is
        logged, counted and set on the receipt (marked retrieved: it was logged)."""
        error: BaseException | None
        if response.cancelled():
            error = AlreadyClosed(f"the reply to {message_id} was cancelled")
        else:
            error = response.exception()
            if error is None:
                answer = response.result().ackResponse
                if answer.HasField("error"):
                    error = error_for_code(answer.error, answer.message)
        if error is not None:
            self._parent.refused_replies += 1
            log.warning("reply to %s on %s not accepted: %s", message_id, self.topic, error)
            if not receipt.done():
                receipt.set_exception(error)
                receipt.exception()
            return
        # Accepted: the message is acknowledged (the rest of the bookkeeping of _ack).
        if not receipt.done():
            receipt.set_result(None)
        if self._unacked is not None:
            self._unacked.remove(message_id)
        position = (message_id.ledger_id, message_id.entry_id)
        index = message_id.batch_index
        if index >= 0 and acker is not None:
            if not acker.ack(index):
                return  # the entry is acked when all of its messages are
            if self._batch_ackers.get(position) is acker:
                del self._batch_ackers[position]
            if not whole_entry:
                # The other messages were acked while the reply was on its way; their
                # acks left the entry to this one, which named only its own message.
                self._queue_ack(position)
        if self._nacked:
            self._nacks.remove(position)

    def _flush_acks(self) -> None:
        if self._ack_timer is not None:
            self._ack_timer.cancel()
            self._ack_timer = None
        if not self._acks.pending:
            return
        conn = self._conn
        if conn is None or conn.closed:
            return  # sent after the reconnect
        individual, cumulative = self._acks.take()
        partial = self._acks.take_partial()
        frames = []
        if individual or partial:
            cmd = BaseCommand(type=T.ACK)
            ack = cmd.ack
            ack.consumer_id = self.consumer_id
            ack.ack_type = pb.CommandAck.Individual
            add = ack.message_id.add
            for ledger, entry in individual:
                add(ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF)
            for (ledger, entry), ack_set in partial:
                add(ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF,
                    ack_set=ack_set)
            frames.append(encode_command(cmd))
        if cumulative is not None:
            cmd = BaseCommand(type=T.ACK)
            ack = cmd.ack
            ack.consumer_id = self.consumer_id
            ack.ack_type = pb.CommandAck.Cumulative
            ledger, entry = cumulative
            ack.message_id.add(
                ledgerId=ledger & 0xFFFFFFFFFFFFFFFF, entryId=entry & 0xFFFFFFFFFFFFFFFF
            )
            frames.append(encode_command(cmd))
        conn.write(b"".join(frames))

    # ------------------------------------------------------------------ nacks, redelivery

    def negative_acknowledge(self, message_id: MessageId, redelivery_count: int) -> None:
        position = (message_id.ledger_id, message_id.entry_id)
        if self._unacked is not None:
            self._unacked.remove(message_id)
        self._nacked = True
        due = self._nacks.add(position, redelivery_count)
        if self._nack_timer is None or due < self._nack_timer_at:
            self._arm_nack_timer(due)

    def _arm_nack_timer(self, due: float) -> None:
        if self._nack_timer is not None:
            self._nack_timer.cancel()
        self._nack_timer_at = due
        delay = max(0.0, due - self._clock())
        self._nack_timer = self._loop.call_later(delay, self._nack_timer_fired)

    def _nack_timer_fired(self) -> None:
        self._nack_timer = None
        due = self._nacks.pop_due()
        if due:
            self._redeliver(due)
        nxt = self._nacks.next_deadline()
        if nxt is not None:
            self._arm_nack_timer(nxt)

    def _arm_unacked_timer(self) -> None:
        assert self._unacked is not None
        deadline = self._unacked.next_deadline()
        if deadline is None:
            self._unacked_timer = None
            return
        delay = max(0.0, deadline - self._clock())
        self._unacked_timer = self._loop.call_later(delay, self._unacked_timer_fired)

    def _unacked_timer_fired(self) -> None:
        assert self._unacked is not None
        expired = self._unacked.pop_expired()
        if expired:
            log.info("%s: %d entries not acked within %ss; asking for redelivery",
                     self.topic, len(expired), self.conf.ack_timeout)
            self._redeliver(expired)
        self._arm_unacked_timer()

    def _redeliver(self, positions: list[Position]) -> None:
        if self._dead_letters is not None and self.conf.shared:
            # Exclusive and failover subscriptions redeliver everything unacked, the
            # entry too: it comes back over the limit and is diverted on arrival.
            positions = self._divert_to_dead_letters(positions)
        self._request_redelivery(positions)

    def _request_redelivery(self, positions: list[Position]) -> None:
        if not positions:
            return
        if not self.conf.shared:
            # Exclusive and failover subscriptions keep order: the broker sends
            # everything unacked again; the ids say which entries are redelivered
            # because the application nacked them (or let them time out).
            self.redeliver_all(positions)
            return
        conn = self._conn
        if conn is None:
            return  # a new connection gets every unacked message anyway
        for start in range(0, len(positions), 1000):
            cmd = BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
            red = cmd.redeliverUnacknowledgedMessages
            red.consumer_id = self.consumer_id
            for ledger, entry in positions[start:start + 1000]:
                red.message_ids.add(ledgerId=ledger, entryId=entry)
            conn.send_command(cmd)

    # ------------------------------------------------------------------ dead letters

    def screen_dead_letters(self, raw: RawEntry, messages: list[Message]) -> list[Message]:
        """The messages of a decoded entry the application gets: none if the entry came
        more often than the dead-letter policy allows (it goes to the DLQ instead)."""
        assert self._dead_letters is not None
        mid = raw.command.message_id
        position = (mid.ledgerId, mid.entryId)
        if self._dead_letters.screen(position, raw.command.redelivery_count, messages):
            self._credit(len(messages))  # never handed out: their permits come back
            self._divert_to_dead_letters([position])
            return []
        if not self.conf.shared:
            self._dead_letters.discard(position)  # redelivered whole, see _redeliver
        return messages

    def _divert_to_dead_letters(self, positions: list[Position]) -> list[Position]:
        """Send the entries that reached the policy's limit to the DLQ (in the
        background); returns the others."""
        assert self._dead_letters is not None
        diverted, rest = self._dead_letters.divert(positions)
        if diverted:
            task = self._loop.create_task(self._send_dead_letters(diverted))
            self._letter_tasks.add(task)
            task.add_done_callback(self._letter_tasks.discard)
        return rest

    async def _send_dead_letters(self, entries: dict[Position, list[Message]]) -> None:
        letters = self._parent._letters
        assert letters is not None
        done = await send_dead_letters(letters, self._dead_letter_topic, entries)
        for position in done:
            self._batch_ackers.pop(position, None)
            if self._unacked is not None:
                self._unacked.remove_entry(position)
            if self._nacked:
                self._nacks.remove(position)
            self._queue_ack(position)
        sent = set(done)
        failed = [p for p in entries if p not in sent]
        if failed and not self._closed:
            self._request_redelivery(failed)  # they come again and are tried again

    def redeliver_all(self, counted: list[Position] | None = None) -> None:
        """Ask the broker to send every unacked message again (a new consumer epoch).

        ``counted``: the entries redelivered because the application nacked them (or
        their ack timed out); with the other nacked entries, they go in the request,
        and only they get a higher redelivery count (PIP-106: what sat unseen in the
        prefetch queue keeps its count).  Without it (the application asked for
        everything again) the request names none, as Pulsar's clients send it.

        What is prefetched here is dropped (the broker sends it again, and its
        permits are given back), acks still grouped are sent first so the broker
        does not send those messages again, and the nack and ack-timeout trackers
        are emptied: every unacked message comes again.
        """
        self._consumer_epoch += 1
        self._flush_acks()
        removed = self._drop_prefetched()
        if self._unacked is not None:
            self._unacked.clear()
        ids: list[Position] = []
        if counted is not None:
            ids = list(dict.fromkeys([*counted, *self._nacks.positions()]))
        self._nacks.clear()
        conn = self._conn
        if conn is None:
            return
        cmd = BaseCommand(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
        red = cmd.redeliverUnacknowledgedMessages
        red.consumer_id = self.consumer_id
        red.consumer_epoch = self._consumer_epoch
        for ledger, entry in ids:
            red.message_ids.add(ledgerId=ledger, entryId=entry)
        conn.send_command(cmd)
        if removed:
            self._credit(removed)

    def _drop_prefetched(self) -> int:
        """Drop what this consumer has in the receiver queue; returns how many
        messages that is (the broker counted permits by message, a batch as many)."""
        dropped: list[Message | RawEntry] = []

        def mine(item: Message | RawEntry) -> bool:
            if item._consumer is self:
                dropped.append(item)
                return True
            return False

        self._queue.remove_if(mine)
        return sum(_message_count(item) if isinstance(item, RawEntry) else 1
                   for item in dropped)

    # ------------------------------------------------------------------ requests

    async def seek(self, target: MessageId | int) -> None:
        conn = await self._wait_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.SEEK)
        cmd.seek.consumer_id = self.consumer_id
        cmd.seek.request_id = request_id
        if isinstance(target, MessageId):
            target.to_pb(cmd.seek.message_id)
        else:
            cmd.seek.message_publish_time = int(target)
        self._flush_acks()
        await conn.request(cmd, request_id)
        # The cursor moved: forget what was prefetched and everything tracked.
        removed = self._drop_prefetched()
        self._acks.reset_cumulative()
        self._batch_ackers.clear()
        self._nacks.clear()
        if self._unacked is not None:
            self._unacked.clear()
        if self._dead_letters is not None:
            self._dead_letters.clear()
        self._last_taken = None
        if not self.conf.durable:
            self._start = target if isinstance(target, MessageId) else None
            self._start_inclusive = self.conf.start_message_id_inclusive
        if removed:
            self._credit(removed)

    async def get_last_message_id(self) -> tuple[MessageId, MessageId | None]:
        """The topic's last message id and this subscription's mark-delete position."""
        conn = await self._wait_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.GET_LAST_MESSAGE_ID)
        cmd.getLastMessageId.consumer_id = self.consumer_id
        cmd.getLastMessageId.request_id = request_id
        response = (await conn.request(cmd, request_id)).getLastMessageIdResponse
        last = MessageId.from_pb(response.last_message_id, self.partition)
        mark_delete = (
            MessageId.from_pb(response.consumer_mark_delete_position, self.partition)
            if response.HasField("consumer_mark_delete_position")
            else None
        )
        return last, mark_delete

    async def has_message_available(self) -> bool:
        if any(m._consumer is self for m in list(self._queue._items)):
            return True
        last, mark_delete = await self.get_last_message_id()
        if last.entry_id < 0:
            return False
        last_key = (last.ledger_id, last.entry_id, last.batch_index)
        if self.last_dequeued is not None:
            d = self.last_dequeued
            return last_key > (d.ledger_id, d.entry_id, d.batch_index)
        start = self._start
        if start is None or start.is_latest:
            if mark_delete is not None:
                return (mark_delete.ledger_id, mark_delete.entry_id) < (
                    last.ledger_id, last.entry_id)
            return False
        if start.is_earliest:
            return True
        start_key = (start.ledger_id, start.entry_id, start.batch_index)
        return last_key >= start_key if self._start_inclusive else last_key > start_key

    async def unsubscribe(self) -> None:
        conn = await self._wait_connection()
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.UNSUBSCRIBE)
        cmd.unsubscribe.consumer_id = self.consumer_id
        cmd.unsubscribe.request_id = request_id
        await conn.request(cmd, request_id)
        self._shutdown()
        conn.remove_consumer(self.consumer_id, self)

    async def close(self) -> None:
        if self._closed:
            return
        if self._letter_tasks:
            # Dead letters on their way: let them arrive and their acks be sent.
            await asyncio.wait(set(self._letter_tasks), timeout=self._client.operation_timeout)
        self._flush_acks()
        conn = self._conn
        self._shutdown()
        if conn is not None and not conn.closed:
            request_id = conn.new_request_id()
            cmd = BaseCommand(type=T.CLOSE_CONSUMER)
            cmd.close_consumer.consumer_id = self.consumer_id
            cmd.close_consumer.request_id = request_id
            await conn.request_quietly(cmd, request_id, f"closing consumer on {self.topic}")
            conn.remove_consumer(self.consumer_id, self)

    def _shutdown(self) -> None:
        self._closed = True
        self._stop_reconnecting()
        self._detach()
        for timer in (self._ack_timer, self._nack_timer, self._unacked_timer):
            if timer is not None:
                timer.cancel()
        self._ack_timer = self._nack_timer = self._unacked_timer = None
        for task in list(self._letter_tasks):
            task.cancel()
        self._queue.remove_if(self._mine)

    def flush_to_socket(self) -> None:
        self._flush_acks()


def _message_count(raw: RawEntry) -> int:
    """How many messages of a received entry the broker charged to our permits (its
    batch size, or what its ``ack_set`` leaves; 1 if unreadable)."""
    try:
        metadata = _parse_metadata(split_entry(raw.body, verify_checksum=False)[0])
    except (ProtocolError, DecodeError):
        return 1
    n = metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1
    ack_set = raw.command.ack_set
    if ack_set:  # (a mask of the words' width: n may be a lie of 2**31)
        return (bits_from_words(ack_set) & ((1 << min(n, 64 * len(ack_set))) - 1)).bit_count()
    return n


_MAX_FLOW = (1 << 32) - 1


def _nack_tracker(conf: ConsumerConfig, clock: Clock) -> NegativeAcksTracker:
    delay = conf.negative_ack_redelivery_delay
    return NegativeAcksTracker(
        DEFAULT_NACK_DELAY if delay is None else delay,
        conf.negative_ack_redelivery_backoff,
        clock=clock,
    )
