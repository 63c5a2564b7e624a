"""A producer's settings: :class:`ProducerConfig` (what ``Client.create_producer`` was
given) and the wire values of PIP-68 access modes."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.client.schema import SchemaInfo
from magnetar.protocol.pb import pb

ACCESS_MODES = {
    "shared": pb.Shared,
    "exclusive": pb.Exclusive,
    "wait_for_exclusive": pb.WaitForExclusive,
    "exclusive_with_fencing": pb.ExclusiveWithFencing,
}


@dataclass(slots=True)
class ProducerConfig:
    producer_name: str | None = None
    batching: bool = False
    batching_max_messages: int = 1000
    batching_max_bytes: int = 128 * 1024
    batching_max_delay: float = 0.01
    compression: int = 0
    max_pending_messages: int = 1000
    block_if_queue_full: bool = True
    send_timeout: float = 30.0
    access_mode: int = pb.Shared
    schema: SchemaInfo | None = None
    properties: dict[str, str] = field(default_factory=dict)
