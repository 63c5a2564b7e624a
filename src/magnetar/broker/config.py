"""Broker settings, and how they are read: defaults < TOML file < MAGNETAR_* env < flags.

Every setting is a field of ``BrokerConfig``; its help text lives in the field's
metadata, so ``magnetar serve --help`` (generated from the fields) cannot drift from
them. A value that cannot be used raises ``ConfigError``, which names the setting,
the value and the reason.
"""

from __future__ import annotations

import math
import os
import socket
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from magnetar.broker.session.listeners import parse_listeners, select
from magnetar.protocol.frames import DEFAULT_MAX_MESSAGE_SIZE


class ConfigError(ValueError):
    """A setting has a value the broker cannot use: names the setting, the value, why."""

    def __init__(self, setting: str, value: object, reason: str, source: str = "") -> None:
        self.setting = setting
        self.value = value
        self.reason = reason
        self.source = source  # where the value came from (a file, an env variable), if known
        where = f" (from {source})" if source else ""
        super().__init__(f"{setting} = {_show(value)}{where}: {reason}")


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def os_reason(exc: OSError) -> str:
    """What went wrong, in the errno's own words (uvloop's messages repeat the address)."""
    if exc.errno and exc.errno > 0 and not isinstance(exc, socket.gaierror):
        return os.strerror(exc.errno)
    return exc.strerror or str(exc)


def listen_error(setting: str, host_setting: str, host: str, port: int,
                 exc: OSError) -> ConfigError:
    """The ConfigError for a listening socket that could not be had on host:port."""
    if isinstance(exc, socket.gaierror):
        return ConfigError(host_setting, host, f"cannot listen there: {os_reason(exc)}")
    return ConfigError(setting, port, f"cannot listen on {host}:{port}: {os_reason(exc)}")


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclass
class BrokerConfig:
    host: str = field(default="127.0.0.1", metadata=_help("address to listen on"))
    port: int = field(
        default=6650,
        metadata=_help("Pulsar protocol port, 1-65535 (0, any free port, only from Python)"),
    )
    advertised_address: str | None = field(
        default=None,
        metadata=_help("host[:port] clients are told to connect to in lookups"),
    )
    advertised_listeners: str | None = field(
        default=None,
        metadata=_help(
            "listeners clients may choose by name (Pulsar's advertisedListeners), e.g. "
            "'internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650': a "
            "lookup answers the address of the listener the client names (its "
            "listener_name), or the internal listener's; not with advertised_address"
        ),
    )
    internal_listener_name: str | None = field(
        default=None,
        metadata=_help(
            "the listener of advertised_listeners that lookups naming none get "
            "(Pulsar's internalListenerName); default: the first listed"
        ),
    )
    admin_port: int | None = field(
        default=8080,
        metadata=_help(
            "admin HTTP port, 1-65535; 'off' disables (from Python: None disables, "
            "0 is any free port)"
        ),
    )
    admin_host: str = field(default="127.0.0.1", metadata=_help("address the admin HTTP is on"))
    data_dir: Path = field(
        default_factory=lambda: Path("./data"),
        metadata=_help("where topics are stored; one broker at a time may use it"),
    )
    sync_policy: str = field(
        default="always",
        metadata=_help(
            "'always': fsync before each send receipt, with group commit; "
            "'interval': fsync every sync_interval seconds"
        ),
    )
    sync_interval: float = field(
        default=0.05, metadata=_help("seconds between fsyncs (sync_policy interval)")
    )
    inline_sync_max_entries: int = field(
        default=4,
        metadata=_help(
            "'always': fsync groups of at most this many entries on the event loop "
            "itself, while fsyncs take under inline_sync_max_seconds (moving average) "
            "and no other topic has a write due in the same loop round; else on "
            "worker threads"
        ),
    )
    inline_sync_max_seconds: float = field(
        default=0.001, metadata=_help("see inline_sync_max_entries")
    )
    segment_reserve_max_bytes: int = field(
        default=4 * 1024 * 1024,
        metadata=_help(
            "zeros reserved ahead of the writes in segment files (fallocate), so that "
            "an fsync has no file size to commit; 0 disables"
        ),
    )
    idle_poll_us: int = field(
        default=200,
        metadata=_help(
            "microseconds the event loop keeps polling after input before it sleeps: "
            "lower latency where waking a CPU is slow, for some CPU while traffic "
            "trickles; 0 disables (an in-process EmbeddedBroker uses 0)"
        ),
    )
    loop_lag_probe_interval: float = field(
        default=0.01,
        metadata=_help(
            "seconds between wake-ups of the event loop lag probe, which reports how "
            "late they come (magnetar_event_loop_lag_seconds_max and stalls over 50 ms "
            "on /metrics); 0 disables"
        ),
    )
    loop_stall_trace_seconds: float = field(
        default=0.0,
        metadata=_help(
            "when the event loop has not ticked for this many seconds, log the stack of "
            "what it is running (a diagnostic; needs the lag probe on); 0 disables"
        ),
    )
    gc_freeze_after_pause: float = field(
        default=0.02,
        metadata=_help(
            "magnetar serve only: after a full cyclic garbage collection longer than this "
            "many seconds, what survived it is frozen out of the collector (gc.freeze), so "
            "later full collections stay short however many topics and connections are "
            "loaded (cyclic garbage among frozen objects waits for every 16th freeze, "
            "which collects everything once); 0 disables"
        ),
    )
    dispatch_before_sync: bool = field(
        default=True,
        metadata=_help(
            "consumers get an entry once it is written to the OS (it survives a broker "
            "crash) rather than after its fsync; send receipts still wait for the sync "
            "policy"
        ),
    )
    segment_max_bytes: int = field(
        default=64 * 1024 * 1024, metadata=_help("size at which a segment file is rolled")
    )
    cache_max_bytes: int = field(
        default=32 * 1024 * 1024,
        metadata=_help(
            "bytes of recent entries the whole broker keeps in memory (every topic, "
            "persistent or not, together; each entry counts 48 bytes more than its "
            "size); past it the least recently used topics' oldest entries are read "
            "from disk again"
        ),
    )
    max_open_segment_files: int = field(
        default=512,
        metadata=_help(
            "segment files no longer written to (sealed) that the broker keeps open "
            "for reads, all topics together; the least recently read are closed past "
            "it and opened again when read (each topic's active segment stays open)"
        ),
    )
    max_message_size: int = field(
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metadata=_help(
            "largest message payload accepted, in bytes; the whole frame a consumer "
            "receives (command, metadata, payload) may be 10 KiB more, as in Pulsar"
        ),
    )
    max_messages_per_batch: int = field(
        default=100_000,
        metadata=_help(
            "most messages one entry may hold (a SEND's num_messages_in_batch, a raw "
            "entry's num_messages); an uncompressed Pulsar batch's count must also match "
            "its payload, which the broker walks (about 0.5 us a message)"
        ),
    )
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
    keepalive_interval: float = field(
        default=30.0,
        metadata=_help("seconds between pings; a peer silent for twice this is dropped"),
    )
    connection_liveness_check_timeout: float = field(
        default=5.0,
        metadata=_help(
            "seconds a connection has to answer a ping when a producer of the same name "
            "reconnects elsewhere; silent, it is dropped and the newcomer takes over"
        ),
    )
    connect_timeout: float = field(
        default=10.0,
        metadata=_help(
            "seconds a new connection has to send CONNECT; one that has not is closed; "
            "0 disables"
        ),
    )
    frame_timeout: float = field(
        default=30.0,
        metadata=_help(
            "seconds a frame has to arrive in full, counted from its first byte (a peer "
            "trickling a byte now and then gains nothing); past it the connection is "
            "closed; 0 disables"
        ),
    )
    max_connections: int = field(
        default=10000,
        metadata=_help(
            "connections the broker holds at once; past it a new one gets an error "
            "(too many connections) and is closed; 0: no limit"
        ),
    )
    max_connections_per_ip: int = field(
        default=5000,
        metadata=_help(
            "connections one client address may hold at once (as Pulsar's "
            "brokerMaxConnectionsPerIp, whose default is 0); past it a new one gets an "
            "error and is closed; half of max_connections by default, so that one address "
            "cannot take every slot, yet a proxy or a host running thousands of clients "
            "still fits; 0: no limit"
        ),
    )
    max_frame_size_before_connect: int = field(
        default=68 * 1024,
        metadata=_help(
            "bytes a frame may declare before CONNECT has completed (authentication "
            "included); a larger one closes the connection before any of it is held. "
            "Room for 64 KiB of credentials (the most the broker accepts: large OAuth2 "
            "or Kerberos tokens) and the rest of a CONNECT; 0: max_message_size's limit"
        ),
    )
    max_unauthenticated_buffer_bytes: int = field(
        default=16 * 1024 * 1024,
        metadata=_help(
            "bytes of partial frames that all connections which have not completed "
            "CONNECT (authentication included) may hold together; a read that takes "
            "the total past it closes its connection; 0: no limit"
        ),
    )
    max_pending_publish_requests_per_connection: int = field(
        default=1000,
        metadata=_help(
            "messages a connection may have sent and not yet had a receipt for (as "
            "Pulsar's maxPendingPublishRequestsPerConnection); at it the broker stops "
            "reading the connection until half have their receipts; 0: no limit"
        ),
    )
    max_message_publish_buffer_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata=_help(
            "bytes of messages read from all producers and not yet receipted (as "
            "Pulsar's maxMessagePublishBufferSizeInMB); past it each connection that "
            "publishes stops being read until the total is down to half; 0: no limit"
        ),
    )
    dispatch_max_bytes_per_round: int = field(
        default=1024 * 1024,
        metadata=_help(
            "bytes of messages one dispatch round of a subscription sends (besides its "
            "2000 entries), and bytes a connection queues before it writes them out; a "
            "connection whose write buffer is over its high-water mark (64 KiB) gets "
            "nothing until it drains, so a consumer that does not read costs at most "
            "the mark, this, and one message; 0: no byte budget"
        ),
    )
    entry_info_cache_max_entries: int = field(
        default=50_000,
        metadata=_help(
            "parsed entry metadata (about 260 bytes each) the loaded topics keep together, "
            "shared evenly between them"
        ),
    )
    delayed_delivery_max_tracked: int = field(
        default=50_000,
        metadata=_help(
            "delayed messages a subscription tracks in memory (about 170 bytes each); "
            "past it, the rest are found again in the log as the tracked ones come due"
        ),
    )
    topic_idle_unload_seconds: float = field(
        default=300.0,
        metadata=_help(
            "a topic with no producers or consumers for this long is unloaded (its files "
            "closed, its state dropped) and loaded again on next use; 0: never"
        ),
    )
    max_unused_loaded_topics: int = field(
        default=500,
        metadata=_help(
            "loaded topics with no producers or consumers kept at most (each costs about "
            "20 KB, 3 file descriptors and 72 objects that every full garbage collection "
            "visits); beyond it the longest unused are unloaded, as soon as loads pass it "
            "(and every few seconds); 0: no bound"
        ),
    )
    cursor_flush_interval: float = field(
        default=1.0, metadata=_help("seconds between writes of subscription positions")
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
    max_unacked_per_consumer: int = field(
        default=50000, metadata=_help("messages a consumer may hold unacknowledged")
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
    authentication_enabled: bool = field(
        default=False,
        metadata=_help(
            "clients must authenticate (CONNECT's auth data, the admin API's "
            "Authorization header or a TLS client certificate), as Pulsar's "
            "authenticationEnabled"
        ),
    )
    authentication_providers: str = field(
        default="",
        metadata=_help(
            "comma-separated authentication methods: token, basic, tls (Pulsar's "
            "authenticationProviders); empty: each method whose setting is given "
            "(token_secret_key/token_public_key, basic_auth_file, tls_trust_certs_file)"
        ),
    )
    authentication_refresh_check_seconds: float = field(
        default=60.0,
        metadata=_help(
            "seconds between checks of each connection's credentials: once a token has "
            "expired the broker sends AUTH_CHALLENGE to clients that support refresh "
            "(and closes the connection if no good answer comes by the next check), and "
            "closes the others"
        ),
    )
    authorization_enabled: bool = field(
        default=False,
        metadata=_help(
            "roles need permissions (superuser_roles, or produce/consume granted on a "
            "namespace or topic through the admin API); needs authentication_enabled"
        ),
    )
    superuser_roles: str = field(
        default="", metadata=_help("comma-separated roles that may do anything")
    )
    anonymous_user_role: str | None = field(
        default=None,
        metadata=_help(
            "the role of a client that presents no credentials (with authentication on); "
            "unset: such a client is refused"
        ),
    )
    authenticate_metrics_endpoint: bool = field(
        default=False,
        metadata=_help(
            "/metrics also needs credentials when authentication is on (as Pulsar's "
            "authenticateMetricsEndpoint)"
        ),
    )
    basic_auth_file: str | None = field(
        default=None,
        metadata=_help(
            "htpasswd file of the basic method (apr1-MD5, bcrypt, SHA or crypt entries): a "
            "path, file:///path or data:;base64,..."
        ),
    )
    token_secret_key: str | None = field(
        default=None,
        metadata=_help(
            "HMAC key that signs tokens (HS256): file:///path to the raw key, or "
            "data:;base64,... (as Pulsar's tokenSecretKey)"
        ),
    )
    token_public_key: str | None = field(
        default=None,
        metadata=_help(
            "public key whose private key signs tokens (RS256/ES256...): file:///path "
            "(DER or PEM) or data:;base64,... (as Pulsar's tokenPublicKey)"
        ),
    )
    token_auth_claim: str = field(
        default="sub", metadata=_help("the token claim that holds the role")
    )
    token_audience: str | None = field(
        default=None,
        metadata=_help("when set, a token's 'aud' claim must name it (this broker)"),
    )
    tls_port: int | None = field(
        default=6651,
        metadata=_help(
            "pulsar+ssl:// port, served when tls_cert_file is set; 'off' disables"
        ),
    )
    admin_tls_port: int | None = field(
        default=None,
        metadata=_help(
            "admin HTTPS port (needs tls_cert_file and the admin server); default: none"
        ),
    )
    tls_cert_file: str | None = field(
        default=None, metadata=_help("the broker's TLS certificate chain (PEM)")
    )
    tls_key_file: str | None = field(
        default=None, metadata=_help("the private key of tls_cert_file (PEM)")
    )
    tls_trust_certs_file: str | None = field(
        default=None,
        metadata=_help(
            "CA certificates (PEM) that client certificates are checked against (the tls "
            "method: the role is the certificate's CN)"
        ),
    )
    tls_require_trusted_client_cert: bool = field(
        default=False,
        metadata=_help(
            "a TLS client without a certificate signed by tls_trust_certs_file is refused "
            "in the handshake (Pulsar's tlsRequireTrustedClientCertOnConnect)"
        ),
    )
    log_level: str = field(
        default="INFO", metadata=_help("DEBUG, INFO, WARNING, ERROR or CRITICAL")
    )
    log_format: str = field(default="json", metadata=_help("'json' or 'text'"))
    ready_file: str | None = field(
        default=None,
        metadata=_help(
            "a JSON file `magnetar serve` writes once it serves (its pid and the URLs it "
            "listens on) and removes when it stops; `magnetar healthcheck` reads it"
        ),
    )

    @property
    def service_url(self) -> str:
        if self.advertised_listeners:  # the internal listener's
            listener = select(self, None)
            return listener.broker_url or listener.broker_url_tls
        return f"pulsar://{self.advertised}"

    @property
    def service_url_tls(self) -> str | None:
        """The pulsar+ssl:// address lookups give when TLS is served, else None."""
        if not self.tls_cert_file or self.tls_port is None:
            return None
        host = self.advertised.rsplit(":", 1)[0]
        return f"pulsar+ssl://{host}:{self.tls_port}"

    @property
    def advertised(self) -> str:
        if self.advertised_address:
            if ":" in self.advertised_address:
                return self.advertised_address
            return f"{self.advertised_address}:{self.port}"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{host}:{self.port}"

    def validate(self) -> None:
        """Raise ConfigError for the first setting that cannot be used.

        Ports may be 0 here (any free port, for brokers started from Python); the data
        directory is checked without creating anything.
        """
        _check_port("port", self.port)
        if self.admin_port is not None:
            _check_port("admin_port", self.admin_port)
        _check_data_dir(self.data_dir)
        _check_choice("sync_policy", self.sync_policy, ("always", "interval"))
        _check_choice("log_format", self.log_format, ("json", "text"))
        if self.log_level.upper() not in _LOG_LEVELS:
            raise ConfigError(
                "log_level", self.log_level, f"not a log level ({', '.join(_LOG_LEVELS)})"
            )
        for name in ("max_message_size", "segment_max_bytes", "max_unacked_per_consumer",
                     "max_messages_per_batch"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be positive")
        for name in (
            "keepalive_interval",
            "connection_liveness_check_timeout",
            "cursor_flush_interval",
            "retention_check_interval",
            "broker_service_compaction_monitor_interval_in_seconds",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be a positive number of seconds")
        for name in (
            "sync_interval",
            "inline_sync_max_entries",
            "inline_sync_max_seconds",
            "segment_reserve_max_bytes",
            "idle_poll_us",
            "loop_lag_probe_interval",
            "loop_stall_trace_seconds",
            "gc_freeze_after_pause",
            "cache_max_bytes",
            "default_partitions",
            "max_partitions_per_topic",
            "rpc_reply_hold_seconds",
            "rpc_max_held_replies",
            "rpc_max_held_bytes",
            "rpc_remembered_requests",
            "topic_idle_unload_seconds",
            "max_unused_loaded_topics",
            "entry_info_cache_max_entries",
            "connect_timeout",
            "frame_timeout",
            "max_connections",
            "max_connections_per_ip",
            "max_frame_size_before_connect",
            "max_unauthenticated_buffer_bytes",
            "max_pending_publish_requests_per_connection",
            "max_message_publish_buffer_bytes",
            "dispatch_max_bytes_per_round",
            "broker_service_compaction_threshold_in_bytes",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "must be >= 0")
        if self.delayed_delivery_max_tracked < 1:
            raise ConfigError(
                "delayed_delivery_max_tracked", self.delayed_delivery_max_tracked, "must be >= 1"
            )
        _check_redelivery_backoff(self)
        _check_retention_defaults(self)
        _check_security(self)
        _check_listeners(self)
        if self.max_redelivery_counts_per_subscription < 1:
            raise ConfigError(
                "max_redelivery_counts_per_subscription",
                self.max_redelivery_counts_per_subscription,
                "must be >= 1",
            )
        for name in (
            "broker_deduplication_max_number_of_producers",
            "broker_deduplication_entries_interval",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(name, getattr(self, name), "must be >= 1")
        for name in (
            "broker_deduplication_snapshot_interval_seconds",
            "broker_deduplication_producer_inactivity_timeout_minutes",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "must be >= 0")
        if self.max_open_segment_files < 1:
            raise ConfigError(
                "max_open_segment_files", self.max_open_segment_files, "must be >= 1"
            )
        if 0 < self.max_partitions_per_topic < self.default_partitions:
            raise ConfigError(
                "default_partitions",
                self.default_partitions,
                f"exceeds max_partitions_per_topic ({self.max_partitions_per_topic})",
            )


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


_AUTH_METHODS = ("token", "basic", "tls")


def csv_setting(text: str) -> list[str]:
    """The items of a comma-separated setting, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _check_security(config: BrokerConfig) -> None:
    for name in ("tls_port", "admin_tls_port"):
        if getattr(config, name) is not None:
            _check_port(name, getattr(config, name))
    if config.authentication_refresh_check_seconds <= 0:
        raise ConfigError(
            "authentication_refresh_check_seconds",
            config.authentication_refresh_check_seconds,
            "must be a positive number of seconds",
        )
    for name in csv_setting(config.authentication_providers):
        if name not in _AUTH_METHODS:
            raise ConfigError(
                "authentication_providers", config.authentication_providers,
                f"unknown method {name!r} (token, basic or tls)",
            )
    if bool(config.tls_cert_file) != bool(config.tls_key_file):
        missing = "tls_key_file" if config.tls_cert_file else "tls_cert_file"
        raise ConfigError(missing, None, "TLS needs both tls_cert_file and tls_key_file")
    if config.admin_tls_port is not None and not config.tls_cert_file:
        raise ConfigError("admin_tls_port", config.admin_tls_port, "needs tls_cert_file")
    if config.tls_require_trusted_client_cert and not config.tls_trust_certs_file:
        raise ConfigError(
            "tls_require_trusted_client_cert", True, "needs tls_trust_certs_file"
        )
    if config.authorization_enabled and not config.authentication_enabled:
        raise ConfigError(
            "authorization_enabled", True, "needs authentication_enabled (roles come from it)"
        )


def _check_redelivery_backoff(config: BrokerConfig) -> None:
    for name in ("redelivery_backoff_min_ms", "redelivery_backoff_max_ms"):
        if getattr(config, name) < 0:
            raise ConfigError(name, getattr(config, name), "must be >= 0")
    if config.redelivery_backoff_min_ms and (
        config.redelivery_backoff_max_ms < config.redelivery_backoff_min_ms
    ):
        raise ConfigError(
            "redelivery_backoff_max_ms",
            config.redelivery_backoff_max_ms,
            f"must be >= redelivery_backoff_min_ms ({config.redelivery_backoff_min_ms})",
        )
    if config.redelivery_backoff_multiplier < 1:
        raise ConfigError(
            "redelivery_backoff_multiplier", config.redelivery_backoff_multiplier, "must be >= 1"
        )


# Settings where -1 means "no limit", as in Pulsar; below it they are refused.
MINUS_ONE_IS_NO_LIMIT = (
    "default_retention_time_in_minutes",
    "default_retention_size_in_mb",
    "backlog_quota_default_limit_bytes",
    "backlog_quota_default_limit_second",
)


def _check_retention_defaults(config: BrokerConfig) -> None:
    for name in ("message_expiry_check_interval_in_seconds",
                 "backlog_quota_check_interval_in_seconds"):
        if getattr(config, name) <= 0:
            raise ConfigError(name, getattr(config, name), "must be a positive number of seconds")
    for name in MINUS_ONE_IS_NO_LIMIT:
        if getattr(config, name) < -1:
            raise ConfigError(name, getattr(config, name), "must be >= -1 (-1: no limit)")
    time_zero = config.default_retention_time_in_minutes == 0
    if time_zero != (config.default_retention_size_in_mb == 0):
        raise ConfigError(
            "default_retention_size_in_mb", config.default_retention_size_in_mb,
            "a single retention limit of 0 with the other not 0 is refused, as Pulsar "
            "refuses such a policy: use -1 to ignore one limit, 0 for both to keep nothing",
        )
    if config.ttl_duration_default_in_seconds < 0:
        raise ConfigError(
            "ttl_duration_default_in_seconds", config.ttl_duration_default_in_seconds,
            "must be >= 0 (0: off)",
        )
    _check_choice(
        "backlog_quota_default_retention_policy", config.backlog_quota_default_retention_policy,
        ("producer_request_hold", "producer_exception", "consumer_backlog_eviction"),
    )


def _check_listeners(config: BrokerConfig) -> None:
    if not config.advertised_listeners:
        if config.internal_listener_name:
            raise ConfigError(
                "internal_listener_name", config.internal_listener_name,
                "needs advertised_listeners",
            )
        return
    try:
        listeners = parse_listeners(config.advertised_listeners)
    except ValueError as exc:
        raise ConfigError("advertised_listeners", config.advertised_listeners, str(exc)) from None
    if config.advertised_address:  # as Pulsar: one or the other
        raise ConfigError(
            "advertised_address", config.advertised_address,
            "must not be set together with advertised_listeners",
        )
    if config.internal_listener_name and config.internal_listener_name not in listeners:
        raise ConfigError(
            "internal_listener_name", config.internal_listener_name,
            f"not a listener of advertised_listeners ({', '.join(listeners)})",
        )


def _check_port(name: str, port: int) -> None:
    if not 0 <= port <= 65535:
        raise ConfigError(name, port, "not a port number (1-65535)")


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(name, value, "must be " + " or ".join(repr(c) for c in choices))


def _check_data_dir(path: Path) -> None:
    """The data directory, or the nearest of its parents that exists, must be a
    directory this process may write in."""
    existing = path
    try:
        while not existing.exists() and existing != existing.parent:
            if existing.is_symlink():  # dangling: mkdir would fail on it
                raise ConfigError("data_dir", path, f"{existing} is a dangling symbolic link")
            existing = existing.parent
        is_dir = existing.is_dir()
    except OSError as exc:
        raise ConfigError("data_dir", path, exc.strerror or str(exc)) from None
    if not is_dir:
        what = "it" if existing == path else str(existing)
        raise ConfigError("data_dir", path, f"{what} is a file, not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" ({existing} is not)"
        raise ConfigError("data_dir", path, f"not writable{where}{_whose(existing)}")


def _whose(directory: Path) -> str:
    """Who this process is and who owns ``directory``: a container's user is rarely the
    owner of a bind-mounted host directory, and the fix is to chown it to that uid."""
    me = f"uid {os.geteuid()}, gid {os.getegid()}"
    try:
        owner = directory.stat()
    except OSError:
        return f" by this process ({me})"
    return (f" by this process ({me}); it is owned by uid {owner.st_uid}, gid "
            f"{owner.st_gid} with mode {owner.st_mode & 0o777:o}: chown it to "
            f"{os.geteuid()}:{os.getegid()} or make it writable for that user")


# ------------------------------------------------------------ reading values

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError("not a boolean (true/false, 1/0, yes/no, on/off)")


def _parse_int(value: Any) -> int:
    if isinstance(value, (bool, float)):
        raise ValueError("not a whole number")
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError("not a whole number") from None


def _parse_optional_port(value: Any) -> int | None:
    if str(value).strip().lower() in ("", "none", "off"):
        return None
    try:
        return _parse_int(value)
    except ValueError:
        raise ValueError("not a port number (1-65535) or 'off'") from None


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError("not a number")
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ValueError("not a number") from None
    if not math.isfinite(number):
        raise ValueError("not a finite number")
    return number


def _parse_optional_str(value: Any) -> str | None:
    text = str(value)
    return None if text.strip().lower() in ("", "none") else text


def _parse_str(value: Any) -> str:
    if isinstance(value, (dict, list)):
        raise ValueError("not a string")
    return str(value)


def _parse_path(value: Any) -> Path:
    return Path(_parse_str(value))


# The annotations of BrokerConfig's fields (strings: this module postpones them).
_PARSERS: dict[str, Callable[[Any], Any]] = {
    "bool": _parse_bool,
    "int": _parse_int,
    "int | None": _parse_optional_port,
    "float": _parse_float,
    "str": _parse_str,
    "str | None": _parse_optional_str,
    "Path": _parse_path,
}


def config_fields() -> list[Field[Any]]:
    """BrokerConfig's fields, each with a parser (checked here, so a new field with a
    new type fails at once)."""
    found = list(fields(BrokerConfig))
    for f in found:
        if str(f.type) not in _PARSERS:
            raise TypeError(f"BrokerConfig.{f.name}: no parser for {f.type}")
    return found


def default_of(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise TypeError(f"BrokerConfig.{f.name} has no default")


def parse_value(name: str, value: Any, source: str = "") -> Any:
    """``value`` (text from env or a flag, or a TOML value) as setting ``name``'s type."""
    kinds = {f.name: str(f.type) for f in config_fields()}
    if name not in kinds:
        raise ConfigError(name, value, "unknown setting", source)
    try:
        return _PARSERS[kinds[name]](value)
    except ValueError as exc:
        raise ConfigError(name, value, str(exc), source) from None


def _check_external_ports(config: BrokerConfig, sources: Mapping[str, str]) -> None:
    # Port 0 (any free port) makes sense only where the caller reads the port back.
    if config.port == 0:
        raise ConfigError("port", 0, "not a port number (1-65535)", sources.get("port", ""))
    if config.admin_port == 0:
        raise ConfigError(
            "admin_port", 0, "not a port number (1-65535) or 'off'", sources.get("admin_port", "")
        )


def load_config(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BrokerConfig:
    """Layer the sources; an unknown key in the file, an unreadable file or a bad value
    raises ConfigError (a ValueError)."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    names = [f.name for f in config_fields()]
    if config_file is not None:
        try:
            with open(config_file, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError("config", config_file, exc.strerror or str(exc)) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError("config", config_file, f"not valid TOML: {exc}") from None
        section = data.get("broker", data)
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in names:
                raise ConfigError(key, value, "unknown setting", str(config_file))
            values[name] = parse_value(name, value, str(config_file))
            sources[name] = str(config_file)
    for name in names:
        env_key = f"MAGNETAR_{name.upper()}"
        if env_key in env:
            values[name] = parse_value(name, env[env_key], env_key)
            sources[name] = env_key
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = parse_value(name, value)
            sources[name] = ""
    config = BrokerConfig(**values)
    try:
        config.validate()
    except ConfigError as exc:
        if exc.source or not sources.get(exc.setting):
            raise
        raise ConfigError(exc.setting, exc.value, exc.reason, sources[exc.setting]) from None
    _check_external_ports(config, sources)
    return config
