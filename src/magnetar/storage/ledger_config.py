"""The knobs and the counters of a ledger: ``LedgerConfig`` and ``LedgerStats``.

Shared by the facade (``ledger.py``), the write pipeline and the segment set, so it
lives apart from all three.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.storage.record import HEADER_SIZE
from magnetar.storage.write_latency import WriteLatency

SYNC_POLICIES = ("always", "interval")


@dataclass
class LedgerConfig:
    segment_max_bytes: int = 64 * 1024 * 1024  # roll to a new segment file beyond this
    # Bound of the cache of recent entries: of the store's shared budget (every
    # ledger of the store together), or of a ledger opened on its own.
    cache_max_bytes: int = 32 * 1024 * 1024
    # "always": fdatasync (group commit) before on_durable;
    # "interval": on_durable right after write(), fdatasync every sync_interval seconds.
    sync_policy: str = "always"
    sync_interval: float = 0.05
    # "always" only: a group of at most this many entries, with no sync running, is
    # fdatasynced on the loop thread itself, right after on_written has put it on the
    # wire for readers, while syncs are fast (their moving average is under
    # inline_sync_max_seconds) and no other ledger sharing the SyncLoad has a write
    # due in the same loop round. A lone quiet ledger on a fast disk saves the thread
    # hand-offs, whose wake-ups and GIL transfers cost more than the loop loses while
    # it waits; a busy ledger (larger groups), ledgers busy together (their syncs
    # overlap on workers), or a slow disk keep the loop free. 0 disables.
    inline_sync_max_entries: int = 4
    inline_sync_max_seconds: float = 0.001
    # Reserve segment space ahead of the writes (zeros, with fallocate) in steps that
    # double from 64 KiB up to this, so an fdatasync never has a file size to commit
    # as well. 0 disables.
    reserve_max_bytes: int = 4 * 1024 * 1024
    # After a segment fdatasync, record how far the segment is synced (the file
    # ``synced``, with an fdatasync of its own on a worker, off the commit path) at
    # most this often, and on close.  Recovery refuses a bad record below the
    # recorded offset instead of cutting it as a torn tail; the record lags by up to
    # this much.  0: after every sync that is not already being recorded.
    synced_record_interval: float = 1.0
    # Sealed segments that may keep their file open for reads at once: of the store
    # (every ledger of it together), or of a ledger opened on its own. The least
    # recently read ones close their file beyond it and open it again on a read.
    max_open_segment_files: int = 512

    def __post_init__(self) -> None:
        if self.sync_policy not in SYNC_POLICIES:
            raise ValueError(
                f"sync_policy must be one of {SYNC_POLICIES}, not {self.sync_policy!r}"
            )
        if self.segment_max_bytes <= HEADER_SIZE:
            raise ValueError("segment_max_bytes is too small")
        if self.cache_max_bytes < 0:
            raise ValueError("cache_max_bytes must not be negative")
        if not self.sync_interval > 0:
            raise ValueError("sync_interval must be positive")
        if self.reserve_max_bytes < 0:
            raise ValueError("reserve_max_bytes must not be negative")
        if not self.synced_record_interval >= 0:
            raise ValueError("synced_record_interval must not be negative")
        if self.max_open_segment_files < 1:
            raise ValueError("max_open_segment_files must be at least 1")


@dataclass
class LedgerStats:
    """Counters for metrics and tests (system calls are what group commit saves)."""

    writes: int = 0  # writev calls on segment files
    bytes_written: int = 0
    syncs: int = 0  # fdatasync calls, including the one that seals a segment on roll
    inline_syncs: int = 0  # of which made on the loop thread (small groups)
    rolls: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    # append to durable, per entry (observed per write batch; see write_latency.py)
    write_latency: WriteLatency = field(default_factory=WriteLatency)
