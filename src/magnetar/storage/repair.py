"""Explicit repair of a ledger that recovery refused: cut it before its first bad record.

Recovery cuts a torn tail by itself, but refuses a bad record that cannot be one
(``CorruptLedger``: below the synced offset, or in a sealed segment), because cutting
there silently drops acknowledged entries.  ``truncate_at_corruption`` is the
operator's decision to do it anyway: it CRC-scans every segment, oldest first, and at
the first bad record truncates that segment and removes every later one, so the
ledger loads with all the entries before the bad record.  Their ids are handed out
again; cursors that acknowledged past the new end are rewound when the topic loads.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.ledger import _lock_directory
from magnetar.storage.recovery import scan_segment, truncate_file
from magnetar.storage.segment import parse_segment_name
from magnetar.storage.segment_index import index_path
from magnetar.storage.synced_offset import remove_synced_offset

logger = logging.getLogger("magnetar.storage")


@dataclass(frozen=True)
class Truncation:
    """Where the ledger was (or, in a dry run, would be) cut, and what that drops."""

    path: Path  # the segment file cut
    offset: int  # of the first bad record in it: the file's new size
    reason: str  # what is wrong with that record
    first_lost_entry_id: int  # the id the bad record had; appends continue from it
    dropped_bytes: int  # of that segment, from the bad record on
    removed_segments: list[Path] = field(default_factory=list)  # later segments


def truncate_at_corruption(directory: Path, *, dry_run: bool = False) -> Truncation | None:
    """Cut the ledger in ``directory`` (as given to ``ManagedLedger.open``) before its
    first bad record; None if every record is good.

    The ledger must not be open (its directory lock is taken, StorageError if held);
    FileNotFoundError if ``directory`` holds no ledger.  ``dry_run``: only say what
    would be cut.
    """
    directory = Path(directory)
    segment_dir = directory / "ledger"
    if not segment_dir.is_dir():
        raise FileNotFoundError(f"{directory}: not a ledger directory (no {segment_dir.name}/)")
    lock_fd = _lock_directory(directory)
    try:
        found: list[tuple[int, Path]] = []
        for path in segment_dir.iterdir():
            first = parse_segment_name(path.name)
            if first is not None:
                found.append((first, path))
        found.sort()
        for position, (first, path) in enumerate(found):
            result = scan_segment(path)
            if result.problem is None:
                continue
            later = [later_path for _, later_path in found[position + 1 :]]
            cut = Truncation(path, result.valid_size, result.problem,
                             first + len(result.offsets),
                             path.stat().st_size - result.valid_size, later)
            if not dry_run:
                _cut(segment_dir, cut)
            return cut
        return None
    finally:
        os.close(lock_fd)


def _cut(segment_dir: Path, cut: Truncation) -> None:
    logger.warning(
        "%s: cut at offset %d (%s) by request: entries from %d on are dropped "
        "(%d bytes of this segment, %d later segment file(s))",
        cut.path, cut.offset, cut.reason, cut.first_lost_entry_id, cut.dropped_bytes,
        len(cut.removed_segments),
    )
    # First the synced-offset record, which would name bytes that are gone (a ledger
    # without one loads as before it existed), and the cut segment's index (a repair
    # cut short leaves the segment to be scanned, and refused, at the next load); then
    # the later segments, newest first (a crash part-way leaves a shorter ledger, never
    # a gap); then the cut itself.
    remove_synced_offset(segment_dir)
    index_path(cut.path).unlink(missing_ok=True)
    fsync_dir(segment_dir)
    for path in reversed(cut.removed_segments):
        index_path(path).unlink(missing_ok=True)
        path.unlink()
    fsync_dir(segment_dir)
    truncate_file(cut.path, cut.offset)
