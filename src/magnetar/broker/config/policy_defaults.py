"""The broker-wide defaults of what topics and namespaces may override: topic creation and
partitions, redelivery backoff, batch-index acks, deduplication, compaction, retention, TTL,
backlog quotas, and PIP-371's reply hold.

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.config.errors import setting_help as _help


@dataclass
class PolicyDefaults:
    allow_auto_topic_creation: bool = field(
        default=True, metadata=_help("a producer or consumer may create the topic it names")
    )
    allow_auto_namespace_creation: bool = field(
        default=False,
        metadata=_help(
            "a topic created in a namespace that does not exist creates the namespace "
            "(and its tenant); off, as in Pulsar: a producer, consumer or lookup on it "
            "fails with TopicNotFound until the admin API creates it"
        ),
    )
    default_partitions: int = field(
        default=0, metadata=_help("partitions of auto-created topics; 0: not partitioned")
    )
    max_partitions_per_topic: int = field(
        default=1000,
        metadata=_help(
            "most partitions a partitioned topic may have (each is a topic with open "
            "files), so a typo like 100000 is refused; 0: no cap"
        ),
    )
    redelivery_backoff_min_ms: int = field(
        default=0,
        metadata=_help(
            "broker-side redelivery backoff (PIP-106 for clients without it): a message "
            "named in a redelivery request (a negative ack) is held back "
            "min(max, min * multiplier ** redelivery count) ms before it goes out again; "
            "a consumer that disconnects is not waited for, nor one that backs off "
            "itself (magnetar's client declares it). The default of every "
            "subscription; namespaces and topics may set their own (admin API). 0: off"
        ),
    )
    redelivery_backoff_max_ms: int = field(
        default=60_000, metadata=_help("the longest redelivery backoff, in milliseconds")
    )
    redelivery_backoff_multiplier: float = field(
        default=2.0, metadata=_help("growth of the redelivery backoff per redelivery (>= 1)")
    )
    max_redelivery_counts_per_subscription: int = field(
        default=10_000,
        metadata=_help(
            "redelivery counts a subscription keeps, in memory and with its position on "
            "disk (so they survive a restart); past it the least recently counted "
            "message is forgotten and counts from 0 again"
        ),
    )
    acknowledgment_at_batch_index_level_enabled: bool = field(
        default=True,
        metadata=_help(
            "batch-index acks (Pulsar's acknowledgmentAtBatchIndexLevelEnabled, PIP-54): "
            "an ack of some messages of a batch is kept with the subscription's position "
            "and the batch is delivered again without them; off: the batch stays unacked "
            "until all of it is acked, and comes again whole"
        ),
    )
    broker_deduplication_enabled: bool = field(
        default=False,
        metadata=_help(
            "message deduplication (Pulsar's brokerDeduplicationEnabled): a message whose "
            "producer sequence id is not above that producer's last one is not stored "
            "again; the default of every persistent topic, which namespaces and topics "
            "may override (admin API)"
        ),
    )
    broker_deduplication_max_number_of_producers: int = field(
        default=10_000,
        metadata=_help(
            "producers whose sequence ids a topic remembers for deduplication; past it "
            "the longest inactive one is forgotten"
        ),
    )
    broker_deduplication_entries_interval: int = field(
        default=1_000,
        metadata=_help(
            "entries between two deduplication snapshots of a topic (a load replays "
            "the entries after the last one)"
        ),
    )
    broker_deduplication_snapshot_interval_seconds: float = field(
        default=120.0,
        metadata=_help(
            "a topic with entries since its last deduplication snapshot takes one after "
            "this many seconds; 0: only every broker_deduplication_entries_interval"
        ),
    )
    broker_deduplication_producer_inactivity_timeout_minutes: int = field(
        default=360,
        metadata=_help(
            "a producer disconnected for this long is forgotten by deduplication"
        ),
    )
    broker_service_compaction_threshold_in_bytes: int = field(
        default=0,
        metadata=_help(
            "topic compaction starts by itself once the bytes a topic's compaction has "
            "not read exceed this (Pulsar's brokerServiceCompactionThresholdInBytes); "
            "namespaces and topics may override it with compactionThreshold; 0: off"
        ),
    )
    broker_service_compaction_monitor_interval_in_seconds: float = field(
        default=60.0,
        metadata=_help(
            "seconds between checks of the topics' backlogs against their compaction "
            "threshold (Pulsar's brokerServiceCompactionMonitorIntervalInSeconds)"
        ),
    )
    topic_compaction_retain_null_key: bool = field(
        default=False,
        metadata=_help(
            "compaction keeps the messages that have no key (Pulsar's "
            "topicCompactionRetainNullKey); off: they leave the compacted view"
        ),
    )
    retention_check_interval: float = field(
        default=10.0, metadata=_help("seconds between removals of consumed segments")
    )
    default_retention_time_in_minutes: int = field(
        default=0,
        metadata=_help(
            "minutes a topic keeps messages past their consumption: acknowledged by every "
            "durable subscription, or any message of a topic without one (Pulsar's "
            "defaultRetentionTimeInMinutes); whole sealed segments go once older than "
            "this or the topic is over default_retention_size_in_mb. 0 with size 0: kept "
            "until consumed; -1: no time limit. Namespaces and topics may set their own "
            "(admin API)"
        ),
    )
    default_retention_size_in_mb: int = field(
        default=0,
        metadata=_help(
            "megabytes of a topic (all its segments) retention keeps (Pulsar's "
            "defaultRetentionSizeInMB); -1: no size limit; see "
            "default_retention_time_in_minutes"
        ),
    )
    ttl_duration_default_in_seconds: int = field(
        default=0,
        metadata=_help(
            "messages unacknowledged this long are acknowledged on every subscription "
            "(Pulsar's ttlDurationDefaultInSeconds), checked every "
            "message_expiry_check_interval_in_seconds; 0: never. Namespaces and topics "
            "may set their own (admin API)"
        ),
    )
    message_expiry_check_interval_in_seconds: float = field(
        default=300.0,
        metadata=_help(
            "seconds between message TTL checks (Pulsar's "
            "messageExpiryCheckIntervalInMinutes, 5 minutes)"
        ),
    )
    backlog_quota_check_enabled: bool = field(
        default=True,
        metadata=_help("enforce backlog quotas (Pulsar's backlogQuotaCheckEnabled)"),
    )
    backlog_quota_check_interval_in_seconds: float = field(
        default=60.0,
        metadata=_help(
            "seconds between backlog quota checks; a producer is also checked when it "
            "attaches (Pulsar's backlogQuotaCheckIntervalInSeconds)"
        ),
    )
    backlog_quota_default_limit_bytes: int = field(
        default=-1,
        metadata=_help(
            "bytes of backlog (from the slowest durable subscription to the end) a topic "
            "may have (Pulsar's backlogQuotaDefaultLimitBytes); -1: no limit. Namespaces "
            "and topics may set their own (admin API)"
        ),
    )
    backlog_quota_default_limit_second: int = field(
        default=-1,
        metadata=_help(
            "seconds the oldest unacknowledged message of a topic may wait (Pulsar's "
            "backlogQuotaDefaultLimitSecond); -1: no limit"
        ),
    )
    backlog_quota_default_retention_policy: str = field(
        default="producer_request_hold",
        metadata=_help(
            "what happens past a backlog quota (Pulsar's "
            "backlogQuotaDefaultRetentionPolicy): 'producer_request_hold' (producers "
            "are detached and refused with ProducerBlockedQuotaExceededError, so their "
            "clients hold the sends until the backlog shrinks), 'producer_exception' "
            "(likewise, refused with ProducerBlockedQuotaExceededException: their sends "
            "fail) or 'consumer_backlog_eviction' (the slowest subscriptions skip ahead)"
        ),
    )
    rpc_reply_hold_seconds: float = field(
        default=300.0,
        metadata=_help(
            "PIP-371: longest a reply waits for its absent requester (it waits for the "
            "request's own timeout, at most this), and longest a request is remembered "
            "so that a resent copy is not stored twice"
        ),
    )
    rpc_remembered_requests: int = field(
        default=100_000,
        metadata=_help(
            "PIP-371: most requests remembered at once for recognising resent copies "
            "(about 150 bytes each)"
        ),
    )
    rpc_max_held_replies: int = field(
        default=10000, metadata=_help("PIP-371: most replies waiting at once")
    )
    rpc_max_held_bytes: int = field(
        default=32 * 1024 * 1024,
        metadata=_help("PIP-371: most bytes of reply bodies waiting at once"),
    )
