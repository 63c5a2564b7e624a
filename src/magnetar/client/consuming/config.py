"""A consumer's settings: :class:`ConsumerConfig` (what ``Client.subscribe`` and
``create_reader`` were given) and the wire values of subscription types and initial
positions."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.client.backoff import Clock, RedeliveryBackoff
from magnetar.client.consuming.dead_letter import DeadLetterPolicy
from magnetar.client.consuming.nack import NegativeAcksTracker
from magnetar.client.consuming.payload_processor import PayloadProcessor
from magnetar.client.schema import SchemaInfo
from magnetar.protocol.pb import pb

_Sub = pb.CommandSubscribe

SUBSCRIPTION_TYPES = {
    "exclusive": _Sub.Exclusive,
    "shared": _Sub.Shared,
    "failover": _Sub.Failover,
    "key_shared": _Sub.Key_Shared,
}
INITIAL_POSITIONS = {"latest": _Sub.Latest, "earliest": _Sub.Earliest}
DEFAULT_NACK_DELAY = 60.0  # seconds, as the official clients


@dataclass(slots=True)
class ConsumerConfig:
    subscription: str
    subscription_type: int = _Sub.Exclusive
    initial_position: int = _Sub.Latest
    receiver_queue_size: int = 1000
    consumer_name: str | None = None
    priority_level: int = 0
    ack_timeout: float | None = None
    negative_ack_redelivery_delay: float | None = None  # seconds; None: 60, or the backoff
    negative_ack_redelivery_backoff: RedeliveryBackoff | None = None
    ack_timeout_redelivery_backoff: RedeliveryBackoff | None = None
    dead_letter_policy: DeadLetterPolicy | None = None
    retry_enable: bool = False
    durable: bool = True
    schema: SchemaInfo | None = None
    properties: dict[str, str] = field(default_factory=dict)
    subscription_properties: dict[str, str] = field(default_factory=dict)
    read_compacted: bool = False
    ack_group_time: float = 0.1
    ack_group_max_size: int = 1000
    start_message_id_inclusive: bool = False
    replicate_subscription_state: bool = False
    batch_index_ack_enabled: bool = False  # PIP-54: ack part of a batch at the broker
    clock: Clock | None = None
    payload_processor: PayloadProcessor | None = None  # PIP-96; None: Pulsar's format

    def __post_init__(self) -> None:
        if (self.negative_ack_redelivery_delay is not None
                and self.negative_ack_redelivery_backoff is not None):
            # PIP-106: a backoff replaces the fixed delay; the Java client refuses both.
            raise ValueError(
                "give either negative_ack_redelivery_delay or negative_ack_redelivery_backoff, "
                "not both (the backoff decides every nack's delay)"
            )
        if self.ack_timeout_redelivery_backoff is not None and not self.ack_timeout:
            raise ValueError("ack_timeout_redelivery_backoff needs an ack_timeout")

    @property
    def shared(self) -> bool:
        return self.subscription_type in (_Sub.Shared, _Sub.Key_Shared)


def nack_tracker(conf: ConsumerConfig, clock: Clock) -> NegativeAcksTracker:
    delay = conf.negative_ack_redelivery_delay
    return NegativeAcksTracker(
        DEFAULT_NACK_DELAY if delay is None else delay,
        conf.negative_ack_redelivery_backoff,
        clock=clock,
    )
