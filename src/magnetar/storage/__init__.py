"""magnetar's storage layer: per-topic append-only ledgers, durable cursors, metadata.

Pure Python on files: asyncio for the write pipeline, worker threads for fdatasync,
and nothing about sockets or the Pulsar protocol.  Entries are opaque bytes (the
broker stores them exactly as they came off the wire).

- ``ManagedLedger`` (ledger.py): segment files with CRC-checked records, group
  commit, a tail cache, trimming, and the topic's cursors.
- ``CacheBudget`` (cache.py): the one byte bound the tail caches of a store's
  ledgers share, evicting the least recently used ledger's oldest entries first.
- ``SegmentFiles`` (segment_files.py): the bound on the open files of a store's
  sealed segments, closing the least recently read ones.
- ``ManagedCursor`` (cursor.py): a subscription's mark-delete position and
  individually acknowledged ranges.
- ``TopicMetadata`` (metadata.py): ledger id, topic epoch, properties, schemas.
- ``Store`` (store.py): where everything lives under the data directory, and the
  partitioned-topic registry.
- ``truncate_at_corruption`` (repair.py): the operator's explicit cut of a ledger
  that refused to load with ``CorruptLedger``.
"""

from magnetar.storage.cache import CacheBudget
from magnetar.storage.cursor import ManagedCursor
from magnetar.storage.errors import (
    CorruptLedger,
    EntryNotFound,
    LedgerClosed,
    LedgerExists,
    LedgerFailed,
    StorageCorruption,
    StorageError,
)
from magnetar.storage.ledger import LedgerConfig, LedgerStats, ManagedLedger
from magnetar.storage.metadata import SchemaEntry, TopicMetadata
from magnetar.storage.repair import Truncation, truncate_at_corruption
from magnetar.storage.segment_files import SegmentFiles
from magnetar.storage.store import Store

__all__ = [
    "CacheBudget",
    "CorruptLedger",
    "EntryNotFound",
    "LedgerClosed",
    "LedgerConfig",
    "LedgerExists",
    "LedgerFailed",
    "LedgerStats",
    "ManagedCursor",
    "ManagedLedger",
    "SchemaEntry",
    "SegmentFiles",
    "StorageCorruption",
    "StorageError",
    "Store",
    "TopicMetadata",
    "Truncation",
    "truncate_at_corruption",
]
