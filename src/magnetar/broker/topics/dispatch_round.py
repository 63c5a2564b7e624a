"""One dispatch round of a subscription: which entries go out now, and to whom.

Replays (negative acks, consumers gone, redeliver requests, delayed entries now due)
go first, in entry order; then new entries from the read position. The
subscription's dispatcher picks the consumer; the round stops at its budget (entries
and bytes), at the first refusal of an ordered dispatcher, or at the end of the topic.

The byte budget bounds what a consumer that does not read costs: a round queues at
most ``dispatch_max_bytes_per_round`` plus one entry; its frames are written before
the next round, and a consumer whose connection's write buffer went over the
high-water mark is not picked again until it drains (Consumer.can_receive).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from magnetar.broker.session import outgoing
from magnetar.broker.topics.batch_acks import unacked_part
from magnetar.broker.topics.compacted_dispatch import compacted_round
from magnetar.broker.topics.dispatchers import SubType
from magnetar.broker.topics.shield import as_one_message

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.entry_info import EntryInfo
    from magnetar.broker.topics.subscription import Subscription

MAX_ENTRIES_PER_ROUND = 2000
# Without a setting to read (no consumer yet): the default of dispatch_max_bytes_per_round.
DEFAULT_MAX_BYTES_PER_ROUND = 1024 * 1024
# Entries a round may pass over without sending (acked, pending, held for later
# delivery) before it yields to the loop: 100k delayed messages in a row must not
# stall every other connection while one round walks them.
MAX_SKIPPED_PER_ROUND = 5000
MAX_KEY_SHARED_LOOKAHEAD = 10000
# A consumer far behind the cache has its entries read on a worker thread, a run at a
# time: the round's byte budget, and at least this much.
READ_AHEAD_MIN_BYTES = 256 * 1024
# The subscription types that hold an entry until its deliver_at. A set of ints, read
# once: ``SubType.Shared`` is an attribute lookup in protobuf's Python enum wrapper,
# about 1.5 us, twice a round.
DELAY_HONOURING = frozenset({SubType.Shared, SubType.Key_Shared})


def dispatch_round(sub: Subscription) -> bool:
    """Send what the consumers can take; True if a further round has work."""
    now_ms = sub.clock_ms()
    budget = MAX_ENTRIES_PER_ROUND
    byte_budget = _byte_budget(sub)
    blocked_keys: set[int] = set()
    _release_due(sub, now_ms)
    compacted = sub.topic.ledger.compacted
    if sub.read_compacted and compacted is not None:
        more = compacted_round(sub, compacted, budget, byte_budget)
        if more is not None:
            return more
    if sub.replay:
        more, budget, byte_budget = _replay(sub, budget, byte_budget, blocked_keys)
        if more is not None:
            return more
    return _read_new(sub, now_ms, budget, byte_budget, blocked_keys)


def _release_due(sub: Subscription, now_ms: int) -> None:
    """Delayed entries that are due now join the replays."""
    if sub.delayed:
        for entry_id in sub.delayed.pop_due(now_ms):
            sub.replay.add(entry_id)
    if sub.delayed.overflow_from is not None and sub.delayed.has_room:
        rescan_overflow(sub, now_ms)


def _replay(
    sub: Subscription, budget: int, byte_budget: int, blocked_keys: set[int]
) -> tuple[bool | None, int, int]:
    """Send the entries to deliver again, first; returns the round's answer (None: go
    on to new entries) and the budgets left."""
    topic = sub.topic
    ledger = topic.ledger
    cursor = sub.cursor
    dispatcher = sub.dispatcher
    pending = sub.pending
    ordered = dispatcher.ordered
    uses_keys = dispatcher.uses_keys
    for entry_id in sorted(sub.replay):
        if entry_id in pending or cursor.is_acked(entry_id) or entry_id < ledger.first_entry_id:
            sub.replay.discard(entry_id)
            continue
        # Delayed entries come due long after they were cached: read them on a
        # worker thread, not one pread at a time on the loop (100k due at once).
        if ledger.is_cold(entry_id) and _wait_for_read_ahead(sub, entry_id, byte_budget):
            return False, budget, byte_budget
        info, entry = topic.info_and_entry(entry_id)
        if uses_keys and info.key_hash in blocked_keys:
            continue
        consumer = dispatcher.pick(info.key_hash)
        if consumer is None:
            if ordered:
                return False, budget, byte_budget
            if uses_keys:
                blocked_keys.add(info.key_hash)
                continue
            break
        sub.replay.discard(entry_id)
        byte_budget -= send(sub, consumer, entry_id, info, entry)
        budget -= 1
        if budget <= 0 or byte_budget <= 0:
            return True, budget, byte_budget
    if sub.replay and not uses_keys:
        # Replays go first; new entries wait until they are out.
        sub.arm_delay_timer()
        return False, budget, byte_budget
    return None, budget, byte_budget


def _read_new(
    sub: Subscription, now_ms: int, budget: int, byte_budget: int, blocked_keys: set[int]
) -> bool:
    """Send new entries from the subscription's read position; True if a further round
    has work."""
    topic = sub.topic
    ledger = topic.ledger
    cursor = sub.cursor
    dispatcher = sub.dispatcher
    pending = sub.pending
    uses_keys = dispatcher.uses_keys
    honours_delay = sub.sub_type in DELAY_HONOURING
    last = topic.last_visible_entry_id
    position = max(sub.read_position, ledger.first_entry_id)
    skipped = 0
    while position <= last:
        if skipped >= MAX_SKIPPED_PER_ROUND:
            sub.read_position = position
            return True
        if position in pending or cursor.is_acked(position):
            position += 1
            skipped += 1
            continue
        if ledger.is_cold(position) and _wait_for_read_ahead(sub, position, byte_budget):
            sub.read_position = position
            return False
        info, entry = topic.info_and_entry(position)
        if honours_delay and info.deliver_at and info.deliver_at > now_ms:
            if not sub.delayed.add(position, info.deliver_at):
                sub.delayed.overflowed(position)
            position += 1
            skipped += 1
            continue
        if uses_keys and info.key_hash in blocked_keys:
            if len(sub.replay) >= MAX_KEY_SHARED_LOOKAHEAD:
                break
            sub.replay.add(position)
            position += 1
            continue
        consumer = dispatcher.pick(info.key_hash)
        if consumer is None:
            if uses_keys and dispatcher.consumers and len(sub.replay) < MAX_KEY_SHARED_LOOKAHEAD:
                blocked_keys.add(info.key_hash)
                sub.replay.add(position)
                position += 1
                continue
            break
        byte_budget -= send(sub, consumer, position, info, entry)
        position += 1
        budget -= 1
        if budget <= 0 or byte_budget <= 0:
            sub.read_position = position
            return True
    sub.read_position = position
    sub.arm_delay_timer()
    if topic.terminated and position > last and not sub.replay:
        announce_end_of_topic(sub)
    return False


def _wait_for_read_ahead(sub: Subscription, position: int, byte_budget: int) -> bool:
    """The entry at ``position`` is on disk only: have a worker thread read the run
    from it, and dispatch again once it is in (True); False: read it in place."""
    loading = sub.topic.ledger.read_ahead(position, max(byte_budget, READ_AHEAD_MIN_BYTES))
    if loading is None:
        return False
    loading.add_done_callback(lambda _: sub.schedule_dispatch())
    return True


def _byte_budget(sub: Subscription) -> int:
    consumers = sub.dispatcher.consumers
    if not consumers:
        return DEFAULT_MAX_BYTES_PER_ROUND
    limit = consumers[0].cnx.config.dispatch_max_bytes_per_round
    return limit if limit > 0 else sys.maxsize


def rescan_overflow(sub: Subscription, now_ms: int) -> None:
    """Find again the delayed entries the full tracker could not keep: walk the log
    from the first of them, at most MAX_SKIPPED_PER_ROUND entries a round, tracking
    what is still due later and replaying what is due now."""
    topic = sub.topic
    tracker = sub.delayed
    assert tracker.overflow_from is not None
    position = max(tracker.overflow_from, topic.ledger.first_entry_id)
    end = min(sub.read_position, position + MAX_SKIPPED_PER_ROUND)
    while position < end:
        if (
            position in sub.pending
            or position in sub.replay
            or position in tracker
            or sub.cursor.is_acked(position)
        ):
            position += 1
            continue
        info = topic.cached_entry_info(position)
        if info is None:
            if topic.ledger.is_cold(position) and _wait_for_read_ahead(
                    sub, position, READ_AHEAD_MIN_BYTES):
                break  # resumed from here once the run is in
            info = topic.entry_info(position)
        if info.deliver_at > now_ms:
            if not tracker.add(position, info.deliver_at):
                break  # full again: resume here once it drains
        else:
            sub.replay.add(position)
        position += 1
    tracker.overflow_from = position if position < sub.read_position else None


def send(sub: Subscription, consumer: Consumer, entry_id: int, info: EntryInfo,
         entry: bytes | None = None) -> int:
    """Send one entry to ``consumer`` (``entry``: its bytes, if the round read them
    already); returns its size in bytes."""
    topic = sub.topic
    num_messages = info.num_messages
    try:
        if entry is None:
            entry = topic.ledger.read(entry_id)
    except Exception:
        # Not sent: it must go out on a later round, not stay owned by nobody.
        sub.replay.add(entry_id)
        raise
    ack_set = None
    if sub.batch_acks:  # a partly acked batch goes out with what is left of it
        num_messages, ack_set = unacked_part(sub, consumer, entry_id, num_messages)
    return hand_over(sub, consumer, entry_id, info, entry, num_messages, ack_set)


def hand_over(sub: Subscription, consumer: Consumer, entry_id: int, info: EntryInfo,
              entry: bytes, num_messages: int, ack_set: list[int] | None) -> int:
    """Give ``entry`` to ``consumer``: it is pending on it, its key held by it, and
    counted out; returns its size in bytes. A foreign batch goes to a consumer that
    does not read foreign entries as one message (shield.py)."""
    topic = sub.topic
    if info.foreign_batch and not consumer.reads_foreign_entries:
        # PIP-96 shield: one message it can read, whole, never a batch to split.
        entry = as_one_message(entry)
        num_messages, ack_set = 1, None
    sub.pending[entry_id] = consumer
    sub.dispatcher.hold(info.key_hash, consumer)
    consumer.send_entry(
        entry_id,
        topic.message_id_bytes(entry_id),
        entry,
        num_messages,
        sub.redelivery_counts.get(entry_id, 0),
        ack_set,
    )
    topic.stats.messages_out += num_messages
    topic.stats.bytes_out += len(entry)
    return len(entry)


def announce_end_of_topic(sub: Subscription) -> None:
    for consumer in sub.consumers:
        if not consumer.told_end_of_topic:
            consumer.told_end_of_topic = True
            if not consumer.cnx.understands_end_of_topic:
                continue  # it would drop the connection (see client_quirks)
            consumer.cnx.write_command(
                outgoing.reached_end_of_topic(consumer.consumer_id)
            )
