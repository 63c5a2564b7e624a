"""The JSON documents of a topic's ``stats``, ``partitioned-stats`` and
``internalStats``, in the field names of Pulsar's TopicStats, SubscriptionStats,
ConsumerStats, PublisherStats and PersistentTopicInternalStats.

Rates (``msgRateIn``, ``msgThroughputOut``...) come from the broker's moving-window
rate tracker (broker/observability/rates.py); positions are printed as Pulsar prints them,
``ledger:entry``, and a cursor's individually deleted ranges as ``[(l:e..l:e]]``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic

# Summed over partitions in partitioned-stats (topic level and per subscription).
_TOPIC_SUMS = (
    "msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "bytesInCounter",
    "msgInCounter", "bytesOutCounter", "msgOutCounter", "storageSize", "backlogSize",
    "entries", "offloadedStorageSize", "waitingPublishers",
)
_SUB_SUMS = (
    "msgBacklog", "msgRateOut", "msgThroughputOut", "bytesOutCounter", "msgOutCounter",
    "unackedMessages", "backlogSize", "totalMsgExpired", "msgRateRedeliver", "msgRateExpired",
    "msgDelayed", "msgBacklogNoDelayed",
)


def iso_time(seconds: float) -> str:
    """Pulsar's DateFormatter: ISO 8601 with milliseconds, in UTC."""
    text = datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def position(topic: Topic, entry_id: int) -> str:
    """``ledger:entry`` of a stored position, as Pulsar prints a PositionImpl."""
    return f"{topic.ledgers.ledger_of(entry_id)}:{entry_id}"


def topic_stats(service: BrokerService, topic: Topic) -> dict[str, Any]:
    """Pulsar's TopicStats of one (non-partitioned) topic or one partition."""
    rates = service.rates
    now = service.clock()
    doc: dict[str, Any] = dict(topic.stats_dict())  # magnetar's own fields stay too
    doc.update(
        msgRateIn=rates.rate(topic, "msg_in"),
        msgThroughputIn=rates.rate(topic, "bytes_in"),
        msgRateOut=rates.rate(topic, "msg_out"),
        msgThroughputOut=rates.rate(topic, "bytes_out"),
        bytesOutCounter=topic.stats.bytes_out,
        averageMsgSize=_average(topic.stats.bytes_in, topic.stats.messages_in),
        offloadedStorageSize=0,  # magnetar has no tiered storage
        msgChunkPublished=topic.msg_chunk_published,
        waitingPublishers=len(topic.access.waiters),
        compaction=service.compaction.state(topic).stats(),
    )
    for producer, entry in zip(topic.producers.values(), doc["publishers"], strict=True):
        entry.update(
            msgRateIn=rates.rate(producer, "msg_in"),
            msgThroughputIn=rates.rate(producer, "bytes_in"),
            bytesInCounter=producer.bytes_in,
            averageMsgSize=_average(producer.bytes_in, producer.messages_in),
            connectedSince=iso_time(rates.first_seen(producer, now)),
            clientVersion=producer.cnx.client_version,
        )
    for name, sub in topic.subscriptions.items():
        entry = doc["subscriptions"][name]
        consumers = []
        for consumer, cdoc in zip(sub.consumers, entry["consumers"], strict=True):
            consumed = rates.last_moved(consumer, "msg_out")
            cdoc.update(
                lastConsumedTimestamp=int(consumed * 1000) if consumed is not None else 0,
                msgRateOut=rates.rate(consumer, "msg_out"),
                msgThroughputOut=rates.rate(consumer, "bytes_out"),
                bytesOutCounter=consumer.bytes_out,
                connectedSince=iso_time(rates.first_seen(consumer, now)),
                clientVersion=consumer.cnx.client_version,
                blockedConsumerOnUnackedMsgs=len(consumer.pending) >= sub.dispatcher.max_unacked,
            )
            consumers.append(cdoc)
        active = sub.dispatcher.active_consumer()
        consumed = rates.last_moved(sub, "msg_out")
        delayed = len(sub.delayed)  # deliverAt and redelivery backoff, held
        entry.update(
            isDurable=sub.durable,
            msgRateOut=sum(c["msgRateOut"] for c in consumers),
            msgThroughputOut=sum(c["msgThroughputOut"] for c in consumers),
            msgOutCounter=sub.messages_out,  # consumers that left included, as Pulsar's
            bytesOutCounter=sub.bytes_out,
            msgRateRedeliver=rates.rate(sub, "redeliver"),
            msgRateExpired=rates.rate(sub, "expired"),
            msgDelayed=delayed,
            msgBacklogNoDelayed=max(entry["msgBacklog"] - delayed, 0),
            # magnetar's unacked limit is per consumer: no subscription-wide block
            blockedSubscriptionOnUnackedMsgs=False,
            lastAckedTimestamp=sub.last_acked_ms,
            lastConsumedTimestamp=int(consumed * 1000) if consumed is not None else 0,
            earliestMsgPublishTimeInBacklog=_earliest_in_backlog(topic, sub),
            activeConsumerName=active.name if active is not None else None,
            markDeletePosition=position(topic, sub.cursor.mark_delete),  # not a bare id
        )
    doc["earliestMsgPublishTimeInBacklogs"] = min(
        (s["earliestMsgPublishTimeInBacklog"] for s in doc["subscriptions"].values()
         if s["earliestMsgPublishTimeInBacklog"] > 0), default=0,
    )
    service.topic_policies.add_stats(topic, doc)  # backlogSize, expiries, quotas
    return doc


def _earliest_in_backlog(topic: Topic, sub: Subscription) -> int:
    """The publish time (epoch ms) of the oldest message ``sub`` has not acknowledged,
    0 when it has none (Pulsar's earliestMsgPublishTimeInBacklog)."""
    start = max(sub.cursor.mark_delete + 1, topic.ledger.first_entry_id)
    if start > topic.last_visible_entry_id or not topic.topic_name.persistent:
        return 0
    return topic.entry_info(start).publish_time


def partitioned_stats(
    service: BrokerService, topics: list[Topic], per_partition: bool
) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' stats summed (publishers and
    consumers listed together), and each partition's own under ``partitions``."""
    each = {topic.name: topic_stats(service, topic) for topic in topics}
    doc: dict[str, Any] = {key: 0 for key in _TOPIC_SUMS}
    doc.update(publishers=[], subscriptions={}, metadata={"partitions": len(topics)})
    for stats in each.values():
        for key in _TOPIC_SUMS:
            doc[key] += stats.get(key, 0)
        doc["publishers"].extend(stats["publishers"])
        for name, sub in stats["subscriptions"].items():
            total = doc["subscriptions"].setdefault(
                name, {"type": sub["type"], "isDurable": sub["isDurable"], "consumers": [],
                       **{key: 0 for key in _SUB_SUMS}},
            )
            for key in _SUB_SUMS:
                total[key] += sub.get(key, 0)
            total["consumers"].extend(sub["consumers"])
    doc["averageMsgSize"] = _average(doc["bytesInCounter"], doc["msgInCounter"])
    doc["msgChunkPublished"] = any(stats["msgChunkPublished"] for stats in each.values())
    doc["earliestMsgPublishTimeInBacklogs"] = min(
        (t for stats in each.values() if (t := stats["earliestMsgPublishTimeInBacklogs"]) > 0),
        default=0,
    )
    doc["partitions"] = each if per_partition else {}
    return doc


def internal_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats: the ledgers of the log and the cursors."""
    ledger = topic.ledger
    first, end = ledger.first_entry_id, ledger.next_entry_id
    rows = topic.ledgers.rows
    ledgers = []
    for i, (ledger_id, start) in enumerate(rows):
        stop = rows[i + 1][1] if i + 1 < len(rows) else end
        lo, hi = max(start, first), min(stop, end)
        current = i == len(rows) - 1
        if hi <= lo and not current:
            continue  # wholly trimmed away
        entries = max(hi - lo, 0)
        size = ledger.size_from(lo) - ledger.size_from(hi) if entries else 0
        ledgers.append({"ledgerId": ledger_id, "entries": entries, "size": size,
                        "offloaded": False, "underReplicated": False})
    current_ledger = ledgers[-1] if ledgers else {"entries": 0, "size": 0}
    return {
        "entriesAddedCounter": end - topic.ledgers.current_first,  # since it was loaded
        "numberOfEntries": end - first,
        "totalSize": ledger.size_bytes(),
        "currentLedgerEntries": current_ledger["entries"],
        "currentLedgerSize": current_ledger["size"],
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": max(
            ledger.last_written_entry_id - ledger.last_confirmed_entry_id, 0
        ),
        "lastConfirmedEntry": position(topic, ledger.last_confirmed_entry_id),
        "state": "LedgerOpened",
        "ledgers": ledgers,
        "cursors": {
            name: _cursor(topic, name) for name, sub in topic.subscriptions.items()
            if sub.durable
        },
        "schemaLedgers": [],
        "compactedLedger": {"ledgerId": -1, "entries": -1, "size": -1,
                            "offloaded": False, "underReplicated": False},
    }


def _cursor(topic: Topic, name: str) -> dict[str, Any]:
    sub = topic.subscriptions[name]
    cursor = sub.cursor
    mark_delete = cursor.mark_delete
    ranges_of = getattr(cursor, "individually_acked_ranges", None)
    ranges: list[tuple[int, int]] = ranges_of() if callable(ranges_of) else []
    acked_above = sum(e - s + 1 for s, e in ranges)
    first = topic.ledger.first_entry_id
    # Acks (a skip) may pass the dispatcher's read position; the next read is after them.
    read = max(sub.read_position, mark_delete + 1)
    properties = getattr(cursor, "properties", {})
    return {
        "markDeletePosition": position(topic, mark_delete),
        "readPosition": position(topic, read),
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "messagesConsumedCounter": max(mark_delete + 1 - first, 0) + acked_above,
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
        # Guava's open-closed ranges as Pulsar prints them: (last unacked..last acked].
        "individuallyDeletedMessages": "["
        + ",".join(f"({position(topic, s - 1)}..{position(topic, e)}]" for s, e in ranges)
        + "]",
        "lastLedgerSwitchTimestamp": "",
        "state": "Open",
        "active": bool(sub.consumers),
        "numberOfEntriesSinceFirstNotAckedMessage": read - mark_delete - 1,
        "totalNonContiguousDeletedMessagesRange": len(ranges),
        "subscriptionHavePendingRead": False,
        "subscriptionHavePendingReplayRead": False,
        "properties": dict(properties),
    }


def _average(total_bytes: int, messages: int) -> float:
    return total_bytes / messages if messages else 0.0
