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

The file also keeps the subscription's redelivery counts (``RedeliveryCounts``), so
a broker restart does not reset a poison message's count: at most a bounded number
of them, the least recently counted dropped first.  Files written before they were
kept have no ``redelivery_counts`` key and load with none.

It keeps as well the messages still unacked of partly acked batches
(``BatchAckSets``, PIP-54 batch-index acks); files without ``batch_acks`` load with none.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from magnetar.storage.batch_ack_sets import BatchAckSets
from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write
from magnetar.storage.ranges import RangeSet

FORMAT_VERSION = 1
_SUFFIX = ".json"
# Redelivery counts one subscription keeps (memory, and its cursor file: about 16
# bytes of JSON each); the broker's max_redelivery_counts_per_subscription.
DEFAULT_MAX_REDELIVERY_COUNTS = 10_000


def cursor_path(directory: Path, name: str) -> Path:
    return directory / (quote(name, safe="") + _SUFFIX)


def cursor_name_from_file(filename: str) -> str | None:
    """The cursor name stored in ``filename``, or None if it is not a cursor file."""
    if not filename.endswith(_SUFFIX):
        return None
    return unquote(filename[: -len(_SUFFIX)])


class RedeliveryCounts:
    """Entry id -> how many times it was redelivered, for at most ``limit`` ids.

    Past the limit the id counted least recently is forgotten (its next delivery says
    0 again): a message redelivered over and over stays counted.  ``version`` grows
    with every change, so the cursor that persists the counts knows it is dirty.
    """

    __slots__ = ("_counts", "limit", "version")

    def __init__(self, limit: int = DEFAULT_MAX_REDELIVERY_COUNTS) -> None:
        self._counts: dict[int, int] = {}  # in order of last change, oldest first
        self.limit = max(1, limit)
        self.version = 0

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, entry_id: int) -> bool:
        return entry_id in self._counts

    def get(self, entry_id: int, default: int = 0) -> int:
        return self._counts.get(entry_id, default)

    def increment(self, entry_id: int) -> int:
        """Count one more redelivery of ``entry_id``; returns its new count."""
        counts = self._counts
        count = counts.pop(entry_id, 0) + 1
        counts[entry_id] = count
        if len(counts) > self.limit:
            del counts[next(iter(counts))]
        self.version += 1
        return count

    def discard(self, entry_id: int) -> None:
        if self._counts.pop(entry_id, None) is not None:
            self.version += 1

    def discard_through(self, entry_id: int) -> None:
        """Forget the counts of every id up to ``entry_id`` (a cumulative ack)."""
        if self._counts:
            self._keep(lambda e: e > entry_id)

    def clear(self) -> None:
        if self._counts:
            self._counts.clear()
            self.version += 1

    def set_limit(self, limit: int) -> None:
        """Bound the counts at ``limit``, forgetting the oldest beyond it now."""
        self.limit = max(1, limit)
        counts = self._counts
        excess = len(counts) - self.limit
        if excess > 0:
            for entry_id in list(counts)[:excess]:
                del counts[entry_id]
            self.version += 1

    def items(self) -> list[tuple[int, int]]:
        """(entry id, count) pairs, the least recently counted first."""
        return list(self._counts.items())

    def _keep(self, wanted: Callable[[int], bool]) -> None:
        counts = self._counts
        dropped = [e for e in counts if not wanted(e)]
        for entry_id in dropped:
            del counts[entry_id]
        if dropped:
            self.version += 1

    def _restore(self, entry_id: int, count: int) -> None:
        """Loading: keep a persisted count as it was (no limit, no version)."""
        self._counts[entry_id] = count


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
        # The subscription counts redeliveries here (it shares this object), so that
        # they are written with the position; they change the version too.
        self.redelivery_counts = RedeliveryCounts()
        # Partly acked batches: entry id -> its messages still unacked (shared with the
        # subscription likewise).
        self.batch_acks = BatchAckSets()

    @property
    def _current_version(self) -> int:
        # Every part only grows, so their sum grows with every change of any.
        return self._version + self.redelivery_counts.version + self.batch_acks.version

    @property
    def dirty(self) -> bool:
        """Changed since the file was last written."""
        return self._current_version != self._written_version

    @dirty.setter
    def dirty(self, value: bool) -> None:
        if value:
            self._version += 1
        else:  # the caller vouches that the file holds the current state
            self._written_version = self._current_version

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
        """Seek: set mark_delete (backwards too) and forget the individual acks, the
        redelivery counts and the partly acked batches."""
        self.mark_delete = max(mark_delete, -1)
        self._acked.clear()
        self.redelivery_counts.clear()
        self.batch_acks.clear()
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
            # [id, count] pairs, least recently counted first so that a reload evicts
            # in the same order; the default bound's 10k encode in about 5 ms.
            "redelivery_counts": self.redelivery_counts.items(),
            "batch_acks": self.batch_acks.to_json(),
        }

    def snapshot(self) -> CursorSnapshot:
        """The current state, ready for ``write`` (loop thread; cheap)."""
        data = json.dumps(self.to_json(), separators=(",", ":")).encode()
        return CursorSnapshot(self, self._current_version, data)

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
            for entry_id, count in doc.get("redelivery_counts", []):
                # Counts of acknowledged entries are not needed any more.
                if int(count) > 0 and not cursor.is_acked(int(entry_id)):
                    cursor.redelivery_counts._restore(int(entry_id), int(count))
            cursor.batch_acks.restore(doc.get("batch_acks", []))
            # Sets of entries acked as a whole are not needed any more.
            for entry_id in [e for e in cursor.batch_acks if cursor.is_acked(e)]:
                cursor.batch_acks.discard(entry_id)
            cursor.batch_acks.version = 0
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageCorruption(f"{path}: not a valid cursor file: {exc}") from exc
        return cursor
