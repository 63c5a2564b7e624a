"""Store: the layout of the data directory.

::

    root/<domain>/<tenant>/<namespace>/<quoted local name>/   one topic: its ledger,
                                                               cursors and metadata.json
    root/partitioned/<tenant>/<namespace>/<quoted local name>.json   partition counts

Local names are percent-quoted (``/`` and odd characters become ``%xx``, and the names
``.`` and ``..`` get their dots quoted too), so any topic name maps to one directory
and quoting is reversible.  Tenant and namespace must be plain Pulsar names.  Names
are read, quoted and bounded in length by ``magnetar.protocol.topic_name``.
"""

from __future__ import annotations

import json
import os
import shutil
from concurrent.futures import Executor
from pathlib import Path
from urllib.parse import unquote

from magnetar.protocol.topic_name import DOMAINS, quote_name
from magnetar.protocol.topic_name import split_full_name as parse_topic
from magnetar.storage.cache import CacheBudget
from magnetar.storage.errors import StorageCorruption
from magnetar.storage.fsutil import atomic_write, fsync_dir
from magnetar.storage.ledger import LedgerConfig, ManagedLedger
from magnetar.storage.metadata import TopicMetadata
from magnetar.storage.repair import Truncation, truncate_at_corruption
from magnetar.storage.segment_files import SegmentFiles
from magnetar.storage.sync_load import SyncLoad

PARTITIONED_DIR = "partitioned"
_PARTITIONS_CACHED = 100_000  # names whose partition count the store remembers
_NAMESPACES_LISTED = 10_000  # namespaces whose registry files the store remembers
METADATA_FILE = "metadata.json"


class Store:
    """The data directory: where each topic's ledger and metadata live.

    Its ledgers share one entry-cache budget (``cache``, ``config.cache_max_bytes``
    for all of them together, or another store's when given one) and one bound on
    the open files of their sealed segments (``segment_files``,
    ``config.max_open_segment_files``, or another store's).
    """

    def __init__(self, root: Path, config: LedgerConfig, *,
                 executor: Executor | None = None,
                 cache: CacheBudget | None = None,
                 segment_files: SegmentFiles | None = None) -> None:
        """``cache`` is the entry-cache budget of this store's ledgers; None: one of
        ``config.cache_max_bytes`` of its own (pass another store's to share it).
        ``segment_files`` likewise, after ``config.max_open_segment_files``."""
        self.root = Path(root)
        self._root = str(self.root)
        self.config = config
        self.cache = cache if cache is not None else CacheBudget(config.cache_max_bytes)
        self.segment_files = (segment_files if segment_files is not None
                              else SegmentFiles(config.max_open_segment_files))
        self._executor = executor  # for the ledgers' fdatasyncs; None = loop default
        self._sync_load = SyncLoad()  # one disk, one loop: the ledgers judge it together
        # The partitioned-topic registry as read or written by this store (its only
        # writer; its callers are on the loop): a lookup of a new topic asks it twice,
        # and a read of a file that is not there cost an open each time. None: not
        # partitioned.
        self._partitions: dict[str, int | None] = {}
        # The registry files of each namespace asked about, listed once: a new topic's
        # lookup then costs no failed open on the loop (20 us each, and cold).
        self._partitioned_files: dict[tuple[str, str], set[str]] = {}
        self.root.mkdir(parents=True, exist_ok=True)

    @property
    def sync_load(self) -> SyncLoad:
        """How fdatasync fares lately for this store's ledgers (shared by them)."""
        return self._sync_load

    def topic_dir(self, topic: str) -> Path:
        domain, tenant, namespace, local = parse_topic(topic)
        # One Path of a joined string: four pathlib joins cost 4x as much (a topic's
        # load asks once or twice).
        return Path(os.path.join(self._root, domain, tenant, namespace, quote_name(local)))

    def open_ledger(self, topic: str, *, only_new: bool = False) -> ManagedLedger:
        """``only_new``: see ``ManagedLedger.open`` (LedgerExists if the topic has a
        directory)."""
        return ManagedLedger.open(
            self.topic_dir(topic), self.config, executor=self._executor,
            sync_load=self._sync_load, cache_budget=self.cache,
            segment_files=self.segment_files, only_new=only_new,
        )

    def truncate_at_corruption(self, topic: str, *,
                               dry_run: bool = False) -> Truncation | None:
        """Cut the topic's ledger before its first bad record (see ``repair.py``);
        the topic must not be loaded."""
        return truncate_at_corruption(self.topic_dir(topic), dry_run=dry_run)

    def topic_metadata(self, topic: str) -> TopicMetadata:
        return TopicMetadata.load(self.topic_dir(topic) / METADATA_FILE)

    @staticmethod
    def ledger_metadata(ledger: ManagedLedger) -> TopicMetadata:
        """The metadata of the topic whose ledger is ``ledger``: read, or the defaults
        with nothing to read when the ledger's open made the topic's directory."""
        path = ledger.directory / METADATA_FILE
        return TopicMetadata(path) if ledger.fresh else TopicMetadata.load(path)

    def list_topics(self) -> list[str]:
        """Full names of the topics that have a directory on disk."""
        topics = []
        for domain in DOMAINS:
            for tenant, namespace, entry in self._walk(self.root / domain):
                if entry.is_dir():
                    topics.append(f"{domain}://{tenant}/{namespace}/{unquote(entry.name)}")
        return sorted(topics)

    def delete_topic(self, topic: str) -> None:
        """Remove the topic's directory (close its ledger first); no error if absent."""
        directory = self.topic_dir(topic)
        if directory.exists():
            shutil.rmtree(directory)
            fsync_dir(directory.parent)

    # ------------------------------------------------- partitioned-topic registry

    @staticmethod
    def _registry_entry(topic: str) -> tuple[str, str, str]:
        """(tenant, namespace, file name) of ``topic``'s partition count."""
        _, tenant, namespace, local = parse_topic(topic)
        return tenant, namespace, quote_name(local) + ".json"

    def _partitioned_path(self, topic: str) -> Path:
        tenant, namespace, file_name = self._registry_entry(topic)
        return self.root / PARTITIONED_DIR / tenant / namespace / file_name

    def _registry_files(self, tenant: str, namespace: str) -> set[str]:
        """The file names in a namespace's partitioned-topic directory, listed on the
        first question about it and kept up to date by this store, their only writer."""
        key = (tenant, namespace)
        files = self._partitioned_files.get(key)
        if files is None:
            directory = os.path.join(self._root, PARTITIONED_DIR, tenant, namespace)
            try:
                files = set(os.listdir(directory))
            except (FileNotFoundError, NotADirectoryError):
                files = set()
            if len(self._partitioned_files) >= _NAMESPACES_LISTED:
                self._partitioned_files.clear()  # asked about that many: start over
            self._partitioned_files[key] = files
        return files

    def set_partitions(self, topic: str, partitions: int) -> None:
        if partitions < 0:
            raise ValueError("partitions must not be negative")
        path = self._partitioned_path(topic)
        path.parent.mkdir(parents=True, exist_ok=True)
        # The full name is stored too: the path alone does not say which domain it is.
        self._partitions.pop(topic, None)  # unknown until the write is done
        atomic_write(path, json.dumps({"topic": topic, "partitions": partitions}).encode())
        self._partitions[topic] = partitions
        self._registry_files(*path.parts[-3:-1]).add(path.name)

    def get_partitions(self, topic: str) -> int | None:
        try:
            return self._partitions[topic]
        except KeyError:
            pass
        tenant, namespace, file_name = self._registry_entry(topic)
        partitions = None
        if file_name in self._registry_files(tenant, namespace):
            path = self._partitioned_path(topic)
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                pass
            else:
                partitions = self._read_partitioned(path, raw)[1]
        if len(self._partitions) >= _PARTITIONS_CACHED:
            self._partitions.clear()  # names looked up once each: start over
        self._partitions[topic] = partitions
        return partitions

    def delete_partitioned(self, topic: str) -> None:
        path = self._partitioned_path(topic)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        finally:
            self._partitions.pop(topic, None)
            self._registry_files(*path.parts[-3:-1]).discard(path.name)
        fsync_dir(path.parent)

    def list_partitioned(self) -> dict[str, int]:
        registry = {}
        for _, _, entry in self._walk(self.root / PARTITIONED_DIR):
            if entry.is_file() and entry.name.endswith(".json"):
                topic, partitions = self._read_partitioned(entry, entry.read_bytes())
                registry[topic] = partitions
        return registry

    def _read_partitioned(self, path: Path, raw: bytes) -> tuple[str, int]:
        try:
            doc = json.loads(raw)
            partitions = doc["partitions"]
            topic = doc["topic"]
            if not isinstance(partitions, int) or not isinstance(topic, str):
                raise ValueError("unexpected field types")
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageCorruption(f"{path}: not a valid partitioned-topic file: {exc}") from exc
        return topic, partitions

    @staticmethod
    def _walk(base: Path) -> list[tuple[str, str, Path]]:
        """(tenant, namespace, entry) for every entry two levels below ``base``."""
        found: list[tuple[str, str, Path]] = []
        if not base.is_dir():
            return found
        for tenant in sorted(base.iterdir()):
            if not tenant.is_dir():
                continue
            for namespace in sorted(tenant.iterdir()):
                if not namespace.is_dir():
                    continue
                for entry in sorted(namespace.iterdir()):
                    if not entry.name.endswith(".tmp"):
                        found.append((tenant.name, namespace.name, entry))
        return found
