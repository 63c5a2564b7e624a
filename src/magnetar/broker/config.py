"""Broker settings, and how they are read: defaults < TOML file < MAGNETAR_* env < flags."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from magnetar.protocol.frames import DEFAULT_MAX_MESSAGE_SIZE


@dataclass
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 6650
    advertised_address: str | None = None  # host[:port] clients are told to connect to
    admin_port: int | None = 8080  # None or 0 disables the admin HTTP server (0 = any free port)
    admin_host: str = "127.0.0.1"
    data_dir: Path = field(default_factory=lambda: Path("./data"))
    sync_policy: str = "always"  # "always" (fsync + group commit) or "interval"
    sync_interval: float = 0.05
    # "always": fsync groups of at most this many entries on the loop thread, while
    # fsyncs take under inline_sync_max_seconds (moving average) and no other topic
    # has a write due in the same loop round; else on worker threads.
    inline_sync_max_entries: int = 4
    inline_sync_max_seconds: float = 0.001
    # Zeros reserved ahead of the writes in segment files (fallocate), so that an
    # fsync has no file size to commit; 0 disables.
    segment_reserve_max_bytes: int = 4 * 1024 * 1024
    # Microseconds the event loop keeps polling after input before it sleeps (see
    # broker/idle_poll.py): lower latency where waking a CPU is slow, for some CPU
    # while traffic trickles. 0 disables; an in-process (thread) broker uses 0,
    # as it would compete with its host for the GIL.
    idle_poll_us: int = 200
    # Consumers get an entry once it is written to the OS (it survives a broker crash)
    # rather than after its fsync; send receipts still wait for the sync policy.
    dispatch_before_sync: bool = True
    segment_max_bytes: int = 64 * 1024 * 1024
    cache_max_bytes: int = 128 * 1024 * 1024
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    allow_auto_topic_creation: bool = True
    default_partitions: int = 0  # >0: auto-created topics are partitioned with this count
    # A partitioned topic may have at most this many partitions (each is a topic with
    # open files); a typo like 100000 is refused instead of stalling the broker. 0: no cap.
    max_partitions_per_topic: int = 1000
    keepalive_interval: float = 30.0  # seconds between pings; a peer silent for 2x is dropped
    # A producer that reconnects under a name still held by another connection: that
    # connection must answer a ping within this many seconds, or it is dropped.
    connection_liveness_check_timeout: float = 5.0
    cursor_flush_interval: float = 1.0
    retention_check_interval: float = 10.0
    max_unacked_per_consumer: int = 50000
    rpc_reply_hold_seconds: float = 10.0  # PIP-371 replies wait this long for a requester
    rpc_max_held_replies: int = 10000  # ... and at most this many wait at once
    rpc_max_held_bytes: int = 32 * 1024 * 1024  # ... holding at most this many body bytes
    log_level: str = "INFO"
    log_format: str = "json"  # "json" or "text"

    @property
    def service_url(self) -> str:
        return f"pulsar://{self.advertised}"

    @property
    def advertised(self) -> str:
        if self.advertised_address:
            if ":" in self.advertised_address:
                return self.advertised_address
            return f"{self.advertised_address}:{self.port}"
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"{host}:{self.port}"

    def validate(self) -> None:
        if self.sync_policy not in ("always", "interval"):
            raise ValueError(
                f"sync_policy must be 'always' or 'interval', not {self.sync_policy!r}"
            )
        if self.max_message_size <= 0:
            raise ValueError("max_message_size must be positive")
        if self.default_partitions < 0:
            raise ValueError("default_partitions must be >= 0")
        if self.max_partitions_per_topic < 0:
            raise ValueError("max_partitions_per_topic must be >= 0")
        if 0 < self.max_partitions_per_topic < self.default_partitions:
            raise ValueError("default_partitions must not exceed max_partitions_per_topic")
        if self.idle_poll_us < 0:
            raise ValueError("idle_poll_us must be >= 0")


def _coerce(name: str, kind: Any, value: Any) -> Any:
    text = str(value)
    kind_s = str(kind)
    if "bool" in kind_s:
        if isinstance(value, bool):
            return value
        return text.strip().lower() in ("1", "true", "yes", "on")
    if "Path" in kind_s:
        return Path(text)
    if "int" in kind_s and "None" in kind_s:
        return None if text.lower() in ("", "none", "off") else int(text)
    if "int" in kind_s:
        return int(text)
    if "float" in kind_s:
        return float(text)
    if "None" in kind_s and text.lower() in ("", "none"):
        return None
    return text


def load_config(
    config_file: Path | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> BrokerConfig:
    """Layer the sources; unknown keys in the file or bad values raise ValueError."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    kinds = {f.name: f.type for f in fields(BrokerConfig)}
    if config_file is not None:
        with open(config_file, "rb") as fh:
            data = tomllib.load(fh)
        section = data.get("broker", data)
        for key, value in section.items():
            name = key.replace("-", "_")
            if name not in kinds:
                raise ValueError(f"{config_file}: unknown setting {key!r}")
            values[name] = _coerce(name, kinds[name], value)
    for name, kind in kinds.items():
        env_key = f"MAGNETAR_{name.upper()}"
        if env_key in env:
            try:
                values[name] = _coerce(name, kind, env[env_key])
            except ValueError as exc:
                raise ValueError(f"{env_key}: {exc}") from None
    for name, value in (overrides or {}).items():
        if value is not None:
            values[name] = _coerce(name, kinds[name], value)
    config = BrokerConfig(**values)
    config.validate()
    return config
