"""Dispatch from the compacted view, for consumers that subscribed with
``read_compacted`` (Pulsar's CompactedTopicImpl.asyncReadEntriesOrWait).

While such a subscription's read position is at or below the compaction horizon, its
entries come from the topic's compacted ledger: the positions compaction did not keep
are passed over, the kept ones go out under their original message ids. Past the
horizon the ordinary dispatch round reads the log itself (the live tail). Entries to
deliver again (redeliveries, a consumer gone) at or below the horizon are served from
the compacted ledger too.

A batch of which compaction kept only some messages goes out as the compactor wrote it
(the others are ``compacted_out`` placeholders, which the Java client skips) with an
``ack_set`` naming the kept ones, which the C++-based clients honour: without it they
would hand the placeholders to the application. Only Exclusive and Failover
subscriptions read compacted, as Pulsar allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.topics import batch_acks
from magnetar.broker.topics.entry_info import info_from_entry
from magnetar.protocol.message_id import MessageId
from magnetar.storage.batch_ack_sets import words_from_bits

if TYPE_CHECKING:
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic
    from magnetar.storage.compacted_ledger import CompactedLedger


def compacted_round(sub: Subscription, view: CompactedLedger, max_entries: int,
                    max_bytes: int) -> bool | None:
    """Send what lies at or below the horizon; True/False as a dispatch round answers
    (more to do now / wait), None once nothing there is left: the ordinary round goes
    on from the position after the horizon."""
    horizon = view.horizon
    pending = sub.pending
    cursor = sub.cursor
    dispatcher = sub.dispatcher
    if sub.replay:
        for entry_id in sorted(e for e in sub.replay if e <= horizon):
            if entry_id in pending or cursor.is_acked(entry_id) or not view.contains(entry_id):
                sub.replay.discard(entry_id)  # compacted away, or settled meanwhile
                continue
            consumer = dispatcher.pick(0)
            if consumer is None:
                return False
            sub.replay.discard(entry_id)
            max_bytes -= send_compacted(sub, consumer, view, entry_id)
            max_entries -= 1
            if max_entries <= 0 or max_bytes <= 0:
                return True
    position = sub.read_position
    while position <= horizon:
        kept = view.next_at_or_after(position)
        if kept is None or kept > horizon:
            position = horizon + 1
            break
        position = kept
        if position in pending or cursor.is_acked(position):
            position += 1
            continue
        consumer = dispatcher.pick(0)
        if consumer is None:
            sub.read_position = position
            return False
        max_bytes -= send_compacted(sub, consumer, view, position)
        position += 1
        max_entries -= 1
        if max_entries <= 0 or max_bytes <= 0:
            sub.read_position = position
            return True
    sub.read_position = position
    return None


def send_compacted(sub: Subscription, consumer: Consumer, view: CompactedLedger,
                   entry_id: int) -> int:
    """Send the compacted ledger's entry at ``entry_id``; returns its size in bytes."""
    try:
        entry = view.read(entry_id)
    except Exception:
        sub.replay.add(entry_id)  # not sent: a later round tries again
        raise
    info = info_from_entry(entry)
    num_messages = info.num_messages
    kept = view.retained(entry_id)
    if batch_acks.enabled(consumer.cnx):
        unacked = sub.batch_acks.get(entry_id)
        if unacked is not None:
            kept = unacked if kept is None else kept & unacked
        elif kept is not None:
            # The placeholders count as acked: acks of the kept messages settle the entry.
            sub.batch_acks.merge(entry_id, kept)
    ack_set = None
    if kept is not None:
        kept &= (1 << num_messages) - 1
        num_messages = kept.bit_count()
        ack_set = words_from_bits(kept)
    from magnetar.broker.topics.dispatch_round import hand_over  # it imports this module

    return hand_over(sub, consumer, entry_id, info, entry, num_messages, ack_set)


def compacted_last_message_id(topic: Topic) -> MessageId | None:
    """The last message a compacted reader can get, when nothing was written since the
    compaction (PIP-286: the topic's last entry may be one compaction removed, and
    ``has_message_available`` would then wait for it forever); None: the topic's own."""
    view = topic.ledger.compacted
    if view is None or topic.last_visible_entry_id > view.horizon:
        return None
    position = view.last_position
    if position is None:
        return MessageId(-1, -1, -1, topic.partition_index)
    kept = view.retained(position)
    if kept is not None:
        return topic.message_id(position, kept.bit_length() - 1)
    num_messages = info_from_entry(view.read(position)).num_messages
    return topic.message_id(position, num_messages - 1 if num_messages > 1 else -1)
