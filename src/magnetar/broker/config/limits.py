"""Bounds on what clients may hold or send: message and batch sizes, connections, pre-CONNECT
budgets, pending publishes, dispatch rounds, tracked entries and loaded topics.

Each field's help text is what ``magnetar serve --help`` prints for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.config.errors import setting_help as _help
from magnetar.protocol.frames import DEFAULT_MAX_MESSAGE_SIZE


@dataclass
class LimitSettings:
    max_message_size: int = field(
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metadata=_help(
            "largest message payload accepted, in bytes; the whole frame a consumer "
            "receives (command, metadata, payload) may be 10 KiB more, as in Pulsar"
        ),
    )
    max_messages_per_batch: int = field(
        default=100_000,
        metadata=_help(
            "most messages one entry may hold (a SEND's num_messages_in_batch, a raw "
            "entry's num_messages); an uncompressed Pulsar batch's count must also match "
            "its payload, which the broker walks (about 0.5 us a message)"
        ),
    )
    max_connections: int = field(
        default=10000,
        metadata=_help(
            "connections the broker holds at once; past it a new one gets an error "
            "(too many connections) and is closed; 0: no limit"
        ),
    )
    max_connections_per_ip: int = field(
        default=5000,
        metadata=_help(
            "connections one client address may hold at once (as Pulsar's "
            "brokerMaxConnectionsPerIp, whose default is 0); past it a new one gets an "
            "error and is closed; half of max_connections by default, so that one address "
            "cannot take every slot, yet a proxy or a host running thousands of clients "
            "still fits; 0: no limit"
        ),
    )
    max_frame_size_before_connect: int = field(
        default=68 * 1024,
        metadata=_help(
            "bytes a frame may declare before CONNECT has completed (authentication "
            "included); a larger one closes the connection before any of it is held. "
            "Room for 64 KiB of credentials (the most the broker accepts: large OAuth2 "
            "or Kerberos tokens) and the rest of a CONNECT; 0: max_message_size's limit"
        ),
    )
    max_unauthenticated_buffer_bytes: int = field(
        default=16 * 1024 * 1024,
        metadata=_help(
            "bytes of partial frames that all connections which have not completed "
            "CONNECT (authentication included) may hold together; a read that takes "
            "the total past it closes its connection; 0: no limit"
        ),
    )
    max_pending_publish_requests_per_connection: int = field(
        default=1000,
        metadata=_help(
            "messages a connection may have sent and not yet had a receipt for (as "
            "Pulsar's maxPendingPublishRequestsPerConnection); at it the broker stops "
            "reading the connection until half have their receipts; 0: no limit"
        ),
    )
    max_message_publish_buffer_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata=_help(
            "bytes of messages read from all producers and not yet receipted (as "
            "Pulsar's maxMessagePublishBufferSizeInMB); past it each connection that "
            "publishes stops being read until the total is down to half; 0: no limit"
        ),
    )
    dispatch_max_bytes_per_round: int = field(
        default=1024 * 1024,
        metadata=_help(
            "bytes of messages one dispatch round of a subscription sends (besides its "
            "2000 entries), and bytes a connection queues before it writes them out; a "
            "connection whose write buffer is over its high-water mark (64 KiB) gets "
            "nothing until it drains, so a consumer that does not read costs at most "
            "the mark, this, and one message; 0: no byte budget"
        ),
    )
    entry_info_cache_max_entries: int = field(
        default=50_000,
        metadata=_help(
            "parsed entry metadata (about 260 bytes each) the loaded topics keep together, "
            "shared evenly between them"
        ),
    )
    delayed_delivery_max_tracked: int = field(
        default=50_000,
        metadata=_help(
            "delayed messages a subscription tracks in memory (about 170 bytes each); "
            "past it, the rest are found again in the log as the tracked ones come due"
        ),
    )
    topic_idle_unload_seconds: float = field(
        default=300.0,
        metadata=_help(
            "a topic with no producers or consumers for this long is unloaded (its files "
            "closed, its state dropped) and loaded again on next use; 0: never"
        ),
    )
    max_unused_loaded_topics: int = field(
        default=500,
        metadata=_help(
            "loaded topics with no producers or consumers kept at most (each costs about "
            "20 KB, 3 file descriptors and 72 objects that every full garbage collection "
            "visits); beyond it the longest unused are unloaded, as soon as loads pass it "
            "(and every few seconds); 0: no bound"
        ),
    )
    max_unacked_per_consumer: int = field(
        default=50000, metadata=_help("messages a consumer may hold unacknowledged")
    )
