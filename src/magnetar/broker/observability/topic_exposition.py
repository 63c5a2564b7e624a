"""The Prometheus text of the per-topic series of /metrics, written straight from the
topic rows (topic_rows.py). It owns that text and nothing else: names, help texts and
types come from the reference families (metrics.py's ``_topic_families``, still the
registry's live view), and the rest of /metrics is still prometheus_client's. It exists
because building a Metric object per family and a Sample per series, then letting
``generate_latest`` format each one, cost ~1.7 s of CPU per scrape at 5,000 loaded
topics (~205,000 lines, 27 MB; 26% of the broker's samples in a 5,000-topic profile),
holding the GIL the event loop needs. Here each topic's labels are escaped once and
reused for all its lines, and integers skip the float formatting. The output is
byte-identical to ``generate_latest`` of the reference families
(tests/broker/test_topic_exposition.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import accumulate

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from magnetar.broker.observability.topic_rows import _TopicRow
from magnetar.storage.write_latency import BUCKETS as WRITE_LATENCY_BUCKETS

CLUSTER = "standalone"

# The families in the reference's order, which the text keeps.
_LATENCY_GAUGES = tuple(
    f"pulsar_storage_write_latency_{suffix}"
    for suffix in (*(f"le_{b * 1000:g}".replace(".", "_") for b in WRITE_LATENCY_BUCKETS),
                   "overflow")
)
_TOPIC_SERIES = (  # one line per topic: (family, its row field)
    ("pulsar_in_messages", "messages_in"),
    ("pulsar_in_bytes", "bytes_in"),
    ("pulsar_out_messages", "messages_out"),
    ("pulsar_storage_size", "storage"),
    ("pulsar_msg_backlog", "backlog"),
    ("pulsar_producers_count", "producers"),
    ("pulsar_subscriptions_count", "subscriptions"),
    ("pulsar_consumers_count", "consumers"),
    ("magnetar_topic_epoch", "epoch"),
)
_RATE_SERIES = (
    ("pulsar_rate_in", "rate_in"),
    ("pulsar_rate_out", "rate_out"),
    ("pulsar_throughput_in", "throughput_in"),
    ("pulsar_throughput_out", "throughput_out"),
    ("pulsar_out_bytes", "bytes_out"),
    ("pulsar_storage_backlog_size", "backlog_size"),
)
_FSYNCS = "magnetar_storage_fsyncs"
_HISTOGRAM = "magnetar_storage_write_latency_seconds"
_SUBSCRIPTION_SERIES = (
    ("pulsar_subscription_back_log", "backlog"),
    ("pulsar_subscription_unacked_messages", "unacked"),
    ("pulsar_subscription_msg_rate_out", "rate_out"),
)
_FAMILIES = (
    *(name for name, _ in _TOPIC_SERIES), _FSYNCS, *(name for name, _ in _RATE_SERIES),
    _HISTOGRAM, *_LATENCY_GAUGES, "pulsar_storage_write_latency_count",
    "pulsar_storage_write_latency_sum", *(name for name, _ in _SUBSCRIPTION_SERIES),
)
_LE = (*(repr(bound) for bound in WRITE_LATENCY_BUCKETS), "+Inf")  # the histogram's le values


_go_float: Callable[[float], str] = floatToGoString  # the library's, untyped there


def label_value(value: str) -> str:
    """``value`` escaped as prometheus_client escapes a label value."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def number(value: float) -> str:
    """``value`` as prometheus_client writes a sample's value (its floatToGoString),
    a small int without making a float and its repr."""
    if type(value) is int and -1_000_000 < value < 1_000_000:
        return f"{value}.0"
    return _go_float(value)


def numbers(values: Iterable[float]) -> list[str]:
    """``number`` of each value, the common case (a small int) without a call."""
    return [f"{v}.0" if type(v) is int and -1_000_000 < v < 1_000_000 else number(v)
            for v in values]


class _One(Collector):
    def __init__(self, family: Metric) -> None:
        self.family = family

    def collect(self) -> Iterator[Metric]:
        return iter([self.family])


class TopicExposition:
    """Writes the topic families of ``reference`` (rows -> Metric families) as text,
    taking each family's ``# HELP`` and ``# TYPE`` lines from the library's rendering of
    the reference's empty family."""

    def __init__(self, reference: Callable[[list[_TopicRow]], Iterable[Metric]]) -> None:
        families = list(reference([]))
        names = tuple(family.name for family in families)
        if names != _FAMILIES:
            raise ValueError(f"the reference's families {names} are not the ones written")
        # name -> (its HELP and TYPE lines, the name its samples carry)
        self._head: dict[str, tuple[str, str]] = {}
        for family in families:
            text = generate_latest(_One(family)).decode()
            sample = family.name + "_total" if family.type == "counter" else family.name
            self._head[family.name] = (text, sample)

    def render(self, rows: list[_TopicRow]) -> str:
        out: list[str] = []
        # Each topic's labels once: '{cluster=..,namespace=..,topic=..} ' and the pieces
        # the series with a fourth label (le, subscription, thread) sort around it.
        cluster = f'cluster="{label_value(CLUSTER)}"'
        spaces = [f'namespace="{label_value(row.namespace)}"' for row in rows]
        names = [f'topic="{label_value(row.name)}"' for row in rows]
        rests = [f"{space},{name}}} " for space, name in zip(spaces, names, strict=True)]
        labels = [f"{{{cluster},{rest}" for rest in rests]

        def series(family: str, values: Iterable[float]) -> None:
            head, sample = self._head[family]
            out.append(head)
            out.extend([f"{sample}{label}{value}\n"
                        for label, value in zip(labels, numbers(values), strict=True)])

        for family, field in _TOPIC_SERIES:
            series(family, [getattr(row, field) for row in rows])
        head, sample = self._head[_FSYNCS]
        out.append(head)
        for space, name, row in zip(spaces, names, rows, strict=True):
            out.append(f'{sample}{{{cluster},{space},thread="loop",{name}}} '
                       f"{number(row.inline_syncs)}\n")
            out.append(f'{sample}{{{cluster},{space},thread="worker",{name}}} '
                       f"{number(row.syncs - row.inline_syncs)}\n")
        for family, field in _RATE_SERIES:
            series(family, [getattr(row, field) for row in rows])
        counts = [row.write_latency or (0,) * len(_LE) for row in rows]
        self._histogram(out, rows, counts, cluster, rests, labels)
        for k, family in enumerate(_LATENCY_GAUGES):
            series(family, [count[k] for count in counts])
        series("pulsar_storage_write_latency_count", [sum(count) for count in counts])
        series("pulsar_storage_write_latency_sum",
               [row.write_latency_sum * 1000 for row in rows])
        subs = [  # (a subscription's labels, the subscription), each labelled once
            (f'{{{cluster},{space},subscription="{label_value(sub.name)}",{name}}} ', sub)
            for space, name, row in zip(spaces, names, rows, strict=True) for sub in row.subs
        ]
        for family, field in _SUBSCRIPTION_SERIES:
            head, sample = self._head[family]
            out.append(head)
            out.extend([f"{sample}{label}{number(getattr(sub, field))}\n"
                        for label, sub in subs])
        return "".join(out)

    def _histogram(self, out: list[str], rows: list[_TopicRow],
                   counts: list[tuple[int, ...]], cluster: str, rests: list[str],
                   labels: list[str]) -> None:
        head, name = self._head[_HISTOGRAM]
        out.append(head)
        buckets = [f'{name}_bucket{{{cluster},le="{le}",' for le in _LE]
        for row, count, rest, label in zip(rows, counts, rests, labels, strict=True):
            cumulative = list(accumulate(count))
            out.extend([f"{bucket}{rest}{value}\n"
                        for bucket, value in zip(buckets, numbers(cumulative), strict=True)])
            out.append(f"{name}_count{label}{number(cumulative[-1])}\n")
            out.append(f"{name}_sum{label}{number(row.write_latency_sum)}\n")
