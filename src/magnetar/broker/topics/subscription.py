"""A subscription: its cursor, its consumers, and the dispatch loop that feeds them.

Entries flow from the topic's ledger to consumers in entry order. An entry that
was sent and not acknowledged is *pending* on one consumer; an entry that must
go out again (negative ack, consumer gone, redeliver request) waits in the
*replay* set, which is always served before new entries.

With a redelivery backoff in force (see redelivery_backoff.py), an entry a consumer
asked to have redelivered waits in the delayed-delivery tracker until its backoff has
passed, instead of going to the replay set at once; other entries go out meanwhile. A
consumer that backs off itself (magnetar's client) is not held so.
Redelivery counts live in the durable cursor's ``RedeliveryCounts`` (persisted with
the position, bounded), or in one of the subscription's own for a reader; so do the
messages still unacked of partly acked batches (``batch_acks``, see batch_acks.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from magnetar.broker.topics.delayed import DelayedDeliveryTracker
from magnetar.broker.topics.dispatch_round import dispatch_round
from magnetar.broker.topics.dispatchers import (
    SUB_TYPE_NAMES,
    Dispatcher,
    KeySharedDispatcher,
    SingleActiveDispatcher,
    SubType,
    make_dispatcher,
)
from magnetar.broker.topics.failover import FailoverHandover
from magnetar.protocol.pb import pb
from magnetar.storage.batch_ack_sets import BatchAckSets
from magnetar.storage.cursor import RedeliveryCounts

if TYPE_CHECKING:
    from magnetar.broker.policies.redelivery_backoff import RedeliveryBackoffPolicy
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger("magnetar.broker.subscription")

DISPATCH_RETRY_DELAY = 0.2  # seconds after a dispatch round that failed


class Cursor(Protocol):
    mark_delete: int

    def ack(self, entry_ids: Iterable[int]) -> None: ...
    def ack_cumulative(self, entry_id: int) -> None: ...
    def is_acked(self, entry_id: int) -> bool: ...
    def reset(self, mark_delete: int) -> None: ...
    def flush(self) -> None: ...


class SubscriptionError(Exception):
    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class Subscription:
    def __init__(
        self,
        topic: Topic,
        name: str,
        sub_type: int,
        cursor: Cursor,
        durable: bool,
        max_unacked: int,
        clock_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.name = name
        self.sub_type = sub_type
        self.cursor = cursor
        self.durable = durable
        self.clock_ms = clock_ms
        self.dispatcher: Dispatcher[Consumer] = make_dispatcher(
            sub_type, max_unacked, topic.partition_index
        )
        self.read_position = cursor.mark_delete + 1
        self.replay: set[int] = set()
        self.pending: dict[int, Consumer] = {}
        counts = getattr(cursor, "redelivery_counts", None)
        if not isinstance(counts, RedeliveryCounts):
            counts = RedeliveryCounts()  # a reader's: not persisted
        counts.set_limit(topic.max_redelivery_counts)
        self.redelivery_counts: RedeliveryCounts = counts
        batch_acks = getattr(cursor, "batch_acks", None)
        if not isinstance(batch_acks, BatchAckSets):
            batch_acks = BatchAckSets()  # a reader's: not persisted
        self.batch_acks: BatchAckSets = batch_acks
        self.delayed = DelayedDeliveryTracker(topic.max_delayed_tracked)
        self._dispatch_scheduled = False
        self._delay_timer: asyncio.TimerHandle | None = None
        self._delay_due = 0
        self.failover = FailoverHandover(self)
        self.messages_acked = 0
        # Pulsar's subscription counters outlive its consumers: what consumers that
        # left had been sent is kept here (stats add the connected consumers' own).
        self.gone_messages_out = 0
        self.gone_bytes_out = 0
        self.messages_redelivered = 0  # counted per request, not per message sent
        # Expired by TTL, a message_age eviction or an admin's expireMessages.
        self.messages_expired = 0
        self.last_expire_ms = 0
        self.last_acked_ms = 0  # set per ACK command (a client groups its acks)
        # Its consumer reads the compacted view up to the horizon (compacted_dispatch.py).
        self.read_compacted = False

    # ------------------------------------------------------------ consumers

    @property
    def consumers(self) -> list[Consumer]:
        return self.dispatcher.consumers

    @property
    def type_name(self) -> str:
        return SUB_TYPE_NAMES.get(self.sub_type, str(self.sub_type))

    def add_consumer(self, consumer: Consumer) -> None:
        if self.consumers and self.sub_type == SubType.Exclusive:
            raise SubscriptionError(
                pb.ConsumerBusy,
                f"Exclusive consumer is already connected to subscription '{self.name}'",
            )
        if isinstance(self.dispatcher, KeySharedDispatcher) and consumer.hash_ranges:
            problem = self.dispatcher.check_ranges(consumer.hash_ranges)
            if problem:
                raise SubscriptionError(pb.ConsumerAssignError, problem)
        self.dispatcher.add(consumer)
        self._active_consumer_changed(joined=True)
        self.schedule_dispatch()

    def check_type(self, sub_type: int) -> None:
        if self.consumers and sub_type != self.sub_type:
            raise SubscriptionError(
                pb.ConsumerBusy,
                f"Subscription '{self.name}' is of type {self.type_name}, "
                f"not {SUB_TYPE_NAMES.get(sub_type, str(sub_type))}",
            )

    def change_type(self, sub_type: int) -> None:
        """An idle subscription takes the type of its next consumer, as in Pulsar."""
        if sub_type != self.sub_type and not self.consumers:
            self.sub_type = sub_type
            self.dispatcher = make_dispatcher(
                sub_type, self.dispatcher.max_unacked, self.topic.partition_index
            )

    def remove_consumer(self, consumer: Consumer) -> None:
        consumer.closed = True
        if consumer in self.consumers:
            self.gone_messages_out += consumer.messages_out
            self.gone_bytes_out += consumer.bytes_out
        self.dispatcher.remove(consumer)
        self.return_pending(consumer, list(consumer.pending), count_redelivery=True)
        self._active_consumer_changed()
        self.schedule_dispatch()

    def _active_consumer_changed(self, joined: bool = False) -> None:
        if self.sub_type == SubType.Failover:
            self.failover.active_consumer_changed(joined)

    def notify_consumer_active(self, consumer: Consumer) -> None:
        """After SUBSCRIBE's SUCCESS: tell a Failover consumer whether it is active."""
        consumer.announced = True
        if self.sub_type == SubType.Failover:
            self.failover.notify_consumer_active(consumer)

    def _unpend(self, entry_id: int) -> Consumer | None:
        """Forget that ``entry_id`` is out with a consumer; returns that consumer."""
        owner = self.pending.pop(entry_id, None)
        if owner is None:
            return None
        owner.pending.pop(entry_id, None)
        if self.dispatcher.holds_keys:
            self.dispatcher.release(self.topic.entry_info(entry_id).key_hash)
        return owner

    def return_pending(
        self,
        consumer: Consumer,
        entry_ids: Iterable[int],
        count_redelivery: bool,
        backoff: RedeliveryBackoffPolicy | None = None,
    ) -> None:
        """Take entries back from ``consumer`` to send again; with ``backoff`` (and
        counted), each waits its backoff first."""
        counts = self.redelivery_counts
        now_ms = self.clock_ms() if backoff is not None else 0
        held = False
        returned = 0
        for entry_id in entry_ids:
            if self.pending.get(entry_id) is not consumer:
                consumer.pending.pop(entry_id, None)
                continue
            returned += consumer.pending.get(entry_id, 1)
            self._unpend(entry_id)
            if self.cursor.is_acked(entry_id):
                continue
            if count_redelivery:
                count = counts.increment(entry_id)
                if backoff is not None:
                    delay = backoff.delay_ms(count - 1)  # by the count it was sent with
                    # A full tracker sends it at once: late beats lost.
                    if delay > 0 and self.delayed.add(entry_id, now_ms + delay):
                        held = True
                        continue
            self.replay.add(entry_id)
        self.messages_redelivered += returned
        if held:
            self.arm_delay_timer()

    # ------------------------------------------------------------ flow and acks

    def on_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule_dispatch()

    def ack_individual(self, consumer: Consumer, entry_ids: list[int]) -> None:
        self.cursor.ack(entry_ids)
        batch_acks = self.batch_acks
        for entry_id in entry_ids:
            self._unpend(entry_id)
            self.redelivery_counts.discard(entry_id)
            if batch_acks:
                batch_acks.discard(entry_id)
            self.replay.discard(entry_id)
            self.delayed.discard(entry_id)
        self.messages_acked += len(entry_ids)
        self.last_acked_ms = self.clock_ms()
        self.schedule_dispatch()

    def ack_cumulative(self, consumer: Consumer, entry_id: int) -> None:
        self.cursor.ack_cumulative(entry_id)
        if consumer is not None:  # None: TTL's expiry, not a consumer's ack
            self.last_acked_ms = self.clock_ms()
        for pending_id in [e for e in self.pending if e <= entry_id]:
            self._unpend(pending_id)
        self.redelivery_counts.discard_through(entry_id)
        if self.batch_acks:
            self.batch_acks.discard_through(entry_id)
        self.replay = {e for e in self.replay if e > entry_id}
        if self.read_position <= entry_id:
            self.read_position = entry_id + 1
        self.schedule_dispatch()

    def redeliver(self, consumer: Consumer, entry_ids: list[int] | None) -> None:
        """A consumer's redelivery request: the entries it names wait the redelivery
        backoff, if one is in force; a request for everything does not (it is also
        how clients recover, not only how they negatively acknowledge)."""
        if entry_ids is None:
            self.return_pending(consumer, list(consumer.pending), count_redelivery=True)
        else:
            self.return_pending(consumer, entry_ids, True, self.redelivery_backoff(consumer))
        self.schedule_dispatch()

    def rewind(self, consumer: Consumer, counted: list[int]) -> None:
        """Exclusive/Failover: everything pending on ``consumer`` goes out again in
        order; only ``counted`` (what the application negatively acknowledged) gets a
        higher redelivery count, not what sat unseen in the client's prefetch queue.
        The counted entries wait the redelivery backoff, if one is in force (and so
        come after the others)."""
        counted_set = set(counted)
        pending = list(consumer.pending)
        backoff = self.redelivery_backoff(consumer)
        self.return_pending(consumer, [e for e in pending if e in counted_set], True, backoff)
        self.return_pending(consumer, [e for e in pending if e not in counted_set], False)
        self.schedule_dispatch()

    def redelivery_backoff(self, consumer: Consumer) -> RedeliveryBackoffPolicy | None:
        """The redelivery backoff in force on this subscription for ``consumer`` (None:
        off). None for a consumer that times its own redeliveries (it declared
        ``magnetar.redelivery-backoff=client``): a broker backoff would stack on its own."""
        if consumer.backs_off_itself:
            return None
        return self.topic.redelivery_backoff_of(self.topic)

    # ------------------------------------------------------------ positions

    def seek(self, entry_id: int) -> None:
        """Move the subscription so that ``entry_id`` is the next entry delivered."""
        for consumer in self.consumers:
            consumer.pending.clear()
        self.pending.clear()
        self.dispatcher.clear_holders()
        self.replay.clear()
        self.delayed.clear()
        self.redelivery_counts.clear()
        self.batch_acks.clear()
        self.cursor.reset(entry_id - 1)
        self.read_position = entry_id
        self.schedule_dispatch()

    @property
    def messages_out(self) -> int:
        """Messages sent to the subscription's consumers, those gone included."""
        return self.gone_messages_out + sum(c.messages_out for c in self.consumers)

    @property
    def bytes_out(self) -> int:
        return self.gone_bytes_out + sum(c.bytes_out for c in self.consumers)

    def backlog(self) -> int:
        last = self.topic.last_visible_entry_id
        start = max(self.cursor.mark_delete + 1, self.topic.ledger.first_entry_id)
        if last < start:
            return 0
        count = last - start + 1
        acked_above = getattr(self.cursor, "acked_count_above_mark_delete", None)
        if callable(acked_above):
            count -= int(acked_above())
        return max(count, 0)

    # ------------------------------------------------------------ dispatch

    def dispatch_now(self) -> None:
        """Dispatch in this call and write the frames out at once (no loop round)."""
        if not self.consumers or self.topic.closed:
            return
        self._dispatch()
        for consumer in self.consumers:
            consumer.cnx.flush_now()

    def schedule_dispatch(self) -> None:
        if not self._dispatch_scheduled and self.consumers and not self.topic.closed:
            self._dispatch_scheduled = True
            self.topic.loop.call_soon(self._dispatch)

    def _dispatch(self) -> None:
        self._dispatch_scheduled = False
        if not self.consumers or self.failover.holding:
            return
        try:
            more = dispatch_round(self)
        except Exception:
            log.exception("dispatch failed on %s/%s", self.topic.name, self.name)
            # A failed read (a storage error) is retried a moment later, not spun on.
            self.topic.loop.call_later(DISPATCH_RETRY_DELAY, self.schedule_dispatch)
            return
        if more:
            self.schedule_dispatch()

    def arm_delay_timer(self) -> None:
        """Wake the dispatcher when the earliest held entry is due."""
        due = self.delayed.next_due_ms()
        if due is None:
            return
        if self._delay_timer is not None:
            if self._delay_due <= due:
                return
            self._delay_timer.cancel()
        delay = max(0.0, (due - self.clock_ms()) / 1000.0)

        def fire() -> None:
            self._delay_timer = None
            self.schedule_dispatch()

        self._delay_due = due
        self._delay_timer = self.topic.loop.call_later(delay, fire)

    def close(self) -> None:
        if self._delay_timer is not None:
            self._delay_timer.cancel()
            self._delay_timer = None
        self.failover.cancel()

    def is_single_active(self) -> bool:
        return isinstance(self.dispatcher, SingleActiveDispatcher)
