"""Topic metadata: the small, rarely written facts that live beside a topic's ledger.

The ledger id the broker chose at creation, the PIP-68 topic epoch, topic properties
and the schema history.  One JSON file, replaced atomically; bytes are base64.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write

FORMAT_VERSION = 1


@dataclass
class SchemaEntry:
    version: int
    type: int
    name: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "type": self.type,
            "name": self.name,
            "data": base64.b64encode(self.data).decode("ascii"),
            "properties": self.properties,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SchemaEntry:
        return cls(
            version=int(doc["version"]),
            type=int(doc["type"]),
            name=str(doc["name"]),
            data=base64.b64decode(doc["data"], validate=True),
            properties={str(k): str(v) for k, v in doc.get("properties", {}).items()},
        )


@dataclass
class TopicMetadata:
    path: Path
    ledger_id: int = 0  # the current ledger: a new one on each open of the topic
    # (ledger id, first entry position) of every ledger that still holds entries
    # (storage/ledger_ids.py); empty in files written before ledgers were tracked.
    ledgers: list[tuple[int, int]] = field(default_factory=list)
    topic_epoch: int = 0  # PIP-68: bumped when an exclusive producer fences the others
    properties: dict[str, str] = field(default_factory=dict)
    schemas: list[SchemaEntry] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> TopicMetadata:
        """Read ``path``; a missing file gives the defaults (not saved until ``save``)."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        try:
            doc = json.loads(raw)
            return cls(
                path=path,
                ledger_id=int(doc.get("ledger_id", 0)),
                ledgers=[(int(lid), int(first)) for lid, first in doc.get("ledgers", [])],
                topic_epoch=int(doc.get("topic_epoch", 0)),
                properties={str(k): str(v) for k, v in doc.get("properties", {}).items()},
                schemas=[SchemaEntry.from_json(entry) for entry in doc.get("schemas", [])],
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise StorageCorruption(f"{path}: not a valid topic metadata file: {exc}") from exc

    def latest_schema(self) -> SchemaEntry | None:
        return max(self.schemas, key=lambda entry: entry.version, default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": FORMAT_VERSION,
            "ledger_id": self.ledger_id,
            "ledgers": [list(row) for row in self.ledgers],
            "topic_epoch": self.topic_epoch,
            "properties": self.properties,
            "schemas": [entry.to_json() for entry in self.schemas],
        }

    def save(self) -> None:
        """Write atomically (tmp file, fsync, rename, fsync dir), creating the directory."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(self.to_json(), indent=1).encode())
