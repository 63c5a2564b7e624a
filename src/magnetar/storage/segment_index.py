"""The index file of a sealed segment, so that load trusts the segment without a scan.

``<first id>.idx`` beside ``<first id>.seg`` holds a header ``struct "<4sIQQQI"`` =
(magic, version, first entry id, entry count, segment size in bytes, CRC32C of the
header fields before it and of the offsets) followed by the offset of every record,
8 bytes each, little-endian.  The roll writes it after the segment's fdatasync and
before the successor is created; at load an intact index whose size matches the
segment file stands in for the CRC scan, and the segment's records are CRC-checked
when read instead.  A missing or damaged index costs only a scan (and recovery
writes a new one after a clean scan).
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from dataclasses import dataclass
from pathlib import Path

from magnetar.storage.fsutil import fdatasync
from magnetar.storage.record import crc32c

SUFFIX = ".idx"
TMP_SUFFIX = ".idx.tmp"
_HEADER = struct.Struct("<4sIQQQI")
_MAGIC = b"MGIX"
_VERSION = 1


def index_path(segment: Path) -> Path:
    return segment.with_suffix(SUFFIX)


def _offsets_bytes(offsets: array[int]) -> bytes:
    if sys.byteorder == "little":
        return offsets.tobytes()
    swapped = array("Q", offsets)  # pragma: no cover - big-endian hosts
    swapped.byteswap()
    return swapped.tobytes()


def write_index(segment: Path, first_entry_id: int, offsets: array[int], size: int) -> None:
    """Write the index of a sealed segment: a temporary file, fdatasynced, then
    renamed over the final name.  The caller fsyncs the directory."""
    body = _offsets_bytes(offsets)
    fields = _HEADER.pack(_MAGIC, _VERSION, first_entry_id, len(offsets), size, 0)[:-4]
    crc = crc32c(body, crc32c(fields))
    tmp = segment.with_suffix(TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, fields + crc.to_bytes(4, "little") + body)
        fdatasync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, index_path(segment))


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    offsets: array[int]
    size: int  # of the segment file when it was sealed


def read_index(segment: Path, first_entry_id: int) -> SegmentIndex | str:
    """The index of ``segment``, or why there is no usable one."""
    try:
        raw = index_path(segment).read_bytes()
    except FileNotFoundError:
        return "no index"
    if len(raw) < _HEADER.size:
        return "index too short"
    magic, version, first, count, size, crc = _HEADER.unpack_from(raw)
    body = memoryview(raw)[_HEADER.size :]
    if magic != _MAGIC or version != _VERSION:
        return "not an index file"
    if len(body) != 8 * count or crc32c(body, crc32c(raw[: _HEADER.size - 4])) != crc:
        return "index checksum mismatch"
    if first != first_entry_id:
        return f"index is for entry {first}"
    offsets: array[int] = array("Q")
    offsets.frombytes(body)
    if sys.byteorder != "little":  # pragma: no cover - big-endian hosts
        offsets.byteswap()
    if count and (offsets[0] != 0 or offsets[-1] >= size):
        return "index offsets out of range"
    return SegmentIndex(offsets, size)
