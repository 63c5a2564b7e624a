"""Topic metadata: the small, rarely written facts that live beside a topic's ledger.

The ledger id the broker chose at creation, the PIP-68 topic epoch, topic properties,
topic policies and the schema history.  One JSON file, replaced atomically; bytes are
base64.  Namespace policies have a file of their own (``NamespacePolicies``).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write
from magnetar.storage.owed_syncs import OwedSyncs

FORMAT_VERSION = 1


@dataclass
class SchemaEntry:
    version: int
    type: int
    name: str
    data: bytes
    properties: dict[str, str] = field(default_factory=dict)
    timestamp: int = 0  # ms since the epoch when it was registered (0: not recorded)
    # A deletion marker (Pulsar's deleted SchemaInfo): versions up to it are gone.
    deleted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "type": self.type,
            "name": self.name,
            "data": base64.b64encode(self.data).decode("ascii"),
            "properties": self.properties,
            "timestamp": self.timestamp,
            "deleted": self.deleted,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> SchemaEntry:
        return cls(
            version=int(doc["version"]),
            type=int(doc["type"]),
            name=str(doc["name"]),
            data=base64.b64decode(doc["data"], validate=True),
            properties={str(k): str(v) for k, v in doc.get("properties", {}).items()},
            timestamp=int(doc.get("timestamp", 0)),
            deleted=bool(doc.get("deleted", False)),
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
    # Topic-level policies set through the admin API, by their REST name (e.g.
    # "redeliveryBackoff"); each is a JSON object the broker validates when it uses it.
    policies: dict[str, Any] = field(default_factory=dict)
    schemas: list[SchemaEntry] = field(default_factory=list)
    # Topic compaction: the compacted ledger in force ("file" in compacted/, its
    # "generation") and its "horizon" position (storage/compacted_ledger.py).
    compaction: dict[str, Any] = field(default_factory=dict)
    # A new topic's first version, owed to the disk until its ledger's first sync
    # (owed_syncs.py); a save voids it.
    owed: OwedSyncs | None = field(default=None, compare=False, repr=False)

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
                policies=_policies(doc.get("policies", {})),
                schemas=[SchemaEntry.from_json(entry) for entry in doc.get("schemas", [])],
                compaction=_policies(doc.get("compaction", {})),
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
            "policies": self.policies,
            "schemas": [entry.to_json() for entry in self.schemas],
            "compaction": self.compaction,
        }

    def encode(self) -> bytes:
        # Not indented: ``indent`` makes json use its pure-Python encoder, twice the
        # time of the C one (15 against 7 us for a new topic's, on every topic's load).
        return json.dumps(self.to_json()).encode()

    def save(self) -> None:
        """Write atomically (tmp file, fsync, rename, fsync dir), creating the directory."""
        if self.owed is not None:
            self.owed.drop_write(self.path)  # this version replaces the owed one
            self.owed = None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.path, self.encode())

    def save_when_settled(self, owed: OwedSyncs) -> None:
        """Leave the write of this version to ``owed``'s settlement (a new topic's)."""
        self.owed = owed
        owed.owe_write(self.path, self.encode())

    def set_policy(self, name: str, value: Any) -> None:
        """Set (None: remove) the policy ``name`` and save; if the save fails, the
        policy is as it was (a failed write changes nothing)."""
        previous = self.policies.get(name)
        if value is None:
            self.policies.pop(name, None)
        else:
            self.policies[name] = value
        try:
            self.save()
        except BaseException:
            if previous is None:
                self.policies.pop(name, None)
            else:
                self.policies[name] = previous
            raise


def _policies(doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict):
        raise ValueError("policies is not an object")
    return {str(k): v for k, v in doc.items()}


NAMESPACES_DIR = "namespaces"
POLICIES_FILE = "policies.json"

# The file keeps a namespace's policies under the keys of Pulsar's ``Policies`` JSON;
# the broker's stores name them as their REST routes do (the names topic metadata
# keeps). Files written before used the route names: both are read.
_PULSAR_KEYS = {
    "retention": "retention_policies",
    "messageTTL": "message_ttl_in_seconds",
    "backlogQuotaMap": "backlog_quota_map",
    "compactionThreshold": "compaction_threshold",
    "schemaCompatibilityStrategy": "schema_compatibility_strategy",
}
_ROUTE_NAMES = {pulsar: route for route, pulsar in _PULSAR_KEYS.items()}


@dataclass
class NamespacePolicies:
    """Policies of one namespace (``root/namespaces/<tenant>/<namespace>/policies.json``),
    by their REST name, as topic metadata keeps a topic's."""

    path: Path
    policies: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def path_for(root: Path, tenant: str, namespace: str) -> Path:
        """The file of ``tenant/namespace`` under the data directory ``root`` (plain
        Pulsar names only: the caller checked them)."""
        return Path(root) / NAMESPACES_DIR / tenant / namespace / POLICIES_FILE

    @classmethod
    def load(cls, path: Path) -> NamespacePolicies:
        """Read ``path``; a missing file means no policies."""
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        try:
            doc = json.loads(raw)
            stored = _policies(doc.get("policies", {}))
        except (ValueError, TypeError, AttributeError) as exc:
            raise StorageCorruption(f"{path}: not a valid namespace policies file: {exc}") from exc
        return cls(path, {_ROUTE_NAMES.get(key, key): value for key, value in stored.items()})

    def save(self) -> None:
        """Write atomically, creating the directory; keys as Pulsar's Policies."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        stored = {_PULSAR_KEYS.get(key, key): value for key, value in self.policies.items()}
        doc = {"version": FORMAT_VERSION, "policies": stored}
        atomic_write(self.path, json.dumps(doc, indent=1).encode())
