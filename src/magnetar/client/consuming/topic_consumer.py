"""The subscription of one topic or one partition: attaching, receiving, requests.

A :class:`TopicConsumer` attaches to the broker that owns its topic (and
re-attaches after a reconnect), turns MESSAGE frames into :class:`Message`
objects for its parent consumer's receiver queue, asks for more with FLOW as the
application takes them (half the queue at a time, as Pulsar's clients do) and
keeps the start position of non-durable subscriptions. Its other jobs live in
their own modules over :class:`~.topic_state.TopicConsumerBase`: grouped and
batch-aware acks (:mod:`.acking`), negative acks, the ack timeout, redelivery and
dead letters (:mod:`.redelivery`), PIP-371 replies (:mod:`.replying`).
"""

from __future__ import annotations

import asyncio
import logging

from google.protobuf.message import DecodeError

from magnetar.client.backoff import Clock
from magnetar.client.consuming.ack_timeout import AckTimeoutTracker
from magnetar.client.consuming.acking import AcksMixin
from magnetar.client.consuming.acks import AckGroupingTracker, BatchAcker, Position, bits_from_words
from magnetar.client.consuming.config import ConsumerConfig, nack_tracker
from magnetar.client.consuming.dead_letter import (
    DeadLetterCandidates,
)
from magnetar.client.consuming.entries import RawEntry, message_count
from magnetar.client.consuming.payload_processor import (
    process_entry,
)
from magnetar.client.consuming.redelivery import RedeliveryMixin
from magnetar.client.consuming.replying import RepliesMixin
from magnetar.client.consuming.topic_state import ParentConsumer, TopicConsumerClient
from magnetar.client.errors import (
    AlreadyClosed,
    PulsarError,
    TimeoutError,
)
from magnetar.client.message import Message, payload_to_messages, received
from magnetar.client.transport.connection import Connection
from magnetar.protocol.capabilities import declared_by_client
from magnetar.protocol.client_codec import TruncatedBody, encode_flow, split_entry
from magnetar.protocol.errors import ChecksumMismatch, ProtocolError
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb

log = logging.getLogger("magnetar.client.consumer")
T = BaseCommand.Type
_Sub = pb.CommandSubscribe

_parse_metadata = pb.MessageMetadata.FromString



def _prior(index: int, start: int, inclusive: bool) -> bool:
    return index < start if inclusive else index <= start


class TopicConsumer(AcksMixin, RedeliveryMixin, RepliesMixin):
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
        self._nacks = nack_tracker(conf, self._clock)
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
                          message_count(raw))
            return []
        try:
            metadata_bytes, payload = split_entry(raw.body)
            metadata = _parse_metadata(metadata_bytes)
        except ChecksumMismatch:
            log.error("%s: entry %d:%d fails its checksum; discarding it",
                      self.topic, ledger, entry)
            self._discard(ledger, entry, pb.CommandAck.ChecksumMismatch, message_count(raw))
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
            self._discard(ledger, entry, reason, message_count(raw))
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
        skip_prior = check_start and start is not None and start.entry_id == entry
        return self._batch_messages(cmd, metadata, items, position, skip_prior)

    def _batch_messages(
        self,
        cmd: pb.CommandMessage,
        metadata: pb.MessageMetadata,
        items: list[tuple[pb.SingleMessageMetadata | None, bytes]],
        position: Position,
        skip_prior: bool,
    ) -> list[Message]:
        """The messages of a batch the application gets: those not acknowledged yet
        (here, or at the broker by the entry's ``ack_set``) and, with ``skip_prior``
        (a reader starting inside this batch), none before its start; the permits of
        those skipped go back."""
        start = self._start
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


_MAX_FLOW = (1 << 32) - 1
