"""Loading and unloading topics (Pulsar's BrokerService.getOrCreateTopic and its
unloading): opening a topic's files on a worker thread, checking that it may be loaded,
putting it in force, and unloading topics nobody uses (idle, over
``max_unused_loaded_topics``, out of file descriptors, after a storage failure).

``TopicLoader`` is a part of ``BrokerService`` (a base class): it names the service's
attributes it uses, and the service sets them."""

from __future__ import annotations

import asyncio
import errno
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from magnetar.broker.topics.topic import Topic, TopicUnavailable
from magnetar.protocol.topic_name import TopicName
from magnetar.storage import CorruptLedger, LedgerExists, ManagedLedger, Store, TopicMetadata
from magnetar.storage.compacted_ledger import open_in_force
from magnetar.storage.errors import StorageError
from magnetar.storage.ledger_ids import LedgerIds, begin_ledger

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.features.compaction_service import CompactionService
    from magnetar.broker.features.dedup import DedupSettings
    from magnetar.broker.policies.namespaces import NamespaceRegistry
    from magnetar.broker.policies.redelivery_backoff import BackoffPolicies

log = logging.getLogger("magnetar.broker")

RELIEF_MAX_TOPICS = 256  # unloaded per relief when the file descriptors run out
UNLOAD_GROUP = 32  # topics unloaded together: their closes' worker-thread hops overlap


class TopicLoader:
    """The loaded topics' comings and goings; a base class of BrokerService."""

    # Set by BrokerService.__init__ (and loop by start()).
    config: BrokerConfig
    loop: asyncio.AbstractEventLoop
    topics: dict[str, Topic]
    store: Store
    scratch_store: Store
    namespaces: NamespaceRegistry
    compaction: CompactionService
    backoff_policies: BackoffPolicies
    dedup_settings: DedupSettings
    _stopping: bool
    _unloading: dict[str, asyncio.Future[None]]
    _loading: dict[str, asyncio.Future[Topic]]
    _unload_wanted: asyncio.Event
    _in_use: int
    _loader: ThreadPoolExecutor
    _relieving: asyncio.Task[int] | None
    _info_trimmed_share: int

    if TYPE_CHECKING:  # BrokerService's
        def clock_ms(self) -> int: ...
        def apply_deduplication(self, topic: Topic) -> None: ...

    async def _unload_if_unused(self, topic: Topic, reason: str) -> None:
        if not topic.has_clients():  # it may have got one while others were unloaded
            await self.unload_topic(topic, reason)

    def relieve_descriptor_pressure(self) -> asyncio.Task[int]:
        """The process ran out of file descriptors: unload up to ``RELIEF_MAX_TOPICS``
        of the topics nobody uses, oldest loaded first (one relief at a time); the
        commands that failed are handled again when it is done. A relief frees enough
        for hundreds of loads and ends in a moment even with thousands of idle topics
        (all of them at once took 17 s at 6,600 on a busy machine, and the clients
        waiting on it timed out); if the descriptors run out again, so does another."""
        if self._relieving is None or self._relieving.done():
            self._relieving = self.loop.create_task(
                self._unload_unused_topics("out of file descriptors", RELIEF_MAX_TOPICS)
            )
        return self._relieving

    async def _unload_unused_topics(self, reason: str, limit: int) -> int:
        """Unload at most ``limit`` loaded topics without producers or consumers,
        oldest loaded first, a group at a time; how many."""
        unused = [t for t in self.topics.values() if not t.has_clients()][:limit]
        for start in range(0, len(unused), UNLOAD_GROUP):
            group = unused[start : start + UNLOAD_GROUP]
            await asyncio.gather(*(self.unload_topic(topic, reason) for topic in group))
        if unused:
            log.warning("unloaded %d unused topics: %s", len(unused), reason)
        return len(unused)

    async def unload_topic(self, topic: Topic, reason: str) -> None:
        """Close ``topic`` and drop it from memory; its clients are told to reconnect,
        which loads it again (recovering its files)."""
        if self.topics.get(topic.name) is not topic:
            return
        del self.topics[topic.name]
        done = self.loop.create_future()
        self._unloading[topic.name] = done
        try:
            for sub in list(topic.subscriptions.values()):
                for consumer in list(sub.consumers):
                    consumer.cnx.consumer_closed_by_broker(consumer)
            for producer in list(topic.producers.values()):
                producer.cnx.close_producer_by_broker(producer)
            for waiter in list(topic.access.waiters):
                waiter.cnx.close_producer_by_broker(waiter)
            try:
                await topic.close()
            except Exception:
                log.exception("closing %s while unloading it failed", topic.name)
            log.info("unloaded topic %s (%s)", topic.name, reason)
        finally:
            del self._unloading[topic.name]
            done.set_result(None)

    def _topic_failed(self, topic: Topic) -> None:
        """A storage error on ``topic``: unload it, so that its clients' reconnects load
        it afresh (a new ledger) once the cause is gone, without a broker restart."""
        if self.topics.get(topic.name) is topic and not self._stopping:
            self.loop.create_task(self.unload_topic(topic, "storage failure"))

    def _store_for(self, name: TopicName) -> Store:
        return self.store if name.persistent else self.scratch_store

    def _exists(self, name: TopicName) -> bool:
        return str(name) in self.topics or self._store_for(name).topic_dir(str(name)).exists()

    def get_topic(self, name: TopicName, *, create: bool = True, explicit: bool = False) -> Topic:
        """The loaded topic, loading or creating it on the loop thread (admin and
        embedded use; clients' commands use :meth:`load_topic`). LookupError if absent
        and not created.

        ``create`` lets a client's use create it, where ``allow_auto_topic_creation``
        permits; ``explicit`` (an admin's request) creates it regardless.
        """
        full = str(name)
        topic = self.topics.get(full)
        if topic is not None:
            return topic
        self._check_loadable(name, create, explicit)
        if full in self._loading:
            raise TopicUnavailable(f"topic {full} is loading; try again")
        # An admin's topic exists once the call returns (a client's, once something
        # in it is acknowledged: see storage/owed_syncs.py).
        return self._install(name, *self._open_files(name, durable=explicit))

    def load_topic(self, name: TopicName, *, create: bool = True) -> asyncio.Future[Topic]:
        """The topic, loaded in a worker thread if it is not loaded yet: recovering a
        large log (reading, checking records) does not stall the loop meanwhile.
        Raises at once what :meth:`get_topic` would (LookupError, ValueError,
        TopicUnavailable while it unloads); a failed load fails the future."""
        full = str(name)
        topic = self.topics.get(full)
        future: asyncio.Future[Topic] = self.loop.create_future()
        if topic is not None:
            future.set_result(topic)
            return future
        loading = self._loading.get(full)
        if loading is not None:
            return loading
        self._check_loadable(name, create, False)
        self._loading[full] = future

        async def load() -> None:
            try:
                try:
                    opened = await self._load_files(name)
                except TopicUnavailable as exc:
                    # Out of file descriptors: topics nobody uses give theirs back.
                    if exc.os_errno not in (errno.EMFILE, errno.ENFILE):
                        raise
                    if not await self.relieve_descriptor_pressure():
                        raise
                    opened = await self._load_files(name)
                future.set_result(self._install(name, *opened))
            except BaseException as exc:  # the waiters get it; nothing is left behind
                future.set_exception(exc)
            finally:
                del self._loading[full]

        self.loop.create_task(load())
        return future

    async def _load_files(self, name: TopicName) -> tuple[ManagedLedger, TopicMetadata, LedgerIds]:
        """``_open_files`` on a loader thread; no ledger syncs on the loop meanwhile (a
        topic's creation keeps the file system's journal busy).

        A new topic is made on the loop itself while nothing else loads and no disk
        work of its store runs on a worker: its open is a few system calls (mkdir,
        flock, the first segment), less than the hand-off to a loader thread and back
        (creating 100 producers one after another, official client: 0.137-0.157 s ->
        0.122-0.131 s). Many creations at once, or beside syncs on workers, may wait for
        the file system's journal: those stay on the loader threads, as does every
        topic that exists (its recovery reads its log)."""
        store = self._store_for(name)
        if len(self._loading) == 1 and not store.sync_load.disk_jobs:
            try:
                return self._open_files(name, only_new=True)
            except LedgerExists:
                pass  # recovered on a loader thread
        job = self.loop.run_in_executor(self._loader, self._open_files, name)
        store.sync_load.job_started(job)
        return await job

    def _check_loadable(self, name: TopicName, create: bool, explicit: bool) -> None:
        full = str(name)
        if full in self._unloading:
            raise TopicUnavailable(f"topic {full} is being unloaded; try again")
        if name.partition_index < 0 and self.store.get_partitions(full):
            raise ValueError(
                f"topic {full} is partitioned; producers and consumers attach to its partitions"
            )
        allowed = create and (explicit or self.config.allow_auto_topic_creation)
        if allowed and self.namespaces.exists(name.namespace_name):
            # Served whether or not it exists yet, so the file system is not asked here,
            # on the loop: a stat of its directory waited up to 190 ms for the journal
            # while thousands of topics were created beside it. The loader logs a creation.
            return
        if not self._exists(name):
            base = name.partitioned_base
            is_known_partition = (
                name.partition_index >= 0
                and (self.store.get_partitions(str(base)) or 0) > name.partition_index
            )
            if not is_known_partition and not allowed:
                self.namespaces.check(name.namespace_name)  # the clearer of the two reasons
                raise LookupError(f"topic {full} does not exist")
            self.namespaces.ensure(name.namespace_name)  # NamespaceNotFound is a LookupError

    def _open_files(
        self, name: TopicName, durable: bool = False, only_new: bool = False
    ) -> tuple[ManagedLedger, TopicMetadata, LedgerIds]:
        """Open (and recover) the topic's log and metadata and begin its new ledger:
        file work only, safe in a worker thread. TopicUnavailable names a failure.
        A topic this creates is durable on return only if ``durable``. ``only_new``:
        LedgerExists, with nothing opened, if the topic has a directory."""
        full = str(name)
        store = self._store_for(name)
        ledger = None
        try:
            ledger = store.open_ledger(full, only_new=only_new)
            if ledger.fresh:  # its open made the directory: the rest has nothing to read
                log.info("creating topic %s", full)
            ledger.open_persisted_cursors()  # its subscriptions' files, off the loop too
            metadata = store.ledger_metadata(ledger)
            if not ledger.fresh:
                ledger.compacted = open_in_force(
                    ledger.directory, metadata.compaction.get("file")
                )
            first = ledger.first_entry_id
            if ledger.compacted is not None and ledger.compacted.first_position is not None:
                first = min(first, ledger.compacted.first_position)  # ids it serves
            # A topic this load creates owes its files' fsyncs until its first sync.
            owed = ledger.owed_syncs if ledger.created and ledger.owed_syncs.owed else None
            ledgers = begin_ledger(
                metadata, ledger.next_entry_id, first, self.clock_ms() // 1000, owed
            )
            if durable:
                ledger.make_durable()
            return ledger, metadata, ledgers
        except BaseException as exc:
            # Whatever failed after the ledger opened, its files and its directory's
            # lock go back (a lock kept would refuse every later load of the topic).
            if ledger is not None:
                ledger.abort()
            if not isinstance(exc, CorruptLedger | OSError):
                raise
            failure = exc
        if isinstance(failure, CorruptLedger):
            log.error("cannot load topic %s: %s", full, failure)
            raise TopicUnavailable(
                f"cannot load topic {full}: its log is corrupt ({failure.reason} at offset "
                f"{failure.offset} of {failure.path.parent.name}/{failure.path.name}); an "
                "operator can cut it there with `magnetar repair`",
                storage_error=True,
            )
        reason = failure.strerror or str(failure)
        code = errno.errorcode.get(failure.errno or 0, "")
        log.error("cannot load topic %s: %s", full, failure)
        raise TopicUnavailable(
            f"cannot load topic {full}: {reason}" + (f" ({code})" if code else ""),
            storage_error=True,
            os_errno=failure.errno,
        )

    def _install(
        self, name: TopicName, ledger: ManagedLedger, metadata: TopicMetadata, ledgers: LedgerIds
    ) -> Topic:
        full = str(name)
        topic = Topic(
            name,
            ledger,
            metadata,
            self.loop,
            self.clock_ms,
            self.config.max_unacked_per_consumer,
            self.config.dispatch_before_sync,
            self._info_share,
            ledgers,
            self.config.delayed_delivery_max_tracked,
            max_redelivery_counts=self.config.max_redelivery_counts_per_subscription,
        )
        topic.on_storage_failure = self._topic_failed
        topic.redelivery_backoff_of = self.backoff_policies.effective
        topic.schemas.policy_root = self.config.data_dir  # namespace schema policies
        self.topics[full] = topic
        max_unused = self.config.max_unused_loaded_topics
        # Topics in use are never unloaded: counting them keeps a broker with many of
        # them from running a pass over every topic on every load.
        if max_unused > 0 and len(self.topics) > max_unused + self._in_use + UNLOAD_GROUP:
            self._unload_wanted.set()  # now, not at the next pass: see _idle_unloader
        self.compaction.topic_loaded(topic)
        topic.dedup.settings = self.dedup_settings
        try:
            self.apply_deduplication(topic)
        except (OSError, StorageError) as exc:
            # Its state could not be loaded: refuse publishes rather than let
            # duplicates in; unloading lets the next use try again.
            topic.failure = f"cannot load the deduplication state of {full}: {exc}"
            log.error("%s", topic.failure)
            self._topic_failed(topic)
        share = self._info_share()
        if share < self._info_trimmed_share * 3 // 4:
            # Topics filled their caches while their share was larger.
            self._info_trimmed_share = share
            for other in self.topics.values():
                other.trim_info_cache()
        return topic

    def _info_share(self) -> int:
        """A topic's share of ``entry_info_cache_max_entries``: the loaded topics
        together keep at most about that many EntryInfo (and 64 each at least)."""
        return max(64, self.config.entry_info_cache_max_entries // max(1, len(self.topics)))

    def find_topic(self, name: TopicName) -> Topic | None:
        try:
            return self.get_topic(name, create=False)
        except (LookupError, ValueError):
            return None

