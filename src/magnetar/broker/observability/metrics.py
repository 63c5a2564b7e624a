"""Prometheus metrics of one broker, with Pulsar's metric names where Pulsar has one.

Topic gauges and counters are computed at scrape time from the topics' own
counters, so the publish and dispatch paths pay nothing for them. Rates are the moving
window rates the admin stats report (broker/observability/rates.py), so both agree; topics on disk
but not loaded show their stored bytes from a cached walk (disk_topics.py) and zero
everywhere else.
"""

from __future__ import annotations

import asyncio
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import (
    CollectorRegistry,
    Counter,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from magnetar.broker.observability.topic_exposition import TopicExposition
from magnetar.broker.observability.topic_rows import _disk_row, _SubscriptionRow, _TopicRow
from magnetar.broker.topics.disk_topics import DiskTopics
from magnetar.storage.write_latency import BUCKETS as WRITE_LATENCY_BUCKETS

if TYPE_CHECKING:
    from magnetar.broker.observability.source import MetricsSource
    from magnetar.broker.topics.topic import Topic


class RoundTrips:
    """PIP-371 round trips, from a request's publish time to its reply reaching the
    broker, as plain bucket counts: the reply path pays a bisect and two additions,
    and the histogram is built at scrape time.

    The publish time is the requester's (milliseconds, in the message metadata), so
    a figure can be up to a millisecond long and carries any skew between the
    requester's clock and the broker's; the buckets start at a millisecond.
    """

    BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    __slots__ = ("counts", "total")

    def __init__(self) -> None:
        self.counts = [0] * (len(self.BUCKETS) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(seconds, 0.0)  # a requester clock ahead of ours
        self.counts[bisect_left(self.BUCKETS, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def family(self) -> HistogramMetricFamily:
        family = HistogramMetricFamily(
            "magnetar_rpc_round_trip_seconds",
            "PIP-371 requests answered: time from the request's publish (the requester's "
            "clock, millisecond resolution) to its reply reaching the broker",
        )
        cumulative, buckets = 0, []
        for bound, count in zip((*self.BUCKETS, float("inf")), self.counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        family.add_metric([], buckets, self.total)
        return family


# Pulsar has no ..._created series; prometheus_client adds one per counter unless told.
disable_created_metrics()  # type: ignore[no-untyped-call]

_TOPIC_LABELS = ["cluster", "namespace", "topic"]
_SUBSCRIPTION_LABELS = [*_TOPIC_LABELS, "subscription"]
_SNAPSHOT_CHUNK = 500  # topics read per event loop turn while a scrape snapshots them


Rate = Callable[[object, str], float]  # RateTracker.rate: (topic or consumer, counter)


def _subscription_rows(topic: Topic, rate: Rate) -> tuple[_SubscriptionRow, ...]:
    return tuple(
        _SubscriptionRow(
            name, sub.backlog(), len(sub.pending),
            sum(rate(c, "msg_out") for c in sub.consumers),
        )
        for name, sub in topic.subscriptions.items()
    )


def _topic_row(topic: Topic, backlog_size: Callable[[Topic], int], rate: Rate) -> _TopicRow:
    subs = topic.subscriptions.values()
    ledger_stats = topic.ledger.stats
    latency = ledger_stats.write_latency
    return _TopicRow(
        topic.topic_name.namespace_name,
        topic.name,
        topic.stats.messages_in,
        topic.stats.bytes_in,
        topic.stats.messages_out,
        topic.ledger.size_bytes(),
        sum(s.backlog() for s in subs),
        len(topic.producers),
        len(topic.subscriptions),
        sum(len(s.consumers) for s in subs),
        topic.metadata.topic_epoch,
        ledger_stats.syncs,
        ledger_stats.inline_syncs,
        topic.stats.bytes_out,
        rate(topic, "msg_in"),
        rate(topic, "msg_out"),
        rate(topic, "bytes_in"),
        rate(topic, "bytes_out"),
        backlog_size(topic),
        tuple(latency.counts),
        latency.total,
        _subscription_rows(topic, rate),
    )


def _topic_families(rows: list[_TopicRow]) -> Iterator[Metric]:
    labels = _TOPIC_LABELS
    msg_in = CounterMetricFamily("pulsar_in_messages", "Messages published", labels=labels)
    bytes_in = CounterMetricFamily("pulsar_in_bytes", "Bytes published", labels=labels)
    msg_out = CounterMetricFamily("pulsar_out_messages", "Messages dispatched", labels=labels)
    storage = GaugeMetricFamily("pulsar_storage_size", "Bytes stored", labels=labels)
    backlog = GaugeMetricFamily("pulsar_msg_backlog", "Unacked entries", labels=labels)
    producers = GaugeMetricFamily("pulsar_producers_count", "Producers", labels=labels)
    subs = GaugeMetricFamily("pulsar_subscriptions_count", "Subscriptions", labels=labels)
    consumers = GaugeMetricFamily("pulsar_consumers_count", "Consumers", labels=labels)
    epoch = GaugeMetricFamily("magnetar_topic_epoch", "PIP-68 topic epoch", labels=labels)
    fsyncs = CounterMetricFamily(
        "magnetar_storage_fsyncs",
        "fdatasyncs of the topic's log, on the event loop (small groups) or a worker",
        labels=[*labels, "thread"],
    )
    rate_families = _RateFamilies()
    for row in rows:
        values = ["standalone", row.namespace, row.name]
        rate_families.add(row, values)
        msg_in.add_metric(values, row.messages_in)
        bytes_in.add_metric(values, row.bytes_in)
        msg_out.add_metric(values, row.messages_out)
        storage.add_metric(values, row.storage)
        backlog.add_metric(values, row.backlog)
        producers.add_metric(values, row.producers)
        subs.add_metric(values, row.subscriptions)
        consumers.add_metric(values, row.consumers)
        epoch.add_metric(values, row.epoch)
        fsyncs.add_metric([*values, "loop"], row.inline_syncs)
        fsyncs.add_metric([*values, "worker"], row.syncs - row.inline_syncs)
    yield from (msg_in, bytes_in, msg_out, storage, backlog, producers, subs, consumers)
    yield from (epoch, fsyncs)
    yield from rate_families.families()


# Pulsar's names for WRITE_LATENCY_BUCKETS (ms: le_0_5 is 0.5 ms) and the +Inf one.
_PULSAR_LATENCY_GAUGES = (
    *((f"le_{bound * 1000:g}".replace(".", "_"), f"in at most {bound * 1000:g} ms")
      for bound in WRITE_LATENCY_BUCKETS),
    ("overflow", "in over 1 s"),
)


class _RateFamilies:
    """Pulsar's rate, throughput, backlog-size, write-latency and subscription series."""

    def __init__(self) -> None:
        labels, sub_labels = _TOPIC_LABELS, _SUBSCRIPTION_LABELS
        self.rate_in = GaugeMetricFamily(
            "pulsar_rate_in", "Messages published per second (moving window)", labels=labels)
        self.rate_out = GaugeMetricFamily(
            "pulsar_rate_out", "Messages dispatched per second (moving window)", labels=labels)
        self.throughput_in = GaugeMetricFamily(
            "pulsar_throughput_in", "Bytes published per second (moving window)",
            labels=labels)
        self.throughput_out = GaugeMetricFamily(
            "pulsar_throughput_out", "Bytes dispatched per second (moving window)",
            labels=labels)
        self.bytes_out = CounterMetricFamily(
            "pulsar_out_bytes", "Bytes dispatched (entries as stored)", labels=labels)
        self.backlog_size = GaugeMetricFamily(
            "pulsar_storage_backlog_size",
            "Bytes from the slowest durable subscription's position to the end of the log",
            labels=labels)
        self.write_latency = HistogramMetricFamily(
            "magnetar_storage_write_latency_seconds",
            "Seconds from an entry's append to it being durable under the sync policy",
            labels=labels)
        # Pulsar's own shape of the same counts: a gauge per bucket (entries whose write
        # took at most N ms, not cumulative), the overflow past 1 s, a count and a sum
        # in milliseconds; here counted since the topic was loaded.
        self.pulsar_latency = [
            GaugeMetricFamily(f"pulsar_storage_write_latency_{suffix}",
                              f"Entries written {what} (since the topic was loaded)",
                              labels=labels)
            for suffix, what in _PULSAR_LATENCY_GAUGES
        ]
        self.pulsar_latency_count = GaugeMetricFamily(
            "pulsar_storage_write_latency_count", "Entries written (since the topic was loaded)",
            labels=labels)
        self.pulsar_latency_sum = GaugeMetricFamily(
            "pulsar_storage_write_latency_sum",
            "Milliseconds entries took from append to durable, summed", labels=labels)
        self.sub_backlog = GaugeMetricFamily(
            "pulsar_subscription_back_log", "Entries the subscription has not acknowledged",
            labels=sub_labels)
        self.sub_unacked = GaugeMetricFamily(
            "pulsar_subscription_unacked_messages",
            "Entries dispatched to the subscription's consumers and not acknowledged",
            labels=sub_labels)
        self.sub_rate_out = GaugeMetricFamily(
            "pulsar_subscription_msg_rate_out",
            "Messages dispatched to the subscription's consumers per second (moving window)",
            labels=sub_labels)

    def add(self, row: _TopicRow, values: list[str]) -> None:
        self.rate_in.add_metric(values, row.rate_in)
        self.rate_out.add_metric(values, row.rate_out)
        self.throughput_in.add_metric(values, row.throughput_in)
        self.throughput_out.add_metric(values, row.throughput_out)
        self.bytes_out.add_metric(values, row.bytes_out)
        self.backlog_size.add_metric(values, row.backlog_size)
        counts = row.write_latency or (0,) * (len(WRITE_LATENCY_BUCKETS) + 1)
        cumulative, buckets = 0, []
        for bound, count in zip((*WRITE_LATENCY_BUCKETS, float("inf")), counts, strict=True):
            cumulative += count
            buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
        self.write_latency.add_metric(values, buckets, row.write_latency_sum)
        for gauge, count in zip(self.pulsar_latency, counts, strict=True):
            gauge.add_metric(values, count)
        self.pulsar_latency_count.add_metric(values, cumulative)
        self.pulsar_latency_sum.add_metric(values, row.write_latency_sum * 1000)
        for sub in row.subs:
            sub_values = [*values, sub.name]
            self.sub_backlog.add_metric(sub_values, sub.backlog)
            self.sub_unacked.add_metric(sub_values, sub.unacked)
            self.sub_rate_out.add_metric(sub_values, sub.rate_out)

    def families(self) -> Iterator[Metric]:
        yield from (self.rate_in, self.rate_out, self.throughput_in, self.throughput_out)
        yield from (self.bytes_out, self.backlog_size, self.write_latency)
        yield from (*self.pulsar_latency, self.pulsar_latency_count, self.pulsar_latency_sum)
        yield from (self.sub_backlog, self.sub_unacked, self.sub_rate_out)


class _Live(Collector):
    """Families computed by ``live`` when the registry is read (on the loop)."""

    def __init__(self, live: Callable[[], Iterable[Metric]]) -> None:
        self.live = live

    def collect(self) -> Iterator[Metric]:
        return iter(list(self.live()))


class _SnapshotOrLive(_Live):
    """During a scrape, the families its snapshot computed in advance (the worker
    thread that renders must not read live broker state); otherwise computed live by
    ``live``, so the registry's samples are current wherever it is read on the loop."""

    def __init__(self, live: Callable[[], Iterable[Metric]]) -> None:
        super().__init__(live)
        self.families: list[Metric] | None = None

    def collect(self) -> Iterator[Metric]:
        families = self.families
        return iter(families) if families is not None else super().collect()


class _BrokerCollector(Collector):
    """The broker-wide series: a handful of numbers, cheap at any topic count."""

    def __init__(self, service: MetricsSource) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        topics = GaugeMetricFamily("pulsar_topics_count", "Loaded topics", labels=["cluster"])
        conns = GaugeMetricFamily(
            "pulsar_active_connections", "Open client connections", labels=["cluster"]
        )
        topics.add_metric(["standalone"], len(self.service.topics))
        conns.add_metric(["standalone"], len(self.service.connections))
        fsync_time = GaugeMetricFamily(
            "magnetar_storage_fsync_seconds",
            "Moving average of an fdatasync's duration (persistent topics)",
        )
        fsync_time.add_metric([], self.service.store.sync_load.mean_seconds)
        idle_polls = CounterMetricFamily(
            "magnetar_idle_poll_rounds",
            "Event loop rounds spent polling after input instead of sleeping",
        )
        idle_polls.add_metric([], self.service.idle_poller.rounds)  # set before admin starts
        yield from (topics, conns, fsync_time, idle_polls)
        yield from self._resources()
        replies = self.service.replies
        forwarded = CounterMetricFamily(
            "magnetar_rpc_replies_forwarded",
            "PIP-371 replies forwarded to the requesting producer",
        )
        forwarded.add_metric([], replies.forwarded)
        yield forwarded
        yield replies.round_trips.family()
        yield from self.service.loop_lag.families()
        yield from self.service.gc_pauses.families()


    def _resources(self) -> Iterator[Metric]:
        """The broker's bounded resources: how full each bound is, and how often it bit."""
        service = self.service
        cache = service.store.cache
        yield _gauge("magnetar_entry_cache_bytes", "Bytes held by the broker-wide entry cache",
                     cache.size_bytes)
        yield _gauge("magnetar_entry_cache_max_bytes", "The entry cache's bound (cache_max_bytes)",
                     cache.max_bytes)
        yield _counter("magnetar_entry_cache_evicted_bytes",
                       "Bytes the cache's bound pushed out (not trims or closes)",
                       cache.evicted_bytes)
        files = service.store.segment_files
        yield _gauge("magnetar_segment_files_open",
                     "Sealed segment files holding a descriptor (max_open_segment_files bounds it)",
                     len(files))
        yield _counter("magnetar_segment_files_reopened",
                       "Sealed segment files opened again for a read after their descriptor "
                       "was closed to stay within the bound", files.opens)
        buffer = service.publish_buffer
        yield _gauge("magnetar_publish_buffer_bytes",
                     "Bytes of published messages not yet receipted, broker-wide",
                     buffer.bytes)
        yield _gauge("magnetar_publish_buffer_max_bytes",
                     "The publish buffer's bound (max_message_publish_buffer_bytes)", buffer.limit)
        yield _counter("magnetar_publish_buffer_holds",
                       "Connections whose reading was paused by the full publish buffer",
                       buffer.holds)
        yield _gauge("magnetar_connections_read_paused",
                     "Connections the broker is not reading now (backpressure)",
                     sum(1 for cnx in service.connections if cnx.read_paused))
        yield _counter("magnetar_connections_refused",
                       "Connections turned away by max_connections or max_connections_per_ip",
                       service.connection_limits.refused)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation)
    family.add_metric([], value)
    return family


class BrokerMetrics:
    def __init__(self, service: MetricsSource,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service = service
        self.disk_topics = DiskTopics(lambda: service.store, clock=clock)
        # Every series, for reading samples on the loop (the topic families live), and
        # the same without the topic families, which /metrics writes as text instead.
        self.registry = CollectorRegistry()
        self._rendered = CollectorRegistry()
        # No snapshot for these: a scrape writes the topic text from its own rows.
        self.registry.register(_Live(self._live_topic_families))
        self._topic_text = TopicExposition(_topic_families)
        self._broker = _BrokerCollector(service)
        self._broker_snapshot = _SnapshotOrLive(self._broker.collect)
        self.replies_held = Counter(
            "magnetar_rpc_replies_held",
            "PIP-371 replies held for a requester that was not attached",
            registry=None,
        )
        self.replies_dropped = Counter(
            "magnetar_rpc_replies_dropped",
            "PIP-371 replies dropped",
            ["reason"],
            registry=None,
        )
        # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds...
        # and python_info, as a Pulsar broker's JVM exports its own process series.
        for collector in (self._broker_snapshot, ProcessCollector(registry=None),
                          PlatformCollector(registry=None), self.replies_held,
                          self.replies_dropped):
            self.registry.register(collector)
            self._rendered.register(collector)
        self._render_lock = asyncio.Lock()

    def reply_held(self) -> None:
        self.replies_held.inc()

    def reply_dropped(self, reason: str) -> None:
        self.replies_dropped.labels(reason=reason).inc()

    def _row(self, topic: Topic) -> _TopicRow:
        service = self.service
        return _topic_row(topic, service.topic_policies.backlog_bytes, service.rates.rate)

    @staticmethod
    def _with_disk(rows: list[_TopicRow], sizes: dict[str, int]) -> list[_TopicRow]:
        """``rows``, plus a row for every stored topic of ``sizes`` not among them."""
        loaded = {row.name for row in rows}
        return rows + [_disk_row(n, size) for n, size in sizes.items() if n not in loaded]

    def _live_rows(self) -> list[_TopicRow]:
        # On the loop: the stored topics as the last scrape's walk found them, no walk.
        rows = [self._row(t) for t in list(self.service.topics.values())]
        return self._with_disk(rows, self.disk_topics.cached())

    def _live_topic_families(self) -> Iterator[Metric]:
        return iter(list(_topic_families(self._live_rows())))

    def render(self) -> bytes:
        """The exposition, all on the calling thread (tests and small brokers)."""
        return self._text(self._live_rows())

    def _text(self, rows: list[_TopicRow]) -> bytes:
        """The topic series written from ``rows`` (topic_exposition.py), then the
        others as prometheus_client renders them: the order a registry of all gives."""
        return self._topic_text.render(rows).encode() + generate_latest(self._rendered)

    async def render_async(self) -> bytes:
        """The exposition without a long event loop stall at thousands of topics: the
        topics are read a chunk per loop turn, and the text is built on a worker thread
        from those plain numbers (the GIL's switch interval lets the loop run meanwhile)."""
        async with self._render_lock:  # concurrent scrapes share one snapshot slot
            rows: list[_TopicRow] = []
            topics = list(self.service.topics.values())
            for start in range(0, len(topics), _SNAPSHOT_CHUNK):
                rows.extend(self._row(t) for t in topics[start : start + _SNAPSHOT_CHUNK])
                if start + _SNAPSHOT_CHUNK < len(topics):
                    await asyncio.sleep(0)
            # The broker-wide figures are few; read on the loop, like the rows, since
            # the connections and caches they come from change under a worker thread.
            self._broker_snapshot.families = list(self._broker.collect())
            try:
                return await asyncio.to_thread(self._render_rows, rows)
            finally:
                self._broker_snapshot.families = None

    def _render_rows(self, rows: list[_TopicRow]) -> bytes:
        # The worker may walk the data directory (cached: at most every 30 s).
        return self._text(self._with_disk(rows, self.disk_topics.sizes()))
