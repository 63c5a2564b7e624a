"""What the metrics read of the broker (``BrokerService`` has it): its loaded topics and
connections, its storage, limits and buffers, and the probes that watch the process.
A Protocol, so that the metrics do not import the service that owns them."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from magnetar.broker.observability.gc_pauses import GcPauseRecorder
    from magnetar.broker.observability.loop_lag import LoopLagProbe
    from magnetar.broker.observability.rates import RateTracker
    from magnetar.broker.policies.topic_policies import PolicyEnforcer
    from magnetar.broker.session.idle_poll import IdlePoller
    from magnetar.broker.session.limits import ConnectionLimits, PublishBuffer
    from magnetar.broker.topics.topic import Topic
    from magnetar.storage import Store


class _Connection(Protocol):
    @property
    def read_paused(self) -> int: ...


class _RoundTrips(Protocol):  # observability.metrics.RoundTrips
    def family(self) -> Metric: ...


class _Replies(Protocol):  # features.rpc.ReplyRouter
    @property
    def forwarded(self) -> int: ...
    @property
    def round_trips(self) -> _RoundTrips: ...


class MetricsSource(Protocol):
    """The broker, as its metrics see it."""

    @property
    def topics(self) -> dict[str, Topic]: ...
    @property
    def connections(self) -> Collection[_Connection]: ...
    @property
    def store(self) -> Store: ...
    @property
    def replies(self) -> _Replies: ...
    @property
    def idle_poller(self) -> IdlePoller: ...
    @property
    def loop_lag(self) -> LoopLagProbe: ...
    @property
    def gc_pauses(self) -> GcPauseRecorder: ...
    @property
    def rates(self) -> RateTracker: ...
    @property
    def topic_policies(self) -> PolicyEnforcer: ...
    @property
    def publish_buffer(self) -> PublishBuffer: ...
    @property
    def connection_limits(self) -> ConnectionLimits: ...
