"""Opening a ledger's segment files after a clean shutdown or a crash.

Owns the rules that decide what survives:

- a *sealed* segment (any but the last) with an intact index file whose size matches
  is trusted without a scan (``segment_index.py``); its records are CRC-checked when
  read.  Without one it is scanned, and a clean scan writes the missing index;
- a bad record in a sealed segment cannot come from a crash, because a segment is
  fdatasynced before its successor is created: it raises ``CorruptLedger``;
- the *last* segment is always scanned.  A bad record below the offset known to be
  synced (the synced-offset record, ``synced_offset.py``, or the size in an index
  left by a roll cut short) is damage to acknowledged data: ``CorruptLedger``, and
  the ledger does not load until an operator calls ``truncate_at_corruption``
  (``repair.py``).  A bad record at or above it is what a crash mid-write leaves
  behind; nothing there was acknowledged (acknowledgement waits for fdatasync), so
  the tail is truncated at the last good record; so is the zero-filled space the
  ledger reserves ahead of its writes, which is no damage at all.  A last segment
  that ends cleanly below the synced offset has lost acknowledged entries but holds
  nothing more to save: that is logged as an error and the ledger loads.  Without a
  synced-offset record (a ledger from before it existed) every bad record of the
  last segment is taken for a torn tail, as it used to be;
- a gap between segments can only come from a trim (which unlinks oldest first) whose
  unlinks were partly lost in a crash, so the files before the gap are removed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path

from magnetar.storage.errors import CorruptLedger, StorageCorruption
from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.owed_syncs import OwedSyncs
from magnetar.storage.record import ScanResult
from magnetar.storage.segment import Segment, parse_segment_name, scan_file, segment_path
from magnetar.storage.segment_index import SUFFIX as INDEX_SUFFIX
from magnetar.storage.segment_index import TMP_SUFFIX as INDEX_TMP_SUFFIX
from magnetar.storage.segment_index import SegmentIndex, index_path, read_index, write_index
from magnetar.storage.synced_offset import FILE_NAME as SYNCED_FILE
from magnetar.storage.synced_offset import read_synced_offset

logger = logging.getLogger("magnetar.storage")

# No O_APPEND: the ledger writes at explicit offsets, into space it reserved ahead.
ACTIVE_FLAGS = os.O_RDWR | os.O_CLOEXEC

# Called with each segment file that load CRC-scans (tests count them).
on_scan: Callable[[Path], None] | None = None


def create_segment_file(path: Path) -> int:
    """Create a new, empty segment file and return it open for appending."""
    return os.open(path, ACTIVE_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)


def scan_segment(path: Path) -> ScanResult:
    if on_scan is not None:
        on_scan(path)
    return scan_file(path)


def repair_hint(directory: Path) -> str:
    """How an operator cuts the ledger whose segment directory is ``directory``."""
    return (f"; the ledger refuses to load: magnetar.storage.truncate_at_corruption"
            f"({str(directory.parent)!r}) cuts it before this record, dropping it and "
            "every later entry")


def _only_zeros_after(path: Path, offset: int) -> bool:
    """True if every byte of the file from ``offset`` on is zero (reserved space)."""
    with open(path, "rb") as file:
        file.seek(offset)
        while chunk := file.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
    return True


def truncate_file(path: Path, size: int) -> int:
    """Cut ``path`` to ``size`` bytes, durably; returns the number of bytes dropped."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        dropped = os.fstat(fd).st_size - size
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)
    return dropped


def _truncate_tail(path: Path, result: ScanResult) -> None:
    reserved = _only_zeros_after(path, result.valid_size)
    dropped = truncate_file(path, result.valid_size)
    if reserved:
        logger.debug("%s: released %d reserved bytes after offset %d",
                     path, dropped, result.valid_size)
        return
    logger.warning(
        "%s: torn tail (%s at offset %d): truncated, dropped %d bytes",
        path, result.problem, result.valid_size, dropped,
    )


def _load_sealed(path: Path, first: int) -> tuple[ScanResult, bool, bool]:
    """A sealed segment's records: (result, verified, index written)."""
    index = read_index(path, first)
    size = path.stat().st_size
    if isinstance(index, SegmentIndex) and index.size == size:
        return ScanResult(index.offsets, size), False, False
    if isinstance(index, SegmentIndex):
        logger.warning("%s: %d bytes but its index says %d; scanning it",
                       path, size, index.size)
    elif index != "no index":
        logger.warning("%s: %s; scanning it", index_path(path), index)
    result = scan_segment(path)
    if result.problem is not None:
        raise CorruptLedger(
            path, result.valid_size, result.problem,
            " (not the last segment, so not a torn write)" + repair_hint(path.parent),
        )
    try:
        write_index(path, first, result.offsets, result.valid_size)
    except OSError as exc:
        logger.warning("%s: cannot write its index: %r", path, exc)
        return result, True, False
    return result, True, True


def _check_last(path: Path, first: int, synced_limit: int) -> ScanResult:
    """Scan the last segment; refuse damage below ``synced_limit``, cut it above."""
    index = read_index(path, first)
    if isinstance(index, SegmentIndex):
        # A roll sealed it and wrote its index, then stopped before the successor.
        synced_limit = max(synced_limit, index.size)
    result = scan_segment(path)
    if result.problem is not None and result.valid_size < synced_limit:
        raise CorruptLedger(
            path, result.valid_size, result.problem,
            f" (below the synced offset {synced_limit}, so not a torn write)"
            + repair_hint(path.parent),
        )
    if result.problem is not None:
        _truncate_tail(path, result)
    elif result.valid_size < synced_limit:
        logger.error(
            "%s: ends at offset %d but was synced up to %d: acknowledged entries from "
            "%d on are lost", path, result.valid_size, synced_limit,
            first + len(result.offsets),
        )
    return result


def _remove_stray_indexes(directory: Path, firsts: set[int]) -> bool:
    """Remove index files without a segment, and temporary ones; True if any."""
    removed = False
    for path in directory.iterdir():
        name = path.name
        if name.endswith(INDEX_TMP_SUFFIX):
            stray = True
        elif name.endswith(INDEX_SUFFIX):
            first = parse_segment_name(name[: -len(INDEX_SUFFIX)] + ".seg")
            stray = first is not None and first not in firsts
        else:
            continue
        if stray:
            path.unlink()
            removed = True
    return removed


def _unlink_segment(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        index_path(path).unlink()
    path.unlink()


def _first_segment(directory: Path, owed: OwedSyncs | None) -> Segment:
    """Create segment 0 in ``directory``, which holds none: see ``recover_segments``."""
    path = segment_path(directory, 0)
    fd = create_segment_file(path)
    try:
        if owed is None:
            fsync_dir(directory)
        else:  # the empty synced-offset record is made when owed settles
            owed.owe_file(os.path.join(directory, SYNCED_FILE), directory)
    except BaseException:
        os.close(fd)
        raise
    return Segment(path, 0, fd)


def new_ledger(directory: Path, owed: OwedSyncs | None = None) -> list[Segment]:
    """The segments of a ledger whose topic directory the caller has just made:
    ``directory`` is created (it must not exist) with the first segment, as
    ``recover_segments`` would, without listing or reading anything."""
    os.mkdir(directory)
    return [_first_segment(directory, owed)]


def recover_segments(directory: Path, owed: OwedSyncs | None = None) -> list[Segment]:
    """Open every segment in ``directory`` (creating the first one if there is none).

    A first segment created here is durable at once, or, with ``owed``, once ``owed``
    is settled (the synced-offset record is created beside it then, empty, so that its
    first write needs no fsync of the directory of its own).

    Returns the segments oldest first; the last one is open for appending, the
    sealed ones are not open (their reads open them, see ``segment_files.py``).
    Segments are checked newest first so that a gap is found before the stale files behind it
    are loaded.
    """
    directory.mkdir(parents=True, exist_ok=True)
    found: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        first = parse_segment_name(path.name)
        if first is not None:
            found.append((first, path))
    found.sort()
    removed = _remove_stray_indexes(directory, {first for first, _ in found})
    if not found:
        return [_first_segment(directory, owed)]

    synced = read_synced_offset(directory)
    last_first = found[-1][0]
    synced_limit = 0
    if synced is not None and synced.segment_first_entry_id == last_first:
        synced_limit = synced.offset
    elif synced is not None and synced.segment_first_entry_id > last_first and synced.offset:
        logger.error(
            "%s: segment %d is missing, though it was synced up to offset %d: "
            "acknowledged entries are lost", directory, synced.segment_first_entry_id,
            synced.offset,
        )

    kept: list[tuple[int, Path, ScanResult, bool]] = []
    next_first: int | None = None  # first id of the segment after the one being checked
    for index in range(len(found) - 1, -1, -1):
        first, path = found[index]
        is_last = index == len(found) - 1
        if is_last:
            result, verified = _check_last(path, first, synced_limit), True
            if index_path(path).exists():
                index_path(path).unlink()  # stale as soon as the segment grows
                removed = True
        else:
            result, verified, wrote_index = _load_sealed(path, first)
            removed = removed or wrote_index
        end = first + len(result.offsets)
        if next_first is not None and end != next_first:
            if end > next_first:
                raise StorageCorruption(
                    f"{path}: entries {first}..{end - 1} overlap the next segment at {next_first}"
                )
            logger.warning(
                "%s: ends at entry %d but the next segment starts at %d; removing %d older "
                "segment file(s) left behind by an interrupted trim",
                path, end - 1, next_first, index + 1,
            )
            for _, stale in found[: index + 1]:
                _unlink_segment(stale)
            removed = True
            break
        if not is_last and not result.offsets:
            # An empty sealed segment holds nothing and cannot arise from a normal roll.
            _unlink_segment(path)
            removed = True
        else:
            kept.append((first, path, result, verified))
        next_first = first
    if removed:
        fsync_dir(directory)
    kept.reverse()

    segments = [
        Segment(path, first, -1, result.offsets, result.valid_size, verified)
        for first, path, result, verified in kept
    ]
    segments[-1].fd = os.open(segments[-1].path, ACTIVE_FLAGS)
    return segments
