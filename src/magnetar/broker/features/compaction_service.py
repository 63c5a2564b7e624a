"""Topic compaction on the loop: what triggers it, its status, and putting a finished
compaction in force (the compactor itself runs on a worker thread, see compaction.py).

As in Pulsar: the admin API triggers a compaction of a topic (one at a time per topic,
another request meanwhile is refused) and reports its status as Pulsar's
LongRunningProcessStatus (``NOT_RUN``, ``RUNNING``, ``SUCCESS``, ``ERROR`` with
``lastError``; a topic loaded again starts at ``NOT_RUN``). The ``compactionThreshold``
policy (the topic's, else its namespace's, else the broker's
``broker_service_compaction_threshold_in_bytes``; 0 is off) triggers it when the bytes
the ``__compaction`` subscription has not consumed exceed it, checked every
``broker_service_compaction_monitor_interval_in_seconds``. That subscription is a
durable cursor like any other: the compaction moves it to the horizon once the new
compacted ledger is in force, so retention keeps every entry a compaction has not read
yet; it is created when a compaction first runs, or as soon as a threshold is in force
(Pulsar's preCreateSubscriptionForCompactionIfNeeded).

The compactions of the broker share one worker thread, so compacting many topics never
takes more than one core nor the threads the fsyncs use.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from magnetar.broker.features.compaction import run_compaction
from magnetar.broker.policies.hierarchy import in_force
from magnetar.protocol.pb import pb
from magnetar.storage.compacted_ledger import compacted_dir, delete_file, new_file_name
from magnetar.storage.metadata import NamespacePolicies

if TYPE_CHECKING:
    from magnetar.broker.config.settings import Settings
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.broker.topics.topic import Topic
    from magnetar.storage.compacted_ledger import CompactedLedger

log = logging.getLogger("magnetar.broker.compaction")

COMPACTION_SUBSCRIPTION = "__compaction"  # Pulsar's Compactor.COMPACTION_SUBSCRIPTION
POLICY_NAME = "compactionThreshold"  # in topic policies; Pulsar's namespace field is
# compaction_threshold, kept here under the REST name as the other policies are


class CompactionAlreadyRunning(Exception):
    """Pulsar's AlreadyRunningException: answered 409 by the admin API."""


class CompactionNotAllowed(Exception):
    """Compaction of a topic that cannot have it (non-persistent)."""


class CompactionAborted(Exception):
    """The topic was unloaded or deleted while its compaction ran."""


@dataclass
class CompactionState:
    """One loaded topic's compaction: the one running, and how the last one ended."""

    task: asyncio.Task[None] | None = None
    error: str | None = None
    succeeded: bool = False
    # Pulsar's CompactionStats of the topic (epoch ms; 0: not yet).
    removed: int = 0
    succeeded_ms: int = 0
    failed_ms: int = 0
    duration_ms: int = 0

    def stats(self) -> dict[str, int]:
        """Pulsar's CompactionStats, as the topic's stats give it under ``compaction``."""
        return {
            "lastCompactionRemovedEventCount": self.removed,
            "lastCompactionSucceedTimestamp": self.succeeded_ms,
            "lastCompactionFailedTimestamp": self.failed_ms,
            "lastCompactionDurationTimeInMills": self.duration_ms,
        }

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def status(self) -> dict[str, str]:
        """Pulsar's LongRunningProcessStatus as its admin API spells it."""
        if self.running:
            return {"status": "RUNNING", "lastError": ""}
        if self.error is not None:
            return {"status": "ERROR", "lastError": self.error}
        return {"status": "SUCCESS" if self.succeeded else "NOT_RUN", "lastError": ""}


class CompactionHost(Protocol):
    """What compaction needs of the broker service (BrokerService has it): its settings,
    its loaded topics, and the hook that says a namespace's policies were written."""

    @property
    def config(self) -> Settings: ...
    @property
    def topics(self) -> dict[str, Topic]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    def _namespace_policies_written(self, tenant: str, namespace: str) -> None: ...


class CompactionService:
    """The broker's compactions and compaction thresholds. Loop thread only."""

    def __init__(self, service: CompactionHost) -> None:
        config = service.config
        self._service = service
        self.default_threshold = config.broker_service_compaction_threshold_in_bytes
        self.interval = config.broker_service_compaction_monitor_interval_in_seconds
        self.retain_null_key = config.topic_compaction_retain_null_key
        self._data_dir = Path(config.data_dir)
        self._executor = ThreadPoolExecutor(max_workers=1,
                                            thread_name_prefix="magnetar-compaction")
        self._cancelled = threading.Event()
        self._states: weakref.WeakKeyDictionary[Topic, CompactionState] = (
            weakref.WeakKeyDictionary()
        )
        self._namespaces: dict[str, int | None] = {}

    # ------------------------------------------------------------ trigger and status

    def state(self, topic: Topic) -> CompactionState:
        state = self._states.get(topic)
        if state is None:
            state = self._states[topic] = CompactionState()
        return state

    def status(self, topic: Topic) -> dict[str, str]:
        return self.state(topic).status()

    def trigger(self, topic: Topic) -> asyncio.Task[None]:
        """Start compacting ``topic``; CompactionAlreadyRunning if it is already."""
        if not topic.topic_name.persistent:
            raise CompactionNotAllowed(f"{topic.name} is not persistent: no compaction")
        state = self.state(topic)
        if state.running:
            raise CompactionAlreadyRunning("Compaction already in progress")
        state.error = None
        state.succeeded = False
        task = asyncio.get_running_loop().create_task(self._run(topic, state))
        state.task = task
        return task

    async def _run(self, topic: Topic, state: CompactionState) -> None:
        clock = self._service.clock
        started = clock()
        try:
            removed = await self._compact(topic)
        except asyncio.CancelledError:
            state.error = "cancelled: the broker is stopping"
            raise
        except Exception as exc:
            state.error = str(exc) or type(exc).__name__
            state.failed_ms = int(clock() * 1000)
            log.error("compaction of %s failed: %s", topic.name, state.error,
                      exc_info=not isinstance(exc, CompactionAborted))
        else:
            state.succeeded = True
            now = clock()
            state.removed = removed
            state.succeeded_ms = int(now * 1000)
            state.duration_ms = max(int((now - started) * 1000), 0)

    async def _compact(self, topic: Topic) -> int:
        """Compact ``topic``; the number of entries it removed."""
        loop = asyncio.get_running_loop()
        ledger = topic.ledger
        subscription = self.compaction_subscription(topic)  # before the snapshot
        previous = ledger.compacted
        start = ledger.first_entry_id if previous is None else previous.horizon + 1
        start = max(start, ledger.first_entry_id)
        horizon = ledger.last_confirmed_entry_id
        if horizon < start:
            log.info("compaction of %s: nothing new since the last one", topic.name)
            return 0  # as Pulsar's "Skip compaction of the empty topic"
        snapshot = ledger.log_snapshot(start, horizon)
        generation = int(topic.metadata.compaction.get("generation", 0)) + 1
        target = compacted_dir(ledger.directory) / new_file_name(generation)
        log.info("compacting %s: %s and entries %d..%d", topic.name,
                 previous.path.name if previous else "no compacted ledger", start, horizon)
        job = functools.partial(
            run_compaction, previous.path if previous is not None else None, snapshot,
            target, horizon, self.retain_null_key, self._cancelled,
        )
        result = await loop.run_in_executor(self._executor, job)
        if topic.closed or ledger.compacted is not previous:
            self._discard(result.ledger)
            raise CompactionAborted(f"{topic.name} was unloaded during its compaction")
        self._put_in_force(topic, result.ledger, generation)
        if subscription is not None and topic.subscriptions.get(COMPACTION_SUBSCRIPTION) is (
            subscription
        ):
            if subscription.cursor.mark_delete < horizon:
                subscription.cursor.ack_cumulative(horizon)
            subscription.read_position = max(subscription.read_position, horizon + 1)
        log.info("compacted %s up to %d: %d entries read, %d keys, %d entries kept",
                 topic.name, horizon, result.entries_read, result.keys, result.ledger.count)
        return max(result.entries_read - result.ledger.count, 0)

    def _put_in_force(self, topic: Topic, compacted: CompactedLedger, generation: int) -> None:
        metadata = topic.metadata
        before = metadata.compaction
        metadata.compaction = {"generation": generation, "file": compacted.path.name,
                               "horizon": compacted.horizon}
        try:
            metadata.save()
        except BaseException:
            metadata.compaction = before
            self._discard(compacted)
            raise
        previous = topic.ledger.compacted
        topic.ledger.compacted = compacted
        if previous is not None:
            previous.close()
            self._discard_file(previous.path)
        for subscription in topic.subscriptions.values():
            if subscription.read_compacted:
                subscription.schedule_dispatch()

    def _discard(self, compacted: CompactedLedger) -> None:
        compacted.close()
        self._discard_file(compacted.path)

    def _discard_file(self, path: Path) -> None:
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, delete_file,
                                                                path)
        except RuntimeError:
            return  # stopping: the next load of the topic removes the file
        future.add_done_callback(functools.partial(_log_failure, path))

    def compaction_subscription(self, topic: Topic) -> Subscription | None:
        """The topic's ``__compaction`` subscription, created at the earliest entry if
        it has none (None if it cannot have one: non-persistent)."""
        if not topic.topic_name.persistent:
            return None
        existing = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if existing is not None:
            return existing
        return topic.subscription(COMPACTION_SUBSCRIPTION, pb.CommandSubscribe.Exclusive,
                                  True, pb.CommandSubscribe.Earliest, None)

    # ------------------------------------------------------------ threshold policy

    def namespace_threshold(self, tenant: str, namespace: str) -> int | None:
        key = f"{tenant}/{namespace}"
        if key not in self._namespaces:
            path = NamespacePolicies.path_for(self._data_dir, tenant, namespace)
            self._namespaces[key] = _parse(NamespacePolicies.load(path).policies.get(POLICY_NAME))
        return self._namespaces[key]

    def set_namespace_threshold(self, tenant: str, namespace: str, value: int | None) -> None:
        """Set (None: remove) the namespace's threshold, persisted before it applies."""
        path = NamespacePolicies.path_for(self._data_dir, tenant, namespace)
        current = NamespacePolicies.load(path)  # afresh: other policies share the file
        policies = dict(current.policies)
        if value is None:
            policies.pop(POLICY_NAME, None)
        else:
            policies[POLICY_NAME] = value
        NamespacePolicies(current.path, policies).save()  # a failed write changes nothing
        self._namespaces[f"{tenant}/{namespace}"] = value
        self._service._namespace_policies_written(tenant, namespace)
        for topic in list(self._service.topics.values()):
            name = topic.topic_name
            if (name.tenant, name.namespace) == (tenant, namespace) and not topic.closed:
                self.topic_loaded(topic)

    @staticmethod
    def topic_threshold(topic: Topic) -> int | None:
        return _parse(topic.metadata.policies.get(POLICY_NAME))

    def set_topic_threshold(self, topic: Topic, value: int | None) -> None:
        """Set (None: remove) the topic's threshold, persisted in its metadata."""
        topic.metadata.set_policy(POLICY_NAME, value)
        self.topic_loaded(topic)

    def applied_threshold(self, topic: Topic) -> int:
        """The threshold in force: the topic's, else its namespace's, else the broker's."""
        return in_force(
            self.topic_threshold(topic),
            topic.topic_name,
            self.namespace_threshold,
            self.default_threshold,
        )

    def topic_loaded(self, topic: Topic) -> None:
        """With a threshold in force the ``__compaction`` cursor exists from the start,
        so that the compactor sees every entry."""
        if topic.topic_name.persistent and self.applied_threshold(topic) > 0:
            self.compaction_subscription(topic)

    def backlog_bytes(self, topic: Topic) -> int:
        """What the ``__compaction`` subscription has not consumed, in bytes (estimated
        from the average entry size, as Pulsar's estimateBacklogSize); the whole log
        if there is no such subscription."""
        ledger = topic.ledger
        total = ledger.size_bytes()
        subscription = topic.subscriptions.get(COMPACTION_SUBSCRIPTION)
        if subscription is None:
            return total
        entries = ledger.entry_count()
        unread = ledger.next_entry_id - max(subscription.cursor.mark_delete + 1,
                                            ledger.first_entry_id)
        return total * max(unread, 0) // entries if entries else 0

    def check(self, topic: Topic) -> bool:
        """Trigger a compaction of ``topic`` if its backlog exceeds the threshold in
        force; True if one was started."""
        if topic.closed or not topic.topic_name.persistent or self.state(topic).running:
            return False
        threshold = self.applied_threshold(topic)
        if threshold <= 0 or self.backlog_bytes(topic) <= threshold:
            return False
        log.info("compaction of %s triggered: backlog over compactionThreshold %d",
                 topic.name, threshold)
        self.trigger(topic)
        return True

    async def monitor(self) -> None:
        """The periodic threshold check over the loaded topics."""
        while True:
            await asyncio.sleep(self.interval)
            for index, topic in enumerate(list(self._service.topics.values())):
                try:
                    self.check(topic)
                except Exception:
                    log.exception("compaction check of %s failed", topic.name)
                if index % 500 == 499:
                    await asyncio.sleep(0)  # thousands of topics: never one long stall

    def shutdown(self) -> None:
        """The broker stops: running compactions end without leaving anything."""
        self._cancelled.set()
        for state in list(self._states.values()):
            if state.task is not None:
                state.task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


def _parse(value: Any) -> int | None:
    # A hand-edited file with something else in it counts as unset.
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _log_failure(path: Path, future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("could not delete %s: %r", path, future.exception())
