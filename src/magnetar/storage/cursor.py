"""ManagedCursor: the durable position of one subscription on a ledger.

A cursor is the mark-delete position (every entry id up to it is acknowledged) plus
the ids acknowledged individually above it, kept as ranges.  It is persisted as one
small JSON file, replaced atomically, whenever the broker asks; between two flushes
an acknowledgement can be lost, which means redelivery, never loss.

Persisting comes in two halves so that the file work can leave the event loop:
``snapshot`` (on the loop, cheap: the state encoded, with the version it has) and
``write`` (any thread: the atomic replace with its fsyncs).  Every change bumps the
version; a cursor is clean when the file holds its current version, so an ack that
arrives while a snapshot is being written leaves it dirty for the next flush.  A
per-cursor lock orders the writes, and a snapshot older than what the file already
holds is not written (a synchronous ``flush`` may overtake a worker's write).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write
from magnetar.storage.ranges import RangeSet

FORMAT_VERSION = 1
_SUFFIX = ".json"


def cursor_path(directory: Path, name: str) -> Path:
    return directory / (quote(name, safe="") + _SUFFIX)


def cursor_name_from_file(filename: str) -> str | None:
    """The cursor name stored in ``filename``, or None if it is not a cursor file."""
    if not filename.endswith(_SUFFIX):
        return None
    return unquote(filename[: -len(_SUFFIX)])


@dataclass(frozen=True, slots=True)
class CursorSnapshot:
    """A cursor's state as it was when taken, encoded for its file."""

    cursor: ManagedCursor
    version: int
    data: bytes


class ManagedCursor:
    """Position of one durable subscription.

    Changing ``properties`` in place does not mark the cursor dirty: use
    ``set_properties`` (or set ``dirty``) so the change is persisted.  Loop thread
    only, but for ``write`` (any thread).
    """

    def __init__(self, name: str, path: Path, mark_delete: int = -1,
                 properties: dict[str, str] | None = None) -> None:
        self.name = name
        self.path = path
        self.mark_delete = max(mark_delete, -1)
        self.properties: dict[str, str] = dict(properties or {})
        self._version = 0  # bumped by every change
        self._written_version = 0  # the version the file holds (set under _write_lock)
        self._write_lock = threading.Lock()
        self._discarded = False  # deleted: no more writes (under _write_lock)
        self._acked = RangeSet()  # individually acked ids, all > mark_delete

    @property
    def dirty(self) -> bool:
        """Changed since the file was last written."""
        return self._version != self._written_version

    @dirty.setter
    def dirty(self, value: bool) -> None:
        if value:
            self._version += 1
        else:  # the caller vouches that the file holds the current state
            self._written_version = self._version

    def __repr__(self) -> str:
        return (f"<ManagedCursor {self.name!r} mark_delete={self.mark_delete} "
                f"ranges={len(self._acked)}{' dirty' if self.dirty else ''}>")

    # ------------------------------------------------------------------- acks

    def ack(self, entry_ids: Iterable[int]) -> None:
        """Acknowledge entries individually; mark_delete advances over contiguous runs."""
        acked = self._acked
        mark_delete = self.mark_delete
        changed = False
        for entry_id in entry_ids:
            if entry_id <= mark_delete:
                continue
            if entry_id == mark_delete + 1:
                # The in-order case: move mark_delete, and over any run it now touches.
                mark_delete = entry_id
                end = acked.pop_range_starting_at(entry_id + 1)
                if end is not None:
                    mark_delete = end
                changed = True
            elif acked.add(entry_id):
                changed = True
        if changed:
            self.mark_delete = mark_delete
            self.dirty = True

    def ack_cumulative(self, entry_id: int) -> None:
        """Acknowledge every entry up to ``entry_id`` (no-op if already acknowledged)."""
        if entry_id <= self.mark_delete:
            return
        self._acked.discard_through(entry_id)
        end = self._acked.pop_range_starting_at(entry_id + 1)
        self.mark_delete = entry_id if end is None else end
        self.dirty = True

    def is_acked(self, entry_id: int) -> bool:
        return entry_id <= self.mark_delete or entry_id in self._acked

    def individually_acked_ranges(self) -> list[tuple[int, int]]:
        """Inclusive ranges of ids acknowledged above mark_delete, in order."""
        return self._acked.ranges()

    def acked_count_above_mark_delete(self) -> int:
        return self._acked.count

    def reset(self, mark_delete: int) -> None:
        """Seek: set mark_delete (backwards too) and forget the individual acks."""
        self.mark_delete = max(mark_delete, -1)
        self._acked.clear()
        self.dirty = True

    def set_properties(self, properties: dict[str, str]) -> None:
        self.properties = dict(properties)
        self.dirty = True

    # ------------------------------------------------------------ persistence

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "name": self.name,
            "mark_delete": self.mark_delete,
            "acked": [[start, end] for start, end in self._acked.ranges()],
            "properties": self.properties,
        }

    def snapshot(self) -> CursorSnapshot:
        """The current state, ready for ``write`` (loop thread; cheap)."""
        data = json.dumps(self.to_json(), separators=(",", ":")).encode()
        return CursorSnapshot(self, self._version, data)

    def write(self, snapshot: CursorSnapshot) -> bool:
        """Persist ``snapshot`` (tmp file, fsync, rename, fsync dir); any thread.

        Returns False without writing if the file already holds that version or a
        later one, or if the cursor was deleted.  The cursor is clean afterwards only
        if nothing changed since the snapshot was taken.  OSError if the write fails
        (the cursor stays dirty).
        """
        with self._write_lock:
            if self._discarded or snapshot.version <= self._written_version:
                return False
            atomic_write(self.path, snapshot.data)
            self._written_version = snapshot.version
            return True

    def flush(self) -> None:
        """Persist the cursor now, on the calling thread, if it changed."""
        if self.dirty:
            self.write(self.snapshot())

    def discard(self) -> None:
        """The cursor is being deleted: wait for a write in progress, refuse later ones."""
        with self._write_lock:
            self._discarded = True

    @classmethod
    def load(cls, path: Path) -> ManagedCursor:
        """Read a persisted cursor; StorageCorruption if the file is not one."""
        try:
            doc = json.loads(path.read_bytes())
            name = doc["name"]
            mark_delete = doc["mark_delete"]
            ranges = doc.get("acked", [])
            properties = doc.get("properties", {})
            if not (isinstance(name, str) and isinstance(mark_delete, int)
                    and isinstance(properties, dict)):
                raise ValueError("unexpected field types")
            cursor = cls(name, path, mark_delete, {str(k): str(v) for k, v in properties.items()})
            for start, end in ranges:
                cursor._acked.add_range(max(int(start), cursor.mark_delete + 1), int(end))
            end = cursor._acked.pop_range_starting_at(cursor.mark_delete + 1)
            if end is not None:  # a file written by hand, or by an older version
                cursor.mark_delete = end
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageCorruption(f"{path}: not a valid cursor file: {exc}") from exc
        return cursor
