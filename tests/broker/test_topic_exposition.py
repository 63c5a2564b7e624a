"""The topic series of /metrics are written as text straight from the topic rows
(observability/topic_exposition.py): byte for byte what prometheus_client renders from
the reference families (metrics.py's ``_topic_families``), with no sockets."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from magnetar.broker.config import BrokerConfig
from magnetar.broker.observability import topic_exposition
from magnetar.broker.observability.metrics import WRITE_LATENCY_BUCKETS, _topic_families
from magnetar.broker.observability.topic_exposition import TopicExposition, number
from magnetar.broker.observability.topic_rows import _disk_row, _SubscriptionRow, _TopicRow
from magnetar.broker.service import BrokerService

BUCKETS = len(WRITE_LATENCY_BUCKETS) + 1
AWKWARD = ['q"uote', "back\\slash", "new\nline", 'all "\\\n" three', "ünïcode ✓", ""]
FLOATS = [0.0, 0.1, 1 / 3, 1e-7, 12345678.9, 999999.5, 1e6, 2.5e15, 1e22, -0.5]
INTS = [0, 1, 7, 999_999, 1_000_000, 1_234_567, 2**53 + 1, 10**20, -3, -1_000_000]


def reference(rows: list[_TopicRow]) -> bytes:
    """What /metrics rendered before: prometheus_client over the topic families."""

    class Families(Collector):
        def collect(self) -> Iterator[Metric]:
            return _topic_families(rows)

    registry = CollectorRegistry()
    registry.register(Families())
    return generate_latest(registry)


def varied_rows() -> list[_TopicRow]:
    rows: list[_TopicRow] = []
    namespaces = ["public/default", "tenant-a/ns1", 'ten"ant/n\\s']
    for index in range(24):
        namespace = namespaces[index % len(namespaces)]
        name = f"persistent://{namespace}/t-{index}"
        if index < len(AWKWARD):
            name += AWKWARD[index]
        subs = tuple(
            _SubscriptionRow(AWKWARD[(index + k) % len(AWKWARD)] + f"s{k}",
                             INTS[(index + k) % len(INTS)], k,
                             FLOATS[(index + k) % len(FLOATS)])
            for k in range(index % 4)  # zero to three subscriptions
        )
        latency = () if index % 3 == 0 else tuple(
            INTS[(index + k) % 4] for k in range(BUCKETS))  # small ones: a count over 1e6 too
        rows.append(_TopicRow(
            namespace, name,
            INTS[index % len(INTS)], INTS[(index + 1) % len(INTS)], index, 10**12 + index,
            index * 3, index % 2, len(subs), index % 5, index, 7 + index, index % 7,
            bytes_out=INTS[(index + 5) % len(INTS)],
            rate_in=FLOATS[index % len(FLOATS)], rate_out=FLOATS[(index + 1) % len(FLOATS)],
            throughput_in=FLOATS[(index + 2) % len(FLOATS)],
            throughput_out=FLOATS[(index + 3) % len(FLOATS)],
            backlog_size=INTS[(index + 4) % len(INTS)],
            write_latency=latency,
            write_latency_sum=FLOATS[(index + 6) % len(FLOATS)] if latency else 0.0,
            subs=subs,
        ))
    rows.append(_TopicRow("public/default", "persistent://public/default/big", 10**6, 0, 0,
                          0, 0, 0, 0, 0, 0, 0, 0,
                          write_latency=(1_000_000, 0, 3, *(0,) * (BUCKETS - 3)),
                          write_latency_sum=1234.5))
    rows.append(_disk_row("persistent://public/default/on-disk", 4096))
    rows.append(_disk_row('persistent://tenant-a/ns1/on"disk\\', 0))
    return rows


def test_the_topic_text_is_byte_identical_to_prometheus_client() -> None:
    rows = varied_rows()
    text = TopicExposition(_topic_families).render(rows).encode()
    expected = reference(rows)
    assert text.splitlines() == expected.splitlines()  # a readable diff when it fails
    assert text == expected
    assert b'subscription="q\\"uotes' in text and b'new\\nline' in text  # escapes were met


def test_no_topics_is_the_headers_alone() -> None:
    assert TopicExposition(_topic_families).render([]).encode() == reference([])


@pytest.mark.parametrize(
    "value", [*FLOATS, *INTS, math.inf, -math.inf, math.nan, -0.0, 5e-324, 1.7976931348623157e308,
              123456.0, 1234567.0, 100.25, 3, True])
def test_a_number_is_written_as_floatToGoString_writes_it(value: float) -> None:
    assert number(value) == floatToGoString(value)


def test_a_family_the_writer_does_not_know_is_refused() -> None:
    def more(rows: list[_TopicRow]) -> Iterator[Metric]:
        yield from _topic_families(rows)
        yield from _topic_families([])  # every name a second time

    with pytest.raises(ValueError, match="not the ones written"):
        TopicExposition(more)


async def test_the_whole_exposition_parses_with_each_family_once(tmp_path: Path) -> None:
    service = BrokerService(BrokerConfig(port=0, admin_port=None, data_dir=tmp_path,
                                         idle_poll_us=0, loop_lag_probe_interval=0))
    await service.start()  # its broker-wide series need a started service
    try:
        metrics = service.metrics
        metrics.reply_dropped("no-requester")
        texts = [metrics.render(), await metrics.render_async(), metrics._text(varied_rows())]
    finally:
        await service.stop()
    for text in texts:
        names = [family.name for family in text_string_to_metric_families(text.decode())]
        assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
        for name in ("pulsar_in_messages", "pulsar_subscription_back_log",
                     "magnetar_storage_write_latency_seconds", "pulsar_topics_count",
                     "process_cpu_seconds", "python_info", "magnetar_rpc_replies_dropped"):
            assert name in names
    # The rendered text has the topics' samples; the registry keeps its live ones.
    assert metrics.registry.get_sample_value("magnetar_rpc_replies_dropped_total",
                                             {"reason": "no-requester"}) == 1
    assert metrics.registry.get_sample_value("pulsar_topics_count", {"cluster": "standalone"}) == 0


def test_a_broken_detail_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison can fail: a label value escaped one way short differs."""
    rows = varied_rows()
    monkeypatch.setattr(topic_exposition, "label_value",
                        lambda value: value.replace("\\", "\\\\").replace('"', '\\"'))
    assert TopicExposition(_topic_families).render(rows).encode() != reference(rows)
