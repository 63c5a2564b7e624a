"""Retention, message TTL and backlog quotas enforced on the loaded topics, as Pulsar's
broker does (the values and where they come from: retention_policies.py).

- **Retention** (ManagedLedgerImpl's trim): of the sealed segments every durable
  subscription has consumed (all of them on a topic without one), the oldest go while
  they are older than the retention time or the topic is over the retention size;
  the first that is neither stops the walk. (0, 0) removes everything consumed; -1 is
  no limit. Checked every ``retention_check_interval`` by the service's retention task.
- **Message TTL** (PersistentMessageExpiryMonitor): every subscription (but the
  compactor's) acknowledges, up to the newest one, the entries published more than the
  TTL ago; publish times are taken to grow with entry ids, as Pulsar's search does.
- **Backlog quotas** (BacklogQuotaManager): past a ``destination_storage`` quota (the
  bytes from the slowest durable subscription to the end) or a ``message_age`` quota
  (the age of the slowest one's oldest unacknowledged message),
  ``consumer_backlog_eviction`` moves the slowest subscriptions on until the backlog is
  down to 90% of the quota, and the two producer policies detach the topic's producers,
  whose clients attach again and are refused (ProducerBlockedQuotaExceededError:
  hold, their clients keep the sends; ProducerBlockedQuotaExceededException: their
  sends fail) until the backlog is back under the quota.

All of it runs in periodic tasks that yield to the loop between topics; publishing
and dispatching pay nothing. The pure evaluation functions take the time as an
argument; ``PolicyEnforcer`` takes a clock.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from magnetar.broker.policies.retention_policies import (
    CONSUMER_BACKLOG_EVICTION,
    DESTINATION_STORAGE,
    MESSAGE_AGE,
    PRODUCER_EXCEPTION,
    PRODUCER_REQUEST_HOLD,
    BacklogQuota,
    Retention,
    RetentionPolicyStore,
)
from magnetar.protocol.pb import pb
from magnetar.storage.ledger import SegmentSpan

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic

log = logging.getLogger("magnetar.broker.policies")

COMPACTION_SUBSCRIPTION = "__compaction"  # Pulsar's: TTL never expires the compactor's
EVICTION_TARGET = 0.9  # as Pulsar: eviction brings the backlog down to 90% of the quota
KEEP_NOTHING = Retention(0, 0)
_YIELD_EVERY = 500  # topics checked between two yields when there is nothing to do

# ------------------------------------------------------------------ evaluation


def retention_bound(
    spans: list[SegmentSpan],
    consumed_end: int,
    total_size: int,
    retention: Retention,
    now_ms: int,
    sealed_at_ms: Callable[[SegmentSpan], int],
) -> int:
    """The id below which sealed segments may be removed (the first span's first id
    when none may): walking the consumed ones (``end <= consumed_end``) oldest first,
    a segment goes when it was sealed more than the retention time ago or when the
    topic without it and those before it is still at or over the retention size."""
    bound = spans[0].first if spans else consumed_end
    time_ms = retention.time_ms
    size_limit = retention.size_bytes
    removed = 0
    for span in spans:
        if span.end > consumed_end:
            break
        removed += span.size
        over_size = size_limit >= 0 and total_size - removed >= size_limit
        expired = time_ms == 0 or (time_ms > 0 and now_ms - sealed_at_ms(span) > time_ms)
        if not (over_size or expired):
            break
        bound = span.end
    return bound


def expired_through(
    start: int, last: int, publish_time_of: Callable[[int], int], cutoff_ms: int
) -> int:
    """The newest entry of ``start..last`` published before ``cutoff_ms`` (``start - 1``
    if none), by binary search: publish times grow with entry ids."""
    lo, hi = start, last + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if publish_time_of(mid) < cutoff_ms:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


def first_within(start: int, end: int, size_from: Callable[[int], int], target: int) -> int:
    """The smallest id of ``start..end`` from which the log holds at most ``target``
    bytes (``end`` if none does): where an evicted subscription resumes."""
    lo, hi = start, end
    while lo < hi:
        mid = (lo + hi) // 2
        if size_from(mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def size_exceeded(backlog_bytes: int, quota: BacklogQuota) -> bool:
    # Pulsar's isSizeBacklogExceeded: at the limit counts as over it.
    return quota.limit_size >= 0 and backlog_bytes >= quota.limit_size


def age_exceeded(oldest_publish_ms: int | None, quota: BacklogQuota, now_ms: int) -> bool:
    # Pulsar's checkTimeBacklogExceeded (precise): 0 or less is no limit.
    if quota.limit_time <= 0 or oldest_publish_ms is None:
        return False
    return now_ms > oldest_publish_ms + quota.limit_time * 1000


def _segment_sealed_at_ms(span: SegmentSpan) -> int:
    """When a sealed segment was last written: its file's modification time (Pulsar
    uses the time its ledger was closed). A file gone counts as old."""
    try:
        return int(os.stat(span.path).st_mtime * 1000)
    except FileNotFoundError:
        return 0


# ------------------------------------------------------------------ enforcement


class PolicyEnforcer:
    """Applies the policies in force (``store``) to topics. Loop thread only."""

    def __init__(
        self,
        store: RetentionPolicyStore,
        config: BrokerConfig,
        clock: Callable[[], float],
        sealed_at_ms: Callable[[SegmentSpan], int] = _segment_sealed_at_ms,
    ) -> None:
        self.store = store
        self.clock = clock
        self.sealed_at_ms = sealed_at_ms
        self.expiry_interval = config.message_expiry_check_interval_in_seconds
        self.quota_check_enabled = config.backlog_quota_check_enabled
        self.quota_interval = config.backlog_quota_check_interval_in_seconds

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------ retention

    def retention_bound(self, topic: Topic, consumed_end: int) -> int:
        """The id below which ``topic``'s sealed segments may go; see
        :func:`retention_bound`. Non-persistent topics keep nothing."""
        ledger = topic.ledger
        spans = ledger.sealed_segments()
        if not spans:
            return ledger.first_entry_id
        retention = self.store.retention(topic) if topic.topic_name.persistent else KEEP_NOTHING
        return retention_bound(
            spans, consumed_end, ledger.size_bytes(), retention, self.now_ms(), self.sealed_at_ms
        )

    # ------------------------------------------------------------ TTL

    def expire_messages(self, topic: Topic, ttl_ms: int) -> int:
        """Acknowledge on every subscription the entries older than ``ttl_ms``;
        returns how many went."""
        if ttl_ms <= 0:
            return 0
        cutoff = self.now_ms() - ttl_ms
        return sum(
            self._expire(topic, sub, cutoff)
            for sub in list(topic.subscriptions.values())
            if sub.name != COMPACTION_SUBSCRIPTION
        )

    def _expire(self, topic: Topic, sub: Subscription, cutoff_ms: int) -> int:
        start = max(sub.cursor.mark_delete + 1, topic.ledger.first_entry_id)
        last = topic.last_visible_entry_id
        if start > last or topic.entry_info(start).publish_time >= cutoff_ms:
            return 0  # the common case: one look at the oldest unacknowledged entry
        through = expired_through(
            start, last, lambda entry_id: topic.entry_info(entry_id).publish_time, cutoff_ms
        )
        return self._advance(sub, through, expired=True)

    def _advance(self, sub: Subscription, through: int, expired: bool) -> int:
        """Acknowledge everything up to ``through`` on ``sub``, as a cumulative ack
        does (what consumers hold of it is forgotten; their acks of it are no-ops)."""
        before = sub.backlog()
        # Subscription.ack_cumulative does not use the consumer: nobody acked.
        sub.ack_cumulative(cast("Consumer", None), through)
        gone = max(before - sub.backlog(), 0)
        if expired and gone:
            sub.messages_expired += gone
            sub.last_expire_ms = self.now_ms()
        return gone

    async def expiry_monitor(self, topics: Callable[[], Iterable[Topic]]) -> None:
        """The periodic TTL check of every loaded persistent topic."""
        while True:
            await asyncio.sleep(self.expiry_interval)
            for index, topic in enumerate(list(topics())):
                if topic.closed or not topic.topic_name.persistent:
                    continue
                try:
                    ttl = self.store.ttl(topic)
                    if ttl > 0 and topic.subscriptions:
                        expired = self.expire_messages(topic, ttl * 1000)
                        if expired:
                            log.info("message TTL (%d s) expired %d entries of %s",
                                     ttl, expired, topic.name)
                        await asyncio.sleep(0)  # its reads may take a while: one turn each
                        continue
                except Exception:
                    log.exception("message expiry on %s failed", topic.name)
                if index % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)

    # ------------------------------------------------------------ backlog quotas

    @staticmethod
    def slowest_mark(topic: Topic) -> int | None:
        """The mark-delete position of the slowest durable subscription (None: none)."""
        marks = [cursor.mark_delete for cursor in topic.ledger.cursors.values()]
        return min(marks) if marks else None

    def backlog_bytes(self, topic: Topic) -> int:
        """Pulsar's backlogSize: the bytes from the slowest durable subscription's
        position to the end of the log (0 without durable subscriptions)."""
        mark = self.slowest_mark(topic)
        return 0 if mark is None else topic.ledger.size_from(mark + 1)

    def oldest_backlog_publish_ms(self, topic: Topic) -> int | None:
        """The publish time of the slowest durable subscription's oldest unacknowledged
        entry (None: no backlog)."""
        mark = self.slowest_mark(topic)
        if mark is None:
            return None
        start = max(mark + 1, topic.ledger.first_entry_id)
        if start > topic.last_visible_entry_id:
            return None
        return topic.entry_info(start).publish_time

    def exceeded_quota(self, topic: Topic) -> tuple[str, BacklogQuota] | None:
        """The quota ``topic`` is over, if any: its size quota first, as Pulsar checks."""
        store = self.store
        size_quota = store.quota(topic, DESTINATION_STORAGE)
        if size_quota.limit_size >= 0 and size_exceeded(self.backlog_bytes(topic), size_quota):
            return DESTINATION_STORAGE, size_quota
        age_quota = store.quota(topic, MESSAGE_AGE)
        if age_quota.limit_time > 0 and age_exceeded(
            self.oldest_backlog_publish_ms(topic), age_quota, self.now_ms()
        ):
            return MESSAGE_AGE, age_quota
        return None

    def producer_refusal(self, topic: Topic) -> tuple[int, str] | None:
        """The error a producer attaching to ``topic`` gets while it is over a quota
        whose policy holds producers back (None: it may attach)."""
        if not topic.topic_name.persistent:
            return None
        over = self.exceeded_quota(topic)
        if over is None:
            return None
        kind, quota = over
        if quota.policy == PRODUCER_EXCEPTION:
            code = pb.ProducerBlockedQuotaExceededException
        elif quota.policy == PRODUCER_REQUEST_HOLD:
            code = pb.ProducerBlockedQuotaExceededError
        else:
            return None
        return code, (
            f"Cannot create producer on topic {topic.name} with backlog quota exceeded "
            f"({kind}, {quota.policy})"
        )

    def check_backlog_quota(self, topic: Topic) -> str | None:
        """Enforce the quota ``topic`` is over, if any; returns its type."""
        over = self.exceeded_quota(topic)
        if over is None:
            return None
        kind, quota = over
        if quota.policy == CONSUMER_BACKLOG_EVICTION:
            if kind == DESTINATION_STORAGE:
                evicted = self._evict_for_size(topic, quota)
            else:
                # In milliseconds: Pulsar's whole seconds make 90% of 1 s no limit at all.
                target_ms = int(EVICTION_TARGET * quota.limit_time * 1000)
                evicted = self.expire_messages(topic, target_ms)
            log.info("backlog quota %s exceeded on %s: %d entries evicted",
                     kind, topic.name, evicted)
        elif topic.producers:
            log.info("backlog quota %s exceeded on %s: detaching %d producers (%s)",
                     kind, topic.name, len(topic.producers), quota.policy)
            for producer in list(topic.producers.values()):
                producer.cnx.close_producer_by_broker(producer)
        return kind

    def _evict_for_size(self, topic: Topic, quota: BacklogQuota) -> int:
        """Move the slowest durable subscriptions on until the backlog is at most 90%
        of the quota (Pulsar skips entries of the slowest one, again and again)."""
        mark = self.slowest_mark(topic)
        if mark is None:
            return 0
        ledger = topic.ledger
        start = max(mark + 1, ledger.first_entry_id)
        end = topic.last_visible_entry_id + 1
        keep_from = first_within(
            start, end, ledger.size_from, int(EVICTION_TARGET * quota.limit_size)
        )
        evicted = 0
        for sub in list(topic.subscriptions.values()):
            if sub.durable and sub.name != COMPACTION_SUBSCRIPTION and (
                sub.cursor.mark_delete < keep_from - 1
            ):
                evicted += self._advance(sub, keep_from - 1, expired=False)
        return evicted

    async def backlog_quota_monitor(self, topics: Callable[[], Iterable[Topic]]) -> None:
        """The periodic backlog quota check of every loaded persistent topic."""
        if not self.quota_check_enabled:
            return
        while True:
            await asyncio.sleep(self.quota_interval)
            for index, topic in enumerate(list(topics())):
                if topic.closed or not topic.topic_name.persistent:
                    continue
                try:
                    if self.check_backlog_quota(topic) is not None:
                        await asyncio.sleep(0)
                        continue
                except Exception:
                    log.exception("backlog quota check on %s failed", topic.name)
                if index % _YIELD_EVERY == _YIELD_EVERY - 1:
                    await asyncio.sleep(0)

    # ------------------------------------------------------------ stats

    def add_stats(self, topic: Topic, doc: dict[str, Any]) -> None:
        """Add Pulsar's backlog and expiry figures to ``topic``'s stats document."""
        ledger = topic.ledger
        doc["backlogSize"] = self.backlog_bytes(topic)
        if topic.topic_name.persistent:
            oldest = self.oldest_backlog_publish_ms(topic)
            size_quota = self.store.quota(topic, DESTINATION_STORAGE)
            age_quota = self.store.quota(topic, MESSAGE_AGE)
            doc["backlogQuotaLimitSize"] = size_quota.limit_size
            doc["backlogQuotaLimitTime"] = age_quota.limit_time
            doc["oldestBacklogMessageAgeSeconds"] = (
                -1 if oldest is None else max(self.now_ms() - oldest, 0) // 1000
            )
        subscriptions = doc.get("subscriptions")
        if not isinstance(subscriptions, dict):
            return
        for name, sub in topic.subscriptions.items():
            entry = subscriptions.get(name)
            if not isinstance(entry, dict):
                continue
            entry["backlogSize"] = ledger.size_from(sub.cursor.mark_delete + 1)
            entry["totalMsgExpired"] = sub.messages_expired
            entry["lastExpireTimestamp"] = sub.last_expire_ms
