"""A producer attached to a topic: identity, access mode and PIP-68 fencing state."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.protocol.pb import pb

if TYPE_CHECKING:
    from magnetar.broker.session.peer import ClientConnection

SHARED = pb.Shared
EXCLUSIVE = pb.Exclusive
WAIT_FOR_EXCLUSIVE = pb.WaitForExclusive
EXCLUSIVE_WITH_FENCING = pb.ExclusiveWithFencing

ACCESS_MODE_NAMES: dict[int, str] = {
    SHARED: "Shared",
    EXCLUSIVE: "Exclusive",
    WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
    EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing",
}


@dataclass(eq=False)
class Producer:
    cnx: ClientConnection[Producer, Any]
    producer_id: int
    name: str
    topic_name: str
    access_mode: int = SHARED
    topic_epoch: int | None = None
    user_provided_name: bool = True
    fenced: bool = False
    ready: bool = True  # False while a WaitForExclusive producer waits in line
    request_id: int = 0
    schema_version: bytes | None = None
    messages_in: int = 0
    bytes_in: int = 0
    # Sent and not yet receipted (the connection's backpressure counts them).
    pending_publishes: int = 0
    pending_publish_bytes: int = 0
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def exclusive(self) -> bool:
        return self.access_mode != SHARED

    @property
    def access_mode_name(self) -> str:
        return ACCESS_MODE_NAMES.get(self.access_mode, str(self.access_mode))
