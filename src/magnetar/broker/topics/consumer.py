"""A consumer attached to a subscription: permits, in-flight entries, identity."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from magnetar.protocol.fastpath import encode_message_head

# An entry this large goes out as its own buffer after the frame's head; a smaller one
# is copied behind it (cheaper than a writev slot of its own, with many per round).
SEPARATE_ENTRY_BYTES = 4096

if TYPE_CHECKING:
    from magnetar.broker.session.peer import ClientConnection
    from magnetar.broker.topics.subscription import Subscription


@dataclass(eq=False)
class Consumer:
    cnx: ClientConnection[Any, Consumer]
    consumer_id: int
    name: str
    subscription: Subscription
    priority_level: int = 0
    consumer_epoch: int | None = None
    hash_ranges: list[tuple[int, int]] | None = None  # Key_Shared STICKY ranges, inclusive
    permits: int = 0
    # entry id -> message count of the entry, for entries sent and not yet acked
    pending: dict[int, int] = field(default_factory=dict)
    messages_out: int = 0
    bytes_out: int = 0
    closed: bool = False
    told_end_of_topic: bool = False
    announced: bool = False  # SUBSCRIBE answered: the client knows this consumer id
    # SUBSCRIBE's metadata (shown in stats) and the capabilities it declares, read once
    # at subscribe (protocol/capabilities.py): dispatch tests the flags, nothing else.
    metadata: dict[str, str] = field(default_factory=dict)
    reads_foreign_entries: bool = False
    backs_off_itself: bool = False

    def can_receive(self, max_unacked: int) -> bool:
        return (
            self.permits > 0
            and not self.closed
            and self.cnx.writable
            and len(self.pending) < max_unacked
        )

    def send_entry(
        self, entry_id: int, message_id: bytes, entry: bytes, messages: int, redelivery_count: int,
        ack_set: list[int] | None = None,
    ) -> None:
        """``messages``: how many of the entry's messages the consumer gets (those
        ``ack_set`` leaves, for a partly acked batch)."""
        self.permits -= messages
        self.pending[entry_id] = messages
        self.messages_out += messages
        self.bytes_out += len(entry)
        head = encode_message_head(
            self.consumer_id, message_id, redelivery_count, len(entry), self.consumer_epoch,
            ack_set,
        )
        if len(entry) < SEPARATE_ENTRY_BYTES:
            self.cnx.write(head + entry)
            return
        # The head, then the entry's own bytes (the cache's, shared by every consumer):
        # the connection writes both with one writev, and nothing copies the entry.
        self.cnx.write(head)
        self.cnx.write(entry)
