"""Prometheus metrics of one broker, with Pulsar's metric names where Pulsar has one.

Topic gauges and counters are computed at scrape time from the topics' own
counters, so the publish and dispatch paths pay nothing for them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService


class _TopicCollector(Collector):
    def __init__(self, service: BrokerService) -> None:
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["cluster", "namespace", "topic"]
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
        topics = GaugeMetricFamily("pulsar_topics_count", "Loaded topics", labels=["cluster"])
        conns = GaugeMetricFamily(
            "pulsar_active_connections", "Open client connections", labels=["cluster"]
        )
        for topic in list(self.service.topics.values()):
            values = ["standalone", topic.topic_name.namespace_name, topic.name]
            msg_in.add_metric(values, topic.stats.messages_in)
            bytes_in.add_metric(values, topic.stats.bytes_in)
            msg_out.add_metric(values, topic.stats.messages_out)
            storage.add_metric(values, topic.ledger.size_bytes())
            backlog.add_metric(values, sum(s.backlog() for s in topic.subscriptions.values()))
            producers.add_metric(values, len(topic.producers))
            subs.add_metric(values, len(topic.subscriptions))
            consumers.add_metric(
                values, sum(len(s.consumers) for s in topic.subscriptions.values())
            )
            epoch.add_metric(values, topic.metadata.topic_epoch)
            ledger_stats = topic.ledger.stats
            fsyncs.add_metric([*values, "loop"], ledger_stats.inline_syncs)
            fsyncs.add_metric([*values, "worker"], ledger_stats.syncs - ledger_stats.inline_syncs)
        topics.add_metric(["standalone"], len(self.service.topics))
        conns.add_metric(["standalone"], len(self.service.connections))
        yield from (msg_in, bytes_in, msg_out, storage, backlog, producers, subs, consumers)
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
        yield from (epoch, fsyncs, topics, conns, fsync_time, idle_polls)


class BrokerMetrics:
    def __init__(self, service: BrokerService) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(_TopicCollector(service))
        self.replies_forwarded = Counter(
            "magnetar_rpc_replies_forwarded",
            "PIP-371 replies forwarded to the requesting producer",
            registry=self.registry,
        )
        self.replies_held = Counter(
            "magnetar_rpc_replies_held",
            "PIP-371 replies held for a requester that was not attached",
            registry=self.registry,
        )
        self.replies_dropped = Counter(
            "magnetar_rpc_replies_dropped",
            "PIP-371 replies dropped",
            ["reason"],
            registry=self.registry,
        )

    def reply_held(self) -> None:
        self.replies_held.inc()

    def reply_forwarded(self) -> None:
        self.replies_forwarded.inc()

    def reply_dropped(self, reason: str) -> None:
        self.replies_dropped.labels(reason=reason).inc()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
