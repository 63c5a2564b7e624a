"""The record format of a segment file, and the scan that validates it.

A record is an 8-byte header ``struct ">II"`` = (length of data, CRC32C of data)
followed by the data.  The scan walks a file record by record and stops at the first
record that is short or fails its CRC; what to do about that (truncate a torn tail, or
refuse a damaged older segment) is the caller's decision.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import crc32c as _crc32c

HEADER = struct.Struct(">II")
HEADER_SIZE = HEADER.size
MAX_DATA_SIZE = 0xFFFFFFFF

crc32c = _crc32c.crc32c


def encode_header(data: bytes | bytearray | memoryview) -> bytes:
    return HEADER.pack(len(data), crc32c(data))


@dataclass(slots=True)
class ScanResult:
    """Where each good record starts, where the good part ends, and why it ends."""

    offsets: array[int]
    valid_size: int
    problem: str | None = None  # None when the whole file consists of good records


def scan_records(buf: bytes | bytearray | memoryview) -> ScanResult:
    """Validate the records in ``buf`` (a whole segment file) and index them.

    Empty records are rejected: they are never written (``append`` refuses empty
    data), and a zero-filled tail, which some file systems leave after a crash, would
    otherwise read as a run of valid empty records because CRC32C of b"" is 0.
    """
    view = memoryview(buf)
    size = len(view)
    offsets: array[int] = array("Q")
    unpack_from = HEADER.unpack_from
    pos = 0
    problem: str | None = None
    while pos < size:
        if size - pos < HEADER_SIZE:
            problem = f"short header ({size - pos} bytes)"
            break
        length, crc = unpack_from(view, pos)
        end = pos + HEADER_SIZE + length
        if length == 0:
            problem = "empty record"
            break
        if end > size:
            problem = f"short data ({size - pos - HEADER_SIZE} of {length} bytes)"
            break
        if crc32c(view[pos + HEADER_SIZE : end]) != crc:
            problem = "CRC mismatch"
            break
        offsets.append(pos)
        pos = end
    view.release()
    return ScanResult(offsets, pos, problem)
