"""A topic (Pulsar's PersistentTopic): its ledger, producers, subscriptions and schemas.

Publishing appends the entry exactly as received; the send receipt is written
when the ledger reports the entry durable, and only then do dispatchers see it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from magnetar.broker.features.dedup import MessageDeduplication
from magnetar.broker.features.exclusive import ProducerAccess
from magnetar.broker.features.schemas import SchemaRegistry
from magnetar.broker.topics.delayed import DEFAULT_CAPACITY as DEFAULT_DELAYED_CAPACITY
from magnetar.broker.topics.entry_info import EntryInfo, info_from_entry
from magnetar.broker.topics.nondurable_cursor import NonDurableCursor
from magnetar.broker.topics.subscription import Cursor, Subscription
from magnetar.protocol.fastpath import MessageIdEncoder, encode_send_receipt
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import TopicName
from magnetar.storage.cursor import DEFAULT_MAX_REDELIVERY_COUNTS
from magnetar.storage.ledger_ids import LedgerIds, begin_ledger

if TYPE_CHECKING:
    from magnetar.broker.policies.redelivery_backoff import RedeliveryBackoffPolicy
    from magnetar.broker.topics.producer import Producer
    from magnetar.storage import ManagedLedger, TopicMetadata

log = logging.getLogger("magnetar.broker.topic")

# Without a broker to share with (a topic built on its own, as in tests).
_INFO_CACHE_MAX = 50_000
# An EntryInfo from the plain tuple the cache keeps, without copying it again.
_as_info = tuple.__new__


def _no_backoff(topic: Topic) -> RedeliveryBackoffPolicy | None:
    return None


class TopicUnavailable(Exception):
    """The topic cannot be served right now: it is being unloaded (``storage_error``
    False: try again at once), or its files could not be loaded (True: the message
    names the cause, such as a full disk or a missing permission)."""

    def __init__(
        self, message: str, storage_error: bool = False, os_errno: int | None = None
    ) -> None:
        super().__init__(message)
        self.storage_error = storage_error
        self.os_errno = os_errno  # the cause's errno, when the system refused


@dataclass
class TopicStats:
    messages_in: int = 0
    bytes_in: int = 0
    messages_out: int = 0
    bytes_out: int = 0  # entry bytes dispatched, as Pulsar's bytesOutCounter


class Topic:
    def __init__(
        self,
        name: TopicName,
        ledger: ManagedLedger,
        metadata: TopicMetadata,
        loop: asyncio.AbstractEventLoop,
        clock_ms: Callable[[], int],
        max_unacked: int,
        dispatch_before_sync: bool = True,
        info_cache_limit: Callable[[], int] = lambda: _INFO_CACHE_MAX,
        ledgers: LedgerIds | None = None,  # begun already (by a loader thread)
        max_delayed_tracked: int = DEFAULT_DELAYED_CAPACITY,
        max_redelivery_counts: int = DEFAULT_MAX_REDELIVERY_COUNTS,
    ) -> None:
        self.topic_name = name
        self.name = str(name)
        self.partition_index = name.partition_index
        self.ledger = ledger
        self.metadata = metadata
        self.loop = loop
        self.clock_ms = clock_ms
        self.max_unacked = max_unacked
        # Each open writes into a new ledger id, so that positions written again
        # after a machine crash lost unsynced entries never repeat a message id.
        if ledgers is None:
            ledgers = begin_ledger(
                metadata, ledger.next_entry_id, ledger.first_entry_id, clock_ms() // 1000
            )
        self.ledgers = ledgers
        self.ledger_id = ledgers.current
        self._current_first = self.ledgers.current_first
        self._mid_with_partition = MessageIdEncoder(self.ledger_id, self.partition_index)
        self._mid_for_receipts = MessageIdEncoder(self.ledger_id, -1)
        self._older_encoders: dict[int, MessageIdEncoder] = {}
        self.producers: dict[str, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.access = ProducerAccess(self)
        self.schemas = SchemaRegistry(metadata, name)
        # Off until the service applies the policy in force (broker/policies/dedup_policy.py).
        self.dedup = MessageDeduplication(self.name, ledger, loop, clock_ms)
        self.stats = TopicStats()
        self._info: dict[int, tuple[Any, ...]] = {}  # EntryInfo fields, by entry id
        self.terminated = metadata.properties.get("terminated") == "true"
        self.msg_chunk_published = False  # Pulsar's stats flag, since it was loaded
        self.closed = False
        self.failure: str | None = None
        # Set by the service: called once when the storage fails under this topic.
        self.on_storage_failure: Callable[[Topic], None] | None = None
        ledger.on_failure = self._storage_failed
        self.dispatch_before_sync = dispatch_before_sync
        # This topic's share of the broker-wide bound on cached EntryInfo.
        self._info_limit = info_cache_limit
        self._info_cap = info_cache_limit()  # refreshed on each trim, not per publish
        self.max_delayed_tracked = max_delayed_tracked  # per subscription
        self.max_redelivery_counts = max_redelivery_counts  # per subscription
        # Set by the service: the redelivery backoff in force here (None: off).
        self.redelivery_backoff_of: Callable[[Topic], RedeliveryBackoffPolicy | None] = (
            _no_backoff
        )
        if dispatch_before_sync:
            ledger.on_written = self._written
        # The service opened the persisted cursors with the ledger, off the loop.
        # Consumers may see entries before their fsync (dispatch_before_sync).
        ledger.rewind_cursors_past_end()
        for cursor_name, cursor in ledger.cursors.items():
            self.subscriptions[cursor_name] = Subscription(
                self,
                cursor_name,
                pb.CommandSubscribe.Exclusive,
                cursor,
                True,
                max_unacked,
                clock_ms,
            )

    # ------------------------------------------------------------ visibility

    @property
    def last_visible_entry_id(self) -> int:
        """The last entry consumers may be given (written, or durable; see config)."""
        ledger = self.ledger
        if self.dispatch_before_sync:
            return ledger.last_written_entry_id
        return ledger.last_confirmed_entry_id

    def _written(self, entry_id: int) -> None:
        """Dispatch at once and put the frames on the wire before the ledger's fsync,
        so that consumers work while the disk syncs."""
        for subscription in self.subscriptions.values():
            subscription.dispatch_now()

    # ------------------------------------------------------------ ids

    def message_id_bytes(self, entry_id: int, batch_index: int = -1) -> bytes:
        """Encoded id for MESSAGE frames; consumers read the partition from it."""
        if entry_id >= self._current_first:
            return self._mid_with_partition(entry_id, batch_index)
        ledger_id = self.ledgers.ledger_of(entry_id)
        encoder = self._older_encoders.get(ledger_id)
        if encoder is None:
            encoder = MessageIdEncoder(ledger_id, self.partition_index)
            self._older_encoders[ledger_id] = encoder
        return encoder(entry_id, batch_index)

    def message_id(self, entry_id: int, batch_index: int = -1) -> MessageId:
        ledger_id = self.ledgers.ledger_of(entry_id) if entry_id >= 0 else self.ledger_id
        return MessageId(ledger_id, entry_id, batch_index, self.partition_index)

    def entry_id_of(self, ledger_id: int, entry_id: int) -> int:
        """Map a client's (ledger, entry) to a position, clamped to that ledger's range
        (see LedgerIds.position): for seeks, start ids and cumulative acks."""
        return self.ledgers.position(ledger_id, entry_id, self.ledger.next_entry_id)

    def exact_entry_id(self, ledger_id: int, entry_id: int) -> int | None:
        """The position a client's (ledger, entry) names, or None if no stored entry
        carries that id (an entry lost in a crash, or one of a later ledger)."""
        return self.ledgers.exact(ledger_id, entry_id)

    def entry_info(self, entry_id: int) -> EntryInfo:
        fields = self._info.get(entry_id)
        if fields is None:
            info = info_from_entry(self.ledger.read(entry_id))
            self._remember(entry_id, info)
            return info
        return _as_info(EntryInfo, fields)

    def info_and_entry(self, entry_id: int) -> tuple[EntryInfo, bytes | None]:
        """:meth:`entry_info`, and the entry if it was read for it (None when its info
        was at hand), so that a dispatch that sends it does not read it twice."""
        fields = self._info.get(entry_id)
        if fields is None:
            entry = self.ledger.read(entry_id)
            info = info_from_entry(entry)
            self._remember(entry_id, info)
            return info, entry
        return _as_info(EntryInfo, fields), None

    def cached_entry_info(self, entry_id: int) -> EntryInfo | None:
        """What :meth:`entry_info` gives, if it is at hand without reading the ledger."""
        fields = self._info.get(entry_id)
        return None if fields is None else _as_info(EntryInfo, fields)

    def _remember(self, entry_id: int, info: EntryInfo) -> None:
        cache = self._info
        cache[entry_id] = tuple(info)  # plain: out of the collector's sight (entry_info.py)
        if len(cache) > self._info_cap:
            self.trim_info_cache()

    def trim_info_cache(self) -> None:
        """Keep three quarters of this topic's share, dropping the lowest entry ids.

        By id, not by insertion: a backlog's dispatch re-parses the old entries the
        cache had dropped, and each lands at the end of the dict; dropping the first
        inserted then threw out the entries not yet dispatched, so every entry of a
        backlog over the share missed once it started."""
        cache = self._info
        limit = self._info_cap = self._info_limit()
        if len(cache) > limit:
            for old in sorted(cache)[: len(cache) - limit * 3 // 4]:  # runs: near linear
                del cache[old]

    # ------------------------------------------------------------ publish

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        entry: bytes,
        info: EntryInfo,
        on_receipt: Callable[[], None] | None = None,
        dedup_highest: int | None = None,
    ) -> int:
        """Append ``entry`` and return its position; once it is durable, write the send
        receipt and call ``on_receipt`` (the connection counts the publish pending
        until then). ``dedup_highest``: deduplication let it through, and records it
        as persisted."""
        cnx = producer.cnx
        producer_id = producer.producer_id
        receipt_id = self._mid_for_receipts
        subscriptions = self.subscriptions
        dispatch_now = self.dispatch_before_sync

        def on_durable(entry_id: int) -> None:
            cnx.write(
                encode_send_receipt(
                    producer_id,
                    sequence_id,
                    receipt_id(entry_id),
                    highest_sequence_id,
                )
            )
            if on_receipt is not None:
                on_receipt()
            if dedup_highest is not None:
                dedup.record(producer.name, dedup_highest, entry_id)
            if not dispatch_now:
                for subscription in subscriptions.values():
                    subscription.schedule_dispatch()

        dedup = self.dedup
        entry_id = self.ledger.append(entry, on_durable)
        self._remember(entry_id, info)
        stats = self.stats
        stats.messages_in += info.num_messages
        stats.bytes_in += len(entry)
        producer.messages_in += info.num_messages
        producer.bytes_in += len(entry)
        return entry_id

    def append_entry(
        self, entry: bytes, info: EntryInfo, on_durable: Callable[[int], None]
    ) -> int:
        """Append an entry no producer sent (PIP-96 ingest, see broker/features/raw_entries.py):
        stored, counted and dispatched as :meth:`publish` does; ``on_durable(entry_id)``
        runs once it is durable under the sync policy. Returns its entry id."""
        subscriptions = self.subscriptions
        dispatch_now = self.dispatch_before_sync

        def durable(entry_id: int) -> None:
            on_durable(entry_id)
            if not dispatch_now:
                for subscription in subscriptions.values():
                    subscription.schedule_dispatch()

        entry_id = self.ledger.append(entry, durable)
        self._remember(entry_id, info)
        self.stats.messages_in += info.num_messages
        self.stats.bytes_in += len(entry)
        return entry_id

    # ------------------------------------------------------------ subscriptions

    def subscription(
        self,
        name: str,
        sub_type: int,
        durable: bool,
        initial_position: int,
        start_message_id: pb.MessageIdData | None,
        read_compacted: bool = False,
    ) -> Subscription:
        existing = self.subscriptions.get(name)
        if existing is not None:
            existing.check_type(sub_type)
            existing.change_type(sub_type)
            return existing
        ledger = self.ledger
        if start_message_id is not None and not durable:
            mark_delete = self._start_mark_delete(start_message_id, read_compacted)
        elif initial_position == pb.CommandSubscribe.Earliest:
            mark_delete = self.earliest_entry_id(read_compacted) - 1
        else:
            mark_delete = self.last_visible_entry_id
        cursor: Cursor
        if durable:
            cursor = ledger.open_cursor(name, mark_delete)
        else:
            cursor = NonDurableCursor(mark_delete)
        sub = Subscription(self, name, sub_type, cursor, durable, self.max_unacked, self.clock_ms)
        self.subscriptions[name] = sub
        log.info("created subscription %s on %s (%s)", name, self.name, sub.type_name)
        return sub

    def earliest_entry_id(self, read_compacted: bool = False) -> int:
        """The first entry a subscription can read; for one that reads compacted, the
        compacted ledger may hold entries retention removed from the log."""
        first = self.ledger.first_entry_id
        compacted = self.ledger.compacted
        if read_compacted and compacted is not None and compacted.first_position is not None:
            return min(first, compacted.first_position)
        return first

    def _start_mark_delete(self, start: pb.MessageIdData, read_compacted: bool = False) -> int:
        mid = MessageId.from_pb(start)
        earliest = self.earliest_entry_id(read_compacted)
        if mid.is_earliest or mid.ledger_id < 0:
            return earliest - 1
        if mid.is_latest:
            return self.last_visible_entry_id
        # Start at the entry itself, as Pulsar does: clients drop what lies before
        # their start id (the entry for an exclusive start, earlier batch indexes).
        entry_id = self.entry_id_of(mid.ledger_id, mid.entry_id) - 1
        return max(min(entry_id, self.last_visible_entry_id), earliest - 1)

    def remove_subscription(self, name: str) -> None:
        sub = self.subscriptions.pop(name, None)
        if sub is None:
            return
        sub.close()
        if sub.durable:
            self.ledger.delete_cursor(name)

    def maybe_drop_reader(self, sub: Subscription) -> None:
        if not sub.durable and not sub.consumers:
            self.subscriptions.pop(sub.name, None)
            sub.close()

    # ------------------------------------------------------------ queries

    def last_message_id(self) -> MessageId:
        last = self.last_visible_entry_id
        if last < self.ledger.first_entry_id:
            return MessageId(self.ledger_id if last >= 0 else -1, last, -1, self.partition_index)
        info = self.entry_info(last)
        batch_index = info.num_messages - 1 if info.num_messages > 1 else -1
        return self.message_id(last, batch_index)

    def find_by_publish_time(self, publish_time_ms: int) -> int:
        """First entry whose publish time is >= the given time (binary search)."""
        lo = self.ledger.first_entry_id
        hi = self.last_visible_entry_id + 1
        while lo < hi:
            mid = (lo + hi) // 2
            if self.entry_info(mid).publish_time < publish_time_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    # ------------------------------------------------------------ lifecycle

    def _storage_failed(self, error: BaseException) -> None:
        """The disk refused a write: nothing more is accepted here; the service unloads
        the topic, and its clients' reconnects load it afresh once the cause is gone
        (their unreceipted messages are sent again)."""
        cause = error.strerror if isinstance(error, OSError) and error.strerror else error
        self.failure = f"storage failure on {self.name}: {cause}"
        log.error("%s; unloading the topic", self.failure)
        if self.on_storage_failure is not None:
            self.on_storage_failure(self)
        else:
            for producer in list(self.producers.values()):
                producer.cnx.close_producer_by_broker(producer)

    def has_clients(self) -> bool:
        """Producers or consumers are attached."""
        return bool(self.producers) or any(s.consumers for s in self.subscriptions.values())

    def terminate(self) -> MessageId:
        self.terminated = True
        self.metadata.properties["terminated"] = "true"
        self.metadata.save()
        for sub in self.subscriptions.values():
            sub.schedule_dispatch()
        return self.last_message_id()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for sub in self.subscriptions.values():
            sub.close()
        await self.dedup.close()
        await self.ledger.close()
        # Nothing runs on a closed topic any more: drop the references that close a
        # cycle through it, so that refcounting frees an unloaded topic at once. As
        # cyclic garbage (60-80 objects each) unloaded topics made up most of what a
        # full collection visited while 10,000 topics were touched.
        self.ledger.on_written = None
        self.ledger.on_failure = None
        self.subscriptions = {}

    def stats_dict(self) -> dict[str, object]:
        return {
            "msgInCounter": self.stats.messages_in,
            "bytesInCounter": self.stats.bytes_in,
            "msgOutCounter": self.stats.messages_out,
            "storageSize": self.ledger.size_bytes(),
            "entries": self.ledger.entry_count(),
            "topicEpoch": self.metadata.topic_epoch,
            "exclusiveProducer": self.access.holder_name(),
            "accessMode": self.access.mode_name(),
            "deduplicationStatus": self.dedup.status,
            "publishers": [
                {
                    "producerName": p.name,
                    "producerId": p.producer_id,
                    "accessMode": p.access_mode_name,
                    "msgInCounter": p.messages_in,
                    "address": p.cnx.remote_address,
                }
                for p in self.producers.values()
            ],
            "subscriptions": {
                name: {
                    "type": sub.type_name,
                    "durable": sub.durable,
                    "msgBacklog": sub.backlog(),
                    "unackedMessages": len(sub.pending),
                    "markDeletePosition": str(sub.cursor.mark_delete),
                    "consumers": [
                        {
                            "consumerName": c.name,
                            "availablePermits": c.permits,
                            "unackedMessages": len(c.pending),
                            "msgOutCounter": c.messages_out,
                            "address": c.cnx.remote_address,
                            "metadata": dict(c.metadata),
                        }
                        for c in sub.consumers
                    ],
                }
                for name, sub in self.subscriptions.items()
            },
        }
