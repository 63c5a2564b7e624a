"""Where and how entries are stored: the data directory, fsync policy, segment files, the read
cache and cursor flushes.

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from magnetar.broker.config.errors import setting_help as _help


@dataclass
class StorageSettings:
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
    cursor_flush_interval: float = field(
        default=1.0, metadata=_help("seconds between writes of subscription positions")
    )
