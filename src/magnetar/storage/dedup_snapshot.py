"""The deduplication snapshot of a topic: its producers' highest persisted sequence
ids as of one log position, in a small JSON file beside the ledger.

Pulsar keeps the same map in the properties of its ``pulsar.dedup`` cursor, whose
mark-delete position is the snapshot's position; here it is one file, replaced
atomically, so a crash leaves the previous snapshot or the new one. What the log holds
after the position is replayed from the entries' metadata when the topic loads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write, fsync_dir

SNAPSHOT_FILE = "deduplication-snapshot.json"
FORMAT_VERSION = 1


@dataclass
class DedupSnapshot:
    """``producers`` maps a producer name to the highest sequence id persisted for it
    in the entries up to and including ``position`` (-1: before the first entry)."""

    position: int
    producers: dict[str, int] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        doc = {"version": FORMAT_VERSION, "position": self.position, "producers": self.producers}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, raw: bytes, source: Path) -> DedupSnapshot:
        try:
            doc = json.loads(raw)
            producers = doc["producers"]
            if not isinstance(producers, dict):
                raise TypeError("producers is not an object")
            return cls(
                position=int(doc["position"]),
                producers={str(name): int(seq) for name, seq in producers.items()},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageCorruption(
                f"{source}: not a valid deduplication snapshot: {exc}"
            ) from exc


def snapshot_path(topic_dir: Path) -> Path:
    return Path(topic_dir) / SNAPSHOT_FILE


def read_snapshot(path: Path) -> DedupSnapshot | None:
    """The snapshot in ``path``; None if there is none. StorageCorruption if unreadable."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return DedupSnapshot.from_bytes(raw, path)


def write_snapshot(path: Path, snapshot: DedupSnapshot) -> None:
    """Replace the snapshot durably (blocking: a worker thread's job, or a rare one)."""
    atomic_write(path, snapshot.to_bytes())


def remove_snapshot(path: Path) -> None:
    """Delete the snapshot, durably; no error if there is none."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    fsync_dir(path.parent)
