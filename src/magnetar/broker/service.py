"""BrokerService: the listening socket, the loaded topics, and the broker-wide timers."""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from magnetar.broker.auth import build_authentication, build_authorization, build_tls_context
from magnetar.broker.config import BrokerConfig, ConfigError, listen_error, os_reason
from magnetar.broker.features.compaction_service import CompactionService
from magnetar.broker.features.request_log import RequestLog
from magnetar.broker.features.rpc import ReplyRouter
from magnetar.broker.observability.gc_pauses import GcPauseRecorder
from magnetar.broker.observability.loop_lag import LoopLagProbe
from magnetar.broker.observability.metrics import BrokerMetrics
from magnetar.broker.observability.rates import RateTracker
from magnetar.broker.observability.stall_tracer import StallTracer
from magnetar.broker.policies.dedup_policy import DedupPolicies, settings_from_config
from magnetar.broker.policies.namespaces import NamespaceRegistry
from magnetar.broker.policies.redelivery_backoff import BackoffPolicies, RedeliveryBackoffPolicy
from magnetar.broker.policies.retention_policies import RetentionPolicyStore
from magnetar.broker.policies.topic_policies import PolicyEnforcer
from magnetar.broker.session.connection import ServerCnx
from magnetar.broker.session.idle_poll import IdlePoller
from magnetar.broker.session.limits import ConnectionLimits, PublishBuffer, UnauthenticatedBuffers
from magnetar.broker.topics.loader import UNLOAD_GROUP, TopicLoader
from magnetar.broker.topics.topic import Topic
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb
from magnetar.protocol.topic_name import InvalidTopicName, TopicName
from magnetar.storage import LedgerConfig, Store
from magnetar.storage.dir_lock import DataDirLock

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer

log = logging.getLogger("magnetar.broker")



NON_PERSISTENT_DIR = "non-persistent-scratch"


class BrokerService(TopicLoader):
    def __init__(self, config: BrokerConfig, *, clock: Callable[[], float] = time.time) -> None:
        config.validate()
        self.config = config
        self.clock = clock
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.idle_poller: IdlePoller = None  # type: ignore[assignment]  # set by start()
        self.topics: dict[str, Topic] = {}
        self.connections: set[ServerCnx] = set()
        self._init_limits(config)
        self._init_probes(config)
        self.metrics = BrokerMetrics(self)
        self.rates = RateTracker()  # moving-window msg/byte rates for the stats
        self.replies = ReplyRouter(self)
        self.requests = RequestLog(
            config.rpc_remembered_requests, config.rpc_reply_hold_seconds, self.clock
        )
        self._init_policies(config)
        self._producer_seq = itertools.count()
        self._started_ms = self.clock_ms() % (1 << 40)
        self._server: asyncio.AbstractServer | None = None
        self._init_security(config)
        self._tls_server: asyncio.AbstractServer | None = None
        self._timers: list[asyncio.Task[None]] = []
        self._stopping = False
        self._unloading: dict[str, asyncio.Future[None]] = {}
        self._loading: dict[str, asyncio.Future[Topic]] = {}
        self._unload_wanted = asyncio.Event()  # loads passed max_unused_loaded_topics
        self._in_use = 0  # topics with clients at the last unload pass
        # Topic loads run Python (recovery, metadata, cursors) while they hold the GIL:
        # with the default pool's six threads loading at once, the loop thread waited
        # its turn behind each of them after every system call (100-200 ms stalls while
        # 10,000 topics were touched). Two threads keep loads off the loop and the loop's
        # wait for the GIL short; further loads queue.
        self._loader = ThreadPoolExecutor(max_workers=2, thread_name_prefix="magnetar-load")
        self._relieving: asyncio.Task[int] | None = None
        self._info_trimmed_share = config.entry_info_cache_max_entries
        self._init_storage(config)
        self.namespaces = NamespaceRegistry(
            config.data_dir,
            auto_create=config.allow_auto_namespace_creation,
            topics_in=lambda namespace: self.topics_of_namespace(
                namespace, pb.CommandGetTopicsOfNamespace.ALL
            ),
            on_deleted=self._namespace_deleted,
        )

    def _init_limits(self, config: BrokerConfig) -> None:
        """Connection limits and the buffers the connections share."""
        self.connection_limits = ConnectionLimits(
            config.max_connections, config.max_connections_per_ip
        )
        self.publish_buffer = PublishBuffer(config.max_message_publish_buffer_bytes)
        self.unauthenticated_buffers = UnauthenticatedBuffers(
            config.max_unauthenticated_buffer_bytes
        )

    def _init_probes(self, config: BrokerConfig) -> None:
        """The probes that watch the process: loop lag, stalls, GC pauses."""
        self.loop_lag = LoopLagProbe(config.loop_lag_probe_interval)
        self.stall_tracer = StallTracer(config.loop_stall_trace_seconds)
        self.gc_pauses = GcPauseRecorder()
        if self.loop_lag.enabled and self.stall_tracer.enabled:
            self.loop_lag.on_wake = self.stall_tracer.beat

    def _init_policies(self, config: BrokerConfig) -> None:
        """The policies in force on topics (broker defaults from ``config``); compaction."""
        self.backoff_policies = BackoffPolicies(
            RedeliveryBackoffPolicy.from_config(config), config.data_dir
        )
        self.dedup_settings = settings_from_config(config)
        self.dedup_policies = DedupPolicies(
            config.broker_deduplication_enabled,
            config.data_dir,
            on_namespace_written=self._namespace_policies_written,
        )
        # Retention, message TTL and backlog quotas (broker/policies/topic_policies.py).
        self.retention_policies = RetentionPolicyStore(
            config, config.data_dir, on_namespace_written=self._namespace_policies_written
        )
        self.topic_policies = PolicyEnforcer(self.retention_policies, config, self.clock)
        self.compaction = CompactionService(self)

    def _init_security(self, config: BrokerConfig) -> None:
        """Authentication, authorization and TLS: None when off (the handlers then check
        nothing)."""
        self.authentication = build_authentication(config)
        self.authorization = build_authorization(
            config,
            self._namespace_policies_written,
            lambda tenant: self.namespaces.admin_roles(tenant),  # set below, used later
        )
        self.tls_context = build_tls_context(config)

    def _init_storage(self, config: BrokerConfig) -> None:
        """The data directory's lock and the stores: persistent topics, and beside them
        the non-persistent ones."""
        self._dir_lock = DataDirLock(config.data_dir)
        ledger_config = LedgerConfig(
            segment_max_bytes=config.segment_max_bytes,
            cache_max_bytes=config.cache_max_bytes,
            sync_policy=config.sync_policy,
            sync_interval=config.sync_interval,
            inline_sync_max_entries=config.inline_sync_max_entries,
            inline_sync_max_seconds=config.inline_sync_max_seconds,
            reserve_max_bytes=config.segment_reserve_max_bytes,
            max_open_segment_files=config.max_open_segment_files,
        )
        self.store = Store(config.data_dir, ledger_config)
        scratch = config.data_dir / NON_PERSISTENT_DIR
        # One entry cache and one bound on open sealed segments for the whole broker:
        # non-persistent topics draw from the persistent store's, so cache_max_bytes
        # and max_open_segment_files bound them all together.
        self.scratch_store = Store(
            scratch,
            LedgerConfig(
                segment_max_bytes=config.segment_max_bytes,
                cache_max_bytes=config.cache_max_bytes,
                sync_policy="interval",
                sync_interval=1.0,
            ),
            cache=self.store.cache,
            segment_files=self.store.segment_files,
        )
        self._scratch_dir = scratch

    def clock_ms(self) -> int:
        return int(self.clock() * 1000)

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Lock the data directory and listen. A setting that stops it (a port in use,
        a data directory it cannot create) raises ConfigError; another broker on the
        data directory raises DataDirInUse. Either way nothing is left held."""
        self.loop = asyncio.get_running_loop()
        self.idle_poller = IdlePoller(self.loop, self.config.idle_poll_us / 1e6)
        try:
            self._dir_lock.acquire()  # before anything in the directory is touched
        except OSError as exc:
            reason = f"cannot lock it: {os_reason(exc)}"
            raise ConfigError("data_dir", self.config.data_dir, reason) from None
        try:
            # Non-persistent topics keep nothing across restarts.
            shutil.rmtree(self._scratch_dir, ignore_errors=True)
            self.namespaces.load()  # before clients can come
            self._server = await self._listen()
            if self.config.port == 0:
                self.config.port = self._server.sockets[0].getsockname()[1]
            await self._listen_tls()
        except BaseException:
            if self._tls_server is not None:
                self._tls_server.close()
                self._tls_server = None
            if self._server is not None:
                self._server.close()
                await self._server.wait_closed()
                self._server = None
            self._dir_lock.release()
            raise
        self._timers.append(self.loop.create_task(self._cursor_flusher()))
        self._timers.append(self.loop.create_task(self._retention()))
        self._timers.append(self.loop.create_task(self._idle_unloader()))
        self._timers.append(self.loop.create_task(self._dedup_monitor()))
        loaded = self.topics.values
        self._timers.append(self.loop.create_task(self.topic_policies.expiry_monitor(loaded)))
        self._timers.append(
            self.loop.create_task(self.topic_policies.backlog_quota_monitor(loaded))
        )
        self._timers.append(self.loop.create_task(self.compaction.monitor()))
        self._timers.append(self.loop.create_task(self.loop_lag.run()))
        self._timers.append(self.loop.create_task(self.rates.run(loaded, self.clock)))
        if self.loop_lag.enabled:
            self.stall_tracer.start()
        self.gc_pauses.install()
        log.info(
            "magnetar broker listening on %s (data in %s, sync policy %s)",
            self.config.service_url,
            self.config.data_dir,
            self.config.sync_policy,
        )

    async def _listen_tls(self) -> None:
        """The pulsar+ssl:// listener, when TLS is configured."""
        port = self.config.tls_port
        if self.tls_context is None or port is None:
            return
        try:
            self._tls_server = await self.loop.create_server(
                lambda: ServerCnx(self), self.config.host, port,
                ssl=self.tls_context, reuse_address=True,
            )
        except OSError as exc:
            raise listen_error("tls_port", "host", self.config.host, port, exc) from None
        if port == 0:
            self.config.tls_port = self._tls_server.sockets[0].getsockname()[1]
        log.info("magnetar broker listening on %s (TLS)", self.config.service_url_tls)

    async def _listen(self) -> asyncio.Server:
        try:
            return await self.loop.create_server(
                lambda: ServerCnx(self), self.config.host, self.config.port, reuse_address=True
            )
        except OSError as exc:
            raise listen_error("port", "host", self.config.host, self.config.port, exc) from None

    @property
    def serving(self) -> bool:
        """Listening and not stopping (the admin health check)."""
        return self._server is not None and not self._stopping

    @property
    def service_url(self) -> str:
        return self.config.service_url

    async def stop(self) -> None:
        if self._stopping:
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        if self._tls_server is not None:
            self._tls_server.close()
        for task in self._timers:
            task.cancel()
        self.compaction.shutdown()
        self.stall_tracer.stop()
        self.gc_pauses.uninstall()
        for cnx in list(self.connections):
            cnx.close()
        for topic in list(self.topics.values()):
            try:
                await topic.close()
            except Exception:
                log.exception("error closing topic %s", topic.name)
        self.topics.clear()
        if self._server is not None:
            await self._server.wait_closed()
        if self._tls_server is not None:
            await self._tls_server.wait_closed()
        self._loader.shutdown(wait=False, cancel_futures=True)
        self._dir_lock.release()  # last: the topics are flushed and closed
        log.info("magnetar broker stopped")

    async def _cursor_flusher(self) -> None:
        while True:
            await asyncio.sleep(self.config.cursor_flush_interval)
            self.replies.expire()
            await self._flush_cursors()

    async def _flush_cursors(self) -> None:
        # A pass of its own, so that no loop variable holds the last topic while the
        # flusher sleeps (an unloaded topic must be free to go).
        # The cursor files are written and fsynced on a worker thread, one topic
        # at a time so that the fsyncs of publishes never queue behind many of them.
        for topic in list(self.topics.values()):
            try:
                if topic.ledger.has_dirty_cursors():
                    await topic.ledger.flush_cursors_async()
            except Exception:
                log.exception("flushing cursors of %s failed", topic.name)

    async def _idle_unloader(self) -> None:
        """Unload topics nobody has used for ``topic_idle_unload_seconds``, and the
        longest unused beyond ``max_unused_loaded_topics``: their files are closed and
        their state dropped (each loaded topic costs about 20 KB and 3 descriptors);
        the next use loads them again."""
        idle_after = self.config.topic_idle_unload_seconds
        max_unused = self.config.max_unused_loaded_topics
        if idle_after <= 0 and max_unused <= 0:
            return
        period = min(idle_after if idle_after > 0 else 10.0, 10.0) / 2
        idle_since: dict[str, float] = {}
        while True:
            # A pass every few seconds, or at once when loads take the count over the
            # bound: at 250 new topics a second, a pass every 5 s let 1,250 more pile
            # up, and every loaded topic lengthens the garbage collector's full pauses
            # (72 tracked objects each; 1,000 topics: 17 ms on an idle machine).
            timer = self.loop.call_later(period, self._unload_wanted.set)
            try:
                await self._unload_wanted.wait()
            finally:
                timer.cancel()
            self._unload_wanted.clear()
            await self._unload_pass(idle_since, idle_after, max_unused)

    async def _unload_pass(
        self, idle_since: dict[str, float], idle_after: float, max_unused: int
    ) -> None:
        # A pass of its own, so that no local holds an unloaded topic while the
        # unloader waits for the next pass.
        now = self.loop.time()
        unused: list[tuple[float, Topic]] = []
        for name, topic in list(self.topics.items()):
            if topic.has_clients():
                idle_since.pop(name, None)
                continue
            since = idle_since.setdefault(name, now)
            if 0 < idle_after <= now - since:
                idle_since.pop(name, None)
                await self.unload_topic(topic, "idle")
                await asyncio.sleep(0)  # thousands of topics: never one long stall
            else:
                unused.append((since, topic))
        self._in_use = len(self.topics) - len(unused)
        if 0 < max_unused < len(unused):
            unused.sort(key=lambda pair: pair[0])
            excess = [topic for _since, topic in unused[: len(unused) - max_unused]]
            for start in range(0, len(excess), UNLOAD_GROUP):
                # A group at a time, as a relief does: one by one, unloads fell
                # behind 250 new topics a second and the loaded ones piled up.
                await asyncio.gather(*(
                    self._unload_if_unused(topic, "over max_unused_loaded_topics")
                    for topic in excess[start : start + UNLOAD_GROUP]
                ))
                for topic in excess[start : start + UNLOAD_GROUP]:
                    idle_since.pop(topic.name, None)
        for name in [n for n in idle_since if n not in self.topics]:
            del idle_since[name]

    async def _retention(self) -> None:
        while True:
            await asyncio.sleep(self.config.retention_check_interval)
            await self._apply_retention()

    async def _apply_retention(self) -> None:
        # A pass of its own, so that no loop variable holds the last topic (or its
        # ledger) while the retention task sleeps.
        for topic in list(self.topics.values()):
            try:
                # What the retention policy lets go (topic_policies.py); a trim
                # must not take entries a dedup replay would need.
                ledger = topic.ledger
                marks = [cursor.mark_delete for cursor in ledger.cursors.values()]
                consumed = min(marks) + 1 if marks else ledger.next_entry_id
                bound = self.topic_policies.retention_bound(topic, consumed)
                if bound > ledger.first_entry_id and topic.dedup.enabled:
                    await topic.dedup.snapshot_now(bound - 1)
                removed = await ledger.trim_consumed_async(
                    functools.partial(self.topic_policies.retention_bound, topic)
                )
                if removed:
                    log.info("retention removed %d entries of %s", removed, topic.name)
            except Exception:
                log.exception("retention on %s failed", topic.name)
            await asyncio.sleep(0)  # thousands of topics: one turn each, not one stall

    async def _dedup_monitor(self) -> None:
        """Deduplication's periodic work on every topic that has it on: forget
        producers inactive too long, snapshot topics whose snapshot is old."""
        interval = self.config.broker_deduplication_snapshot_interval_seconds
        period = min(60.0, max(1.0, interval)) if interval > 0 else 60.0
        while True:
            await asyncio.sleep(period)
            for index, topic in enumerate(list(self.topics.values())):
                if topic.dedup.enabled:
                    topic.dedup.tick()
                if index % 500 == 499:
                    await asyncio.sleep(0)  # thousands of topics: never one long stall

    def apply_deduplication(self, topic: Topic) -> None:
        """Turn deduplication on or off on a loaded topic as the policies say now."""
        topic.dedup.apply(self.dedup_policies.enabled_for(topic))

    def _namespace_policies_written(self, tenant: str, namespace: str) -> None:
        # The file is shared with the redelivery backoff's policies: drop its cached
        # copy, or its next write would put back the file as it was before this one.
        self.backoff_policies._namespaces.pop(f"{tenant}/{namespace}", None)

    def _namespace_deleted(self, tenant: str, namespace: str) -> None:
        # Its policies file is gone: each holder drops what it cached of it, so that a
        # namespace of the same name created later starts bare.
        self.backoff_policies.forget_namespace(tenant, namespace)
        self.dedup_policies._namespaces.pop(f"{tenant}/{namespace}", None)
        self.retention_policies.forget_namespace(tenant, namespace)
        self.compaction._namespaces.pop(f"{tenant}/{namespace}", None)
        if self.authorization is not None:
            self.authorization.forget_namespace(tenant, namespace)

    # ------------------------------------------------------------ connections

    def connection_opened(self, cnx: ServerCnx) -> None:
        self.connections.add(cnx)

    def connection_closed(self, cnx: ServerCnx) -> None:
        self.connections.discard(cnx)

    def generate_producer_name(self) -> str:
        # The start time keeps names unique across restarts: producers that reconnect
        # after one keep the names they were given before it.
        return f"standalone-{self.config.port}-{self._started_ms:x}-{next(self._producer_seq)}"

    # ------------------------------------------------------------ topics

    def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """Create ``topic`` with ``partitions`` partitions (Python API; admin REST uses it too)."""
        if partitions < 1:
            raise ValueError("a partitioned topic needs at least one partition")
        cap = self.config.max_partitions_per_topic
        if cap and partitions > cap:
            # Pulsar's words for its maxNumPartitionsPerPartitionedTopic
            raise ValueError(f"Number of partitions should be less than or equal to {cap}")
        name = TopicName.parse(topic)
        if name.partition_index >= 0:
            raise InvalidTopicName(f"{topic} is itself a partition name")
        full = str(name)
        if self.store.get_partitions(full):
            raise FileExistsError(f"partitioned topic {full} already exists")
        if self._exists(name):
            raise FileExistsError(f"non-partitioned topic {full} already exists")
        self.namespaces.ensure(name.namespace_name)
        self.store.set_partitions(full, partitions)
        for index in range(partitions):
            self.get_topic(name.partition(index), create=True)
        log.info("created partitioned topic %s with %d partitions", full, partitions)

    def partitions_for_lookup(self, name: TopicName, auto_create: bool) -> int:
        full = str(name)
        known = self.store.get_partitions(full)
        if known:
            return known
        if name.partition_index >= 0 or not name.persistent:
            return 0
        default = self.config.default_partitions
        if (
            default > 0
            and auto_create
            and self.config.allow_auto_topic_creation
            and not self._exists(name)
        ):
            self.create_partitioned_topic(full, default)
            return default
        return 0

    def topics_of_namespace(self, namespace: str, mode: int) -> list[str]:
        prefix_parts = namespace.strip("/").split("/")
        if len(prefix_parts) != 2:
            return []
        tenant, ns = prefix_parts
        names: set[str] = set(self.topics)
        names.update(self.store.list_topics())
        for parent, count in self.store.list_partitioned().items():
            base = TopicName.parse(parent)
            names.update(str(base.partition(i)) for i in range(count))
        out = []
        for full in names:
            try:
                name = TopicName.parse(full)
            except InvalidTopicName:
                continue
            if (name.tenant, name.namespace) != (tenant, ns):
                continue
            if mode == pb.CommandGetTopicsOfNamespace.PERSISTENT and not name.persistent:
                continue
            if mode == pb.CommandGetTopicsOfNamespace.NON_PERSISTENT and name.persistent:
                continue
            out.append(full)
        return sorted(out)

    def terminate_topic(self, topic: str) -> MessageId:
        """No more messages may be published; consumers learn when they reach the end.
        Returns the id of the last message."""
        loaded = self.get_topic(TopicName.parse(topic), create=False)
        last = loaded.terminate()
        for producer in list(loaded.producers.values()):
            producer.cnx.close_producer_by_broker(producer)
        log.info("terminated topic %s at %s", loaded.name, last)
        return last

    async def delete_topic(self, topic: str, *, force: bool = False) -> None:
        name = TopicName.parse(topic)
        full = str(name)
        loaded = self.topics.get(full)
        if loaded is not None:
            if loaded.has_clients() and not force:
                raise RuntimeError(f"topic {full} has connected producers or consumers")
            for sub in loaded.subscriptions.values():
                for consumer in list(sub.consumers):
                    consumer.cnx.consumer_closed_by_broker(consumer)
            for producer in list(loaded.producers.values()):
                producer.cnx.close_producer_by_broker(producer)
            await loaded.close()
            del self.topics[full]
        self._store_for(name).delete_topic(full)

    async def delete_partitioned_topic(self, topic: str, *, force: bool = False) -> None:
        """Delete every partition, then the partitioned topic itself. LookupError if
        it is not partitioned; RuntimeError (nothing deleted) if clients are attached
        and not ``force``."""
        name = TopicName.parse(topic)
        full = str(name)
        count = self.store.get_partitions(full)
        if not count:
            raise LookupError(f"partitioned topic {full} not found")
        partitions = [str(name.partition(index)) for index in range(count)]
        if not force:
            for partition in partitions:
                loaded = self.topics.get(partition)
                if loaded is not None and loaded.has_clients():
                    raise RuntimeError(f"{partition} has connected producers or consumers")
        for partition in partitions:
            await self.delete_topic(partition, force=True)
        self.store.delete_partitioned(full)
        log.info("deleted partitioned topic %s (%d partitions)", full, count)

    # ------------------------------------------------------------ hooks

    def on_producer_closed(self, topic: Topic, producer: Producer, explicit: bool) -> None:
        self.replies.producer_closed(topic, producer, explicit)
