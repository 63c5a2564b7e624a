"""Opening a ledger's segment files after a clean shutdown or a crash.

Owns the rules that decide what survives:

- a torn or corrupt tail in the *last* segment is what a crash mid-write leaves
  behind; nothing in it was acknowledged (acknowledgement waits for fdatasync), so it
  is truncated at the last good record; so is the zero-filled space the ledger
  reserves ahead of its writes, which is no damage at all;
- a bad record in an *earlier* segment cannot come from a crash, because a segment is
  fdatasynced before its successor is created; it is real damage and raises
  ``StorageCorruption``;
- a gap between segments can only come from a trim (which unlinks oldest first) whose
  unlinks were partly lost in a crash, so the files before the gap are removed.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.record import ScanResult
from magnetar.storage.segment import Segment, parse_segment_name, scan_file, segment_path

logger = logging.getLogger("magnetar.storage")

# No O_APPEND: the ledger writes at explicit offsets, into space it reserved ahead.
ACTIVE_FLAGS = os.O_RDWR | os.O_CLOEXEC
SEALED_FLAGS = os.O_RDONLY | os.O_CLOEXEC


def create_segment_file(path: Path) -> int:
    """Create a new, empty segment file and return it open for appending."""
    return os.open(path, ACTIVE_FLAGS | os.O_CREAT | os.O_EXCL, 0o644)


def _only_zeros_after(path: Path, offset: int) -> bool:
    """True if every byte of the file from ``offset`` on is zero (reserved space)."""
    with open(path, "rb") as file:
        file.seek(offset)
        while chunk := file.read(1 << 20):
            if chunk.count(0) != len(chunk):
                return False
    return True


def _truncate_tail(path: Path, result: ScanResult) -> None:
    reserved = _only_zeros_after(path, result.valid_size)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        dropped = os.fstat(fd).st_size - result.valid_size
        os.ftruncate(fd, result.valid_size)
        os.fsync(fd)
    finally:
        os.close(fd)
    if reserved:
        logger.debug("%s: released %d reserved bytes after offset %d",
                     path, dropped, result.valid_size)
        return
    logger.warning(
        "%s: torn tail (%s at offset %d): truncated, dropped %d bytes",
        path, result.problem, result.valid_size, dropped,
    )


def recover_segments(directory: Path) -> list[Segment]:
    """Open every segment in ``directory`` (creating the first one if there is none).

    Returns the segments oldest first; the last one is open for appending.  Segments
    are checked newest first so that a gap is found before the stale files behind it
    are scanned.
    """
    directory.mkdir(parents=True, exist_ok=True)
    found: list[tuple[int, Path]] = []
    for path in directory.iterdir():
        first = parse_segment_name(path.name)
        if first is not None:
            found.append((first, path))
    found.sort()
    if not found:
        path = segment_path(directory, 0)
        fd = create_segment_file(path)
        fsync_dir(directory)
        return [Segment(path, 0, fd)]

    kept: list[tuple[int, Path, ScanResult]] = []
    next_first: int | None = None  # first id of the segment after the one being checked
    removed = False
    for index in range(len(found) - 1, -1, -1):
        first, path = found[index]
        result = scan_file(path)
        is_last = index == len(found) - 1
        if result.problem is not None:
            if not is_last:
                raise StorageCorruption(
                    f"{path}: {result.problem} at offset {result.valid_size} "
                    "(not the last segment, so not a torn write)"
                )
            _truncate_tail(path, result)
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
                stale.unlink()
            removed = True
            break
        if not is_last and not result.offsets:
            # An empty sealed segment holds nothing and cannot arise from a normal roll.
            path.unlink()
            removed = True
        else:
            kept.append((first, path, result))
        next_first = first
    if removed:
        fsync_dir(directory)
    kept.reverse()

    segments: list[Segment] = []
    try:
        for position, (first, path, result) in enumerate(kept):
            flags = ACTIVE_FLAGS if position == len(kept) - 1 else SEALED_FLAGS
            fd = os.open(path, flags)
            segments.append(Segment(path, first, fd, result.offsets, result.valid_size))
    except BaseException:
        for segment in segments:
            segment.close()
        raise
    return segments
