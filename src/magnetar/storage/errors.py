"""Exceptions raised by the storage layer.

``EntryNotFound`` is a ``KeyError`` because it answers "no such key" (an entry id that
was trimmed or is not readable yet); every other failure derives from ``StorageError``.
"""

from __future__ import annotations

from pathlib import Path


class StorageError(Exception):
    """Base class for storage failures other than a missing entry."""


class StorageCorruption(StorageError):
    """Data on disk is damaged in a way recovery must not paper over."""


class EntryNotFound(KeyError):
    """The entry id was trimmed, or is beyond the last confirmed entry."""


class LedgerExists(Exception):
    """``ManagedLedger.open(..., only_new=True)`` found the ledger's directory there
    already: nothing was opened (the caller recovers it the usual way)."""


class LedgerClosed(StorageError):
    """The ledger was closed or deleted; it accepts no more work."""


class LedgerFailed(StorageError):
    """A write or fsync failed; the ledger refuses appends from then on.

    After a failed fsync the kernel may have dropped dirty pages, so nothing written
    since the last good sync can be trusted: the only safe answer is to stop.
    """


class CorruptLedger(StorageCorruption):
    """A record of a ledger is bad where it cannot be a torn write: below the offset
    known to be synced, in a sealed segment, or found bad when read.

    The ledger refuses to load rather than cut everything after the record;
    ``magnetar.storage.truncate_at_corruption(directory)`` cuts it explicitly.
    """

    def __init__(self, path: Path, offset: int, reason: str, detail: str = "") -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(f"{path}: {reason} at offset {offset}{detail}")
