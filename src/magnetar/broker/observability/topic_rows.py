"""One topic's figures for /metrics as plain numbers: read from the topic on the event
loop, then turned into text or Prometheus families away from it (metrics.py)."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar.protocol.topic_name import namespace_of


@dataclass(frozen=True, slots=True)
class _SubscriptionRow:
    name: str
    backlog: int
    unacked: int
    rate_out: float  # its consumers' moving rates


@dataclass(frozen=True, slots=True)
class _TopicRow:
    """One topic's figures, read on the event loop; the /metrics text is written from
    these plain numbers on a worker thread, where they cannot race the topic's own
    updates (and the registry's live families are built from them on the loop)."""

    namespace: str
    name: str
    messages_in: int
    bytes_in: int
    messages_out: int
    storage: int
    backlog: int
    producers: int
    subscriptions: int
    consumers: int
    epoch: int
    syncs: int
    inline_syncs: int
    bytes_out: int = 0
    rate_in: float = 0.0
    rate_out: float = 0.0
    throughput_in: float = 0.0
    throughput_out: float = 0.0
    backlog_size: int = 0
    write_latency: tuple[int, ...] = ()  # bucket counts, the last one +Inf
    write_latency_sum: float = 0.0
    subs: tuple[_SubscriptionRow, ...] = ()


def _disk_row(name: str, storage: int) -> _TopicRow:
    """A topic on disk, not loaded: its stored bytes, nothing else going on."""
    return _TopicRow(namespace_of(name), name, 0, 0, 0, storage, 0, 0, 0, 0, 0, 0, 0)
