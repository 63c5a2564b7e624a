"""The compacted ledger of a topic: the entries topic compaction kept, under their
original positions, in one file written once.

Pulsar's compactor writes the entries it keeps into a BookKeeper ledger of their own and
records the compaction horizon (the last position the compaction read) with the
``__compaction`` cursor. Here the kept entries go to a file of ``compacted/`` beside
the topic's segments (one per compaction, its name never reused), and the topic
metadata names the file in force and its horizon (``TopicMetadata.compaction``). A new
compaction writes its file as ``.tmp``, fsyncs and renames it, and only then switches
the metadata, so a crash leaves the previous file in force and an orphan that the next
load removes.

Layout::

    MAGIC (8 bytes)
    records: [u32 length][u32 CRC32C][entry]   (record.py's format), ascending positions
    index:   positions (count x int64 LE), record offsets (count x uint64 LE),
             masks (JSON: {position: retained bits} for batches of which only some
             messages were kept)
    trailer: index offset, count, masks length, CRC32C of the index, horizon, TAIL

The index is read at open, so finding the next kept position is a bisect in memory.
Reads are ``os.pread`` on the file's own descriptor; every record's CRC is checked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import sys
import uuid
from array import array
from bisect import bisect_left
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import fsync_dir
from magnetar.storage.record import HEADER, HEADER_SIZE, crc32c, encode_header

COMPACTED_DIR = "compacted"
SUFFIX = ".cled"
MAGIC = b"MGCLEDG1"
TAIL = b"MGCL"
TRAILER = struct.Struct(">QQIIq4s")  # index offset, count, masks length, index CRC, horizon
_BIG_ENDIAN = sys.byteorder == "big"
_READ_CHUNK = 1024 * 1024  # bytes per pread when the compactor walks a whole file

logger = logging.getLogger("magnetar.storage")


def compacted_dir(topic_dir: Path) -> Path:
    return Path(topic_dir) / COMPACTED_DIR


def new_file_name(generation: int) -> str:
    """A name no other compaction of the topic uses, even one still running for a
    copy of the topic that was unloaded meanwhile."""
    return f"{generation:012d}-{uuid.uuid4().hex[:12]}{SUFFIX}"


def _le(values: array[int]) -> bytes:
    if _BIG_ENDIAN:
        values = array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_le(typecode: str, raw: bytes) -> array[int]:
    values: array[int] = array(typecode)
    values.frombytes(raw)
    if _BIG_ENDIAN:
        values.byteswap()
    return values


class CompactedLedger:
    """One generation of a topic's compacted ledger, open for reads.

    ``horizon`` is the last position the compaction that wrote it read: positions at
    or below it are served from here (those not kept are gone from the compacted
    view), positions above it from the topic's own log. Reads are plain preads on
    this object's descriptor, so a worker thread may use an instance of its own.
    """

    def __init__(self, path: Path, fd: int, horizon: int, positions: array[int],
                 offsets: array[int], masks: dict[int, int]) -> None:
        self.path = path
        self.horizon = horizon
        self._fd = fd
        self._positions = positions
        self._offsets = offsets  # count + 1: the last is where the index starts
        self._masks = masks

    @classmethod
    def open(cls, path: Path) -> CompactedLedger:
        """Open a finished file and read its index (StorageCorruption if it is not one)."""
        path = Path(path)
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return cls._load(path, fd)
        except BaseException:
            os.close(fd)
            raise

    @classmethod
    def _load(cls, path: Path, fd: int) -> CompactedLedger:
        size = os.fstat(fd).st_size
        if size < len(MAGIC) + TRAILER.size or os.pread(fd, len(MAGIC), 0) != MAGIC:
            raise StorageCorruption(f"{path}: not a compacted ledger")
        trailer = os.pread(fd, TRAILER.size, size - TRAILER.size)
        index_at, count, masks_len, index_crc, horizon, tail = TRAILER.unpack(trailer)
        index_len = count * 16 + masks_len
        if tail != TAIL or index_at + index_len + TRAILER.size != size:
            raise StorageCorruption(f"{path}: the trailer of the compacted ledger is damaged")
        index = os.pread(fd, index_len, index_at)
        if len(index) != index_len or crc32c(index) != index_crc:
            raise StorageCorruption(f"{path}: the index of the compacted ledger is damaged")
        positions = _from_le("q", index[: count * 8])
        offsets = _from_le("Q", index[count * 8 : count * 16])
        offsets.append(index_at)
        try:
            masks = {int(k): int(v) for k, v in json.loads(index[count * 16 :]).items()}
        except (ValueError, AttributeError) as exc:
            raise StorageCorruption(f"{path}: the masks of the compacted ledger: {exc}") from exc
        return cls(path, fd, horizon, positions, offsets, masks)

    # ------------------------------------------------------------ queries

    @property
    def count(self) -> int:
        return len(self._positions)

    @property
    def first_position(self) -> int | None:
        return self._positions[0] if self._positions else None

    @property
    def last_position(self) -> int | None:
        return self._positions[-1] if self._positions else None

    @property
    def size_bytes(self) -> int:
        return self._offsets[-1]

    def next_at_or_after(self, position: int) -> int | None:
        """The first kept position at or after ``position``; None if there is none."""
        i = bisect_left(self._positions, position)
        return self._positions[i] if i < len(self._positions) else None

    def contains(self, position: int) -> bool:
        i = bisect_left(self._positions, position)
        return i < len(self._positions) and self._positions[i] == position

    def retained(self, position: int) -> int | None:
        """The bits of the batch messages kept at ``position``; None: all of them
        (or not a batch)."""
        return self._masks.get(position)

    def read(self, position: int) -> bytes:
        """The kept entry at ``position`` (KeyError if the compaction did not keep it)."""
        i = bisect_left(self._positions, position)
        if i >= len(self._positions) or self._positions[i] != position:
            raise KeyError(position)
        start, end = self._offsets[i], self._offsets[i + 1]
        raw = os.pread(self._fd, end - start, start)
        return self._check(raw, 0, len(raw), start)

    def entries(self) -> Iterator[tuple[int, bytes]]:
        """Every kept (position, entry) in order, a chunk of preads at a time (the
        compactor's walk over the previous generation, on its worker thread)."""
        positions, offsets = self._positions, self._offsets
        i = 0
        while i < len(positions):
            j = i + 1
            while j < len(positions) and offsets[j + 1] - offsets[i] <= _READ_CHUNK:
                j += 1
            base = offsets[i]
            blob = os.pread(self._fd, offsets[j] - base, base)
            for k in range(i, j):
                yield positions[k], self._check(blob, offsets[k] - base,
                                                offsets[k + 1] - base, offsets[k])
            i = j

    def _check(self, blob: bytes, begin: int, end: int, offset: int) -> bytes:
        if end - begin < HEADER_SIZE:
            raise StorageCorruption(f"{self.path}: short record at offset {offset}")
        length, crc = HEADER.unpack_from(blob, begin)
        data = blob[begin + HEADER_SIZE : end]
        if length != len(data) or crc32c(data) != crc:
            raise StorageCorruption(f"{self.path}: bad record at offset {offset}")
        return data

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class CompactedLedgerWriter:
    """Writes one generation: ``add`` the kept entries in position order, then
    ``finish`` (fsync, rename into place) or ``abort``. One thread only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        self._tmp.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = open(self._tmp, "wb")  # noqa: SIM115 (closed by finish/abort)
        self._file.write(MAGIC)
        self._offset = len(MAGIC)
        self._positions: array[int] = array("q")
        self._offsets: array[int] = array("Q")
        self._masks: dict[str, int] = {}

    @property
    def count(self) -> int:
        return len(self._positions)

    def add(self, position: int, entry: bytes, retained: int | None = None) -> None:
        """Keep ``entry`` at ``position`` (above every position added before);
        ``retained``: the bits of the batch messages kept, None for all of them."""
        if self._positions and position <= self._positions[-1]:
            raise ValueError(f"position {position} is not above {self._positions[-1]}")
        self._positions.append(position)
        self._offsets.append(self._offset)
        if retained is not None:
            self._masks[str(position)] = retained
        self._file.write(encode_header(entry))
        self._file.write(entry)
        self._offset += HEADER_SIZE + len(entry)

    def finish(self, horizon: int) -> CompactedLedger:
        """Write the index, make the file durable under its final name and open it."""
        masks = json.dumps(self._masks, separators=(",", ":")).encode()
        index = _le(self._positions) + _le(self._offsets) + masks
        self._file.write(index)
        self._file.write(TRAILER.pack(self._offset, len(self._positions), len(masks),
                                      crc32c(index), horizon, TAIL))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self._tmp, self.path)
        fsync_dir(self.path.parent)
        return CompactedLedger.open(self.path)

    def abort(self) -> None:
        """Drop what was written (nothing names a ``.tmp`` file)."""
        self._file.close()
        with contextlib.suppress(FileNotFoundError):
            self._tmp.unlink()


def open_in_force(topic_dir: Path, name: str | None) -> CompactedLedger | None:
    """Open the file the topic metadata names (None: never compacted) and delete the
    other files of ``compacted/``: ones replaced (the old file goes once the new one is
    in force, which a crash can interrupt) and unfinished ones. Loader thread."""
    directory = compacted_dir(topic_dir)
    if not directory.is_dir():
        if name:
            logger.error("%s: missing, yet the topic metadata names %s", directory, name)
        return None
    removed = False
    for entry in directory.iterdir():
        if entry.name != name:
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed = True
    if removed:
        fsync_dir(directory)
    if not name:
        return None
    try:
        return CompactedLedger.open(directory / name)
    except (StorageCorruption, FileNotFoundError) as exc:
        # Compacted readers then read the log itself: slower, and what retention
        # removed is gone for them, but the topic stays available.
        logger.error("%s: the compacted ledger cannot be used: %s", topic_dir, exc)
        return None


def delete_file(path: Path) -> None:
    """Remove a compacted ledger no longer in force (a worker thread's job)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        fsync_dir(path.parent)
