"""Whether the settings can be used: every check ``BrokerConfig.validate`` makes, in the
order it makes them (the first setting that cannot be used is the one reported)."""

from __future__ import annotations

import os
from pathlib import Path

from magnetar.broker.config.errors import ConfigError
from magnetar.broker.config.settings import Settings
from magnetar.broker.session.listeners import parse_listeners


def validate(config: Settings) -> None:
    """Raise ConfigError for the first setting that cannot be used.

    Ports may be 0 here (any free port, for brokers started from Python); the data
    directory is checked without creating anything.
    """
    _check_basics(config)
    _check_sizes(config)
    _check_redelivery_backoff(config)
    _check_retention_defaults(config)
    _check_security(config)
    _check_listeners(config)
    _check_counts(config)


def _check_basics(config: Settings) -> None:
    """Ports, the data directory, the choices and the log level."""
    _check_port("port", config.port)
    if config.admin_port is not None:
        _check_port("admin_port", config.admin_port)
    _check_data_dir(config.data_dir)
    _check_choice("sync_policy", config.sync_policy, ("always", "interval"))
    _check_choice("log_format", config.log_format, ("json", "text"))
    if config.log_level.upper() not in _LOG_LEVELS:
        raise ConfigError(
            "log_level", config.log_level, f"not a log level ({', '.join(_LOG_LEVELS)})"
        )


def _check_sizes(config: Settings) -> None:
    """Sizes, counts and intervals: positive, or at least 0 where 0 turns a thing off."""
    for name in ("max_message_size", "segment_max_bytes", "max_unacked_per_consumer",
                 "max_messages_per_batch"):
        if getattr(config, name) <= 0:
            raise ConfigError(name, getattr(config, name), "must be positive")
    for name in (
        "keepalive_interval",
        "connection_liveness_check_timeout",
        "cursor_flush_interval",
        "retention_check_interval",
        "broker_service_compaction_monitor_interval_in_seconds",
    ):
        if getattr(config, name) <= 0:
            raise ConfigError(name, getattr(config, name), "must be a positive number of seconds")
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
        if getattr(config, name) < 0:
            raise ConfigError(name, getattr(config, name), "must be >= 0")
    if config.delayed_delivery_max_tracked < 1:
        raise ConfigError(
            "delayed_delivery_max_tracked", config.delayed_delivery_max_tracked, "must be >= 1"
        )


def _check_counts(config: Settings) -> None:
    """Counts that must be at least 1, and partitions within their bound."""
    if config.max_redelivery_counts_per_subscription < 1:
        raise ConfigError(
            "max_redelivery_counts_per_subscription",
            config.max_redelivery_counts_per_subscription,
            "must be >= 1",
        )
    for name in (
        "broker_deduplication_max_number_of_producers",
        "broker_deduplication_entries_interval",
    ):
        if getattr(config, name) < 1:
            raise ConfigError(name, getattr(config, name), "must be >= 1")
    for name in (
        "broker_deduplication_snapshot_interval_seconds",
        "broker_deduplication_producer_inactivity_timeout_minutes",
    ):
        if getattr(config, name) < 0:
            raise ConfigError(name, getattr(config, name), "must be >= 0")
    if config.max_open_segment_files < 1:
        raise ConfigError(
            "max_open_segment_files", config.max_open_segment_files, "must be >= 1"
        )
    if 0 < config.max_partitions_per_topic < config.default_partitions:
        raise ConfigError(
            "default_partitions",
            config.default_partitions,
            f"exceeds max_partitions_per_topic ({config.max_partitions_per_topic})",
        )


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


_AUTH_METHODS = ("token", "basic", "tls")


def csv_setting(text: str) -> list[str]:
    """The items of a comma-separated setting, blanks dropped."""
    return [item.strip() for item in text.split(",") if item.strip()]


def _check_security(config: Settings) -> None:
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


def _check_redelivery_backoff(config: Settings) -> None:
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


def _check_retention_defaults(config: Settings) -> None:
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


def _check_listeners(config: Settings) -> None:
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
