"""Broker operations behind the admin API's subscription and topic routes: create a
subscription at a position, reset its cursor (by time or message id), skip, clear and
expire its backlog, peek and examine messages, grow a partitioned topic, unload.

A cursor reset tells the subscription's consumers as Pulsar does: they are closed by
the broker (CLOSE_CONSUMER), and the clients reconnect at the new position with fresh
permits, so nothing they had prefetched from before the reset is delivered. A skip or
an expiry only acknowledges entries; consumers stay connected, as in Pulsar.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from magnetar.broker.policies.topic_policies import expired_through
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import TopicName

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger("magnetar.broker.admin_ops")

EARLIEST = "earliest"
LATEST = "latest"
_MAX_LONG = (1 << 63) - 1  # Pulsar's MessageId.latest has ledger and entry Long.MAX_VALUE


class SubscriptionExists(Exception):
    pass


class SubscriptionBusy(Exception):
    """Connected consumers keep it (delete without force)."""


def target_of_message_id(topic: Topic, ledger_id: int, entry_id: int) -> int:
    """The position a REST MessageId names: earliest (-1:-1), latest (Long.MAX), or an
    id clamped to the stored range, as Pulsar resets a cursor to the nearest position."""
    if ledger_id < 0:
        return topic.earliest_entry_id()
    if ledger_id >= _MAX_LONG:
        return topic.last_visible_entry_id + 1
    target = topic.entry_id_of(ledger_id, max(entry_id, 0))
    return max(topic.ledger.first_entry_id, min(target, topic.last_visible_entry_id + 1))


def target_of(topic: Topic, where: int | str) -> int:
    """The next entry a subscription at ``where`` (earliest, latest or a position) reads."""
    if where == EARLIEST:
        return topic.earliest_entry_id()
    if where == LATEST:
        return topic.last_visible_entry_id + 1
    return int(where)


def create_subscription(topic: Topic, name: str, where: int | str) -> Subscription:
    """A durable subscription whose next entry is ``where``; SubscriptionExists if one
    of that name exists."""
    if name in topic.subscriptions:
        raise SubscriptionExists(f"Subscription {name} already exists for topic {topic.name}")
    sub = topic.subscription(name, pb.CommandSubscribe.Exclusive, True,
                             pb.CommandSubscribe.Latest, None)
    target = target_of(topic, where)
    if target != sub.read_position:
        sub.seek(target)
    sub.cursor.flush()  # it exists on disk before the answer
    log.info("admin created subscription %s on %s at entry %d", name, topic.name, target)
    return sub


def delete_subscription(topic: Topic, name: str, force: bool) -> None:
    """KeyError if it does not exist; SubscriptionBusy if consumers are connected and
    not ``force`` (with it they are closed first)."""
    sub = topic.subscriptions[name]
    if sub.consumers and not force:
        raise SubscriptionBusy("Subscription has active connected consumers")
    _close_consumers(sub)
    topic.remove_subscription(name)
    log.info("admin deleted subscription %s on %s", name, topic.name)


def reset_cursor(sub: Subscription, target: int) -> None:
    """Move ``sub`` so that ``target`` is its next entry; its consumers are closed by
    the broker and come back there (Pulsar's resetCursor)."""
    _close_consumers(sub)
    sub.seek(target)
    sub.cursor.flush()
    log.info("admin reset %s/%s to entry %d", sub.topic.name, sub.name, target)


def reset_cursor_to_time(sub: Subscription, timestamp_ms: int) -> int:
    """Reset to the first entry published at or after ``timestamp_ms``; returns it."""
    target = sub.topic.find_by_publish_time(timestamp_ms)
    reset_cursor(sub, target)
    return target


def skip(sub: Subscription, count: int) -> int:
    """Acknowledge the first ``count`` unacknowledged entries of the backlog; returns
    how many were. (An entry is a batch as a whole, as Pulsar's skip counts entries of
    non-batched topics.)"""
    topic = sub.topic
    entry_id = max(sub.cursor.mark_delete + 1, topic.ledger.first_entry_id)
    last = topic.last_visible_entry_id
    chosen: list[int] = []
    while len(chosen) < count and entry_id <= last:
        if not sub.cursor.is_acked(entry_id):
            chosen.append(entry_id)
        entry_id += 1
    if chosen:
        sub.ack_individual(_NOBODY, chosen)
        sub.cursor.flush()
    return len(chosen)


def skip_all(sub: Subscription) -> int:
    """Acknowledge the whole backlog (Pulsar's clear-backlog); returns how many went."""
    before = sub.backlog()
    sub.ack_cumulative(_NOBODY, sub.topic.last_visible_entry_id)
    sub.cursor.flush()
    return before - sub.backlog()


def expire_messages(sub: Subscription, seconds: int, now_ms: int) -> int:
    """Acknowledge the entries published more than ``seconds`` ago; how many went."""
    topic = sub.topic
    start = max(sub.cursor.mark_delete + 1, topic.ledger.first_entry_id)
    last = topic.last_visible_entry_id
    if start > last:
        return 0
    cutoff = now_ms - seconds * 1000
    through = expired_through(start, last, lambda e: topic.entry_info(e).publish_time, cutoff)
    if through < start:
        return 0
    before = sub.backlog()
    sub.ack_cumulative(_NOBODY, through)
    sub.cursor.flush()
    gone = before - sub.backlog()
    if gone:  # counted as Pulsar's expiry monitor counts TTL's and an admin's alike
        sub.messages_expired += gone
        sub.last_expire_ms = now_ms
    return gone


def peek_position(sub: Subscription, n: int) -> int | None:
    """The entry id of the ``n``-th (1-based) unacknowledged entry, or None."""
    topic = sub.topic
    entry_id = max(sub.cursor.mark_delete + 1, topic.ledger.first_entry_id)
    last = topic.last_visible_entry_id
    seen = 0
    while entry_id <= last:
        if not sub.cursor.is_acked(entry_id):
            seen += 1
            if seen == n:
                return entry_id
        entry_id += 1
    return None


def examine_position(topic: Topic, initial: str, n: int) -> int | None:
    """The entry ``n`` (1-based) from the earliest or the latest, or None past the log."""
    first, last = topic.ledger.first_entry_id, topic.last_visible_entry_id
    entry_id = first + n - 1 if initial == EARLIEST else last - n + 1
    return entry_id if first <= entry_id <= last else None


def grow_partitions(service: BrokerService, topic: str, partitions: int) -> None:
    """Raise a partitioned topic's partition count (Pulsar never lowers one).
    LookupError if it is not partitioned, ValueError if ``partitions`` is not more."""
    name = TopicName.parse(topic)
    full = str(name)
    current = service.store.get_partitions(full)
    if not current:
        raise LookupError(f"Partitioned topic {full} does not exist")
    if partitions <= current:
        raise ValueError(
            f"Expect partitions {partitions} grater than exists {current}"  # Pulsar's words
        )
    cap = service.config.max_partitions_per_topic
    if cap and partitions > cap:
        raise ValueError(f"Number of partitions should be less than or equal to {cap}")
    service.store.set_partitions(full, partitions)
    for index in range(current, partitions):
        service.get_topic(name.partition(index), create=True, explicit=True)
    log.info("grew partitioned topic %s from %d to %d partitions", full, current, partitions)


async def unload(service: BrokerService, topics: list[Topic]) -> None:
    """Close the topics; their clients reconnect, which loads them again."""
    for topic in topics:
        await service.unload_topic(topic, "admin unload")


def _close_consumers(sub: Subscription) -> None:
    for consumer in list(sub.consumers):
        consumer.cnx.consumer_closed_by_broker(consumer)


# Subscription's ack methods take the acking consumer and do not use it: nobody acked.
_NOBODY = cast("Consumer", None)
