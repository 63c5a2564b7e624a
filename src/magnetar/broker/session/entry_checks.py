"""What an entry must be before the broker stores it, whoever wrote it (a SEND, the
raw-ingest route): small enough that the MESSAGE frame carrying it out fits every
consumer's frame limit, and holding the messages its ``num_messages_in_batch`` says.

Pulsar's clients and broker accept frames up to ``max_message_size`` plus a fixed
10 KiB allowance (Commands.MESSAGE_SIZE_FRAME_PADDING) for command and metadata.
Judging only the payload let a SEND at the limit (5 MiB of payload, 10 KiB of
properties) be stored and then go out in a MESSAGE frame a few bytes over the
consumer's limit: the consumer dropped its connection and got the same entry again,
forever. So the judge is the frame the consumer will receive.

A consumer splits an entry into as many messages as its metadata counts, and the
broker charges that many permits: a count its payload does not hold crashed the
official client (SIGSEGV for 2 and 5,000) and stalled magnetar's. An uncompressed
Pulsar batch is walked (protocol/batch.py); a compressed or encrypted one cannot be
without decoding it, so its count is bounded by its uncompressed size. A foreign
entry (``entry.format`` not Pulsar's: a Kafka batch, say) is no Pulsar batch and only
its count is bounded; the PIP-96 shield (shield.py) sends it as one message to
consumers that cannot read it.
"""

from __future__ import annotations

from magnetar.broker.topics.shield import is_foreign
from magnetar.protocol.batch import MIN_BATCHED_MESSAGE_SIZE, check_batch
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.frames import FRAME_PADDING, dispatch_frame_size, max_frame_size
from magnetar.protocol.pb import pb

_NONE = pb.NONE


def oversize_refusal(entry_size: int, num_messages: int, max_message_size: int) -> str | None:
    """Why an entry of ``entry_size`` bytes (magic number to end of payload) holding
    ``num_messages`` is too large to dispatch, or None if it fits."""
    frame = dispatch_frame_size(entry_size, num_messages)
    limit = max_frame_size(max_message_size)
    if frame <= limit:
        return None
    return (
        f"message of {entry_size} bytes with its metadata exceeds the maximum message "
        f"size: its MESSAGE frame to a consumer would be up to {frame} bytes, over the "
        f"frame limit of {limit} bytes (max_message_size {max_message_size} + "
        f"{FRAME_PADDING} for command and metadata)"
    )


def batch_refusal(
    metadata: pb.MessageMetadata, payload: bytes | memoryview, max_batch: int, start: int = 0
) -> str | None:
    """Why the count of messages an entry declares cannot be trusted, or None.

    ``payload[start:]`` is the entry's payload as sent (compressed or encrypted, maybe):
    ``payload`` may be the whole entry, which the walk slices faster than a view."""
    if not metadata.HasField("num_messages_in_batch"):
        return None  # one message
    n = metadata.num_messages_in_batch
    if not 1 <= n <= max_batch:
        return (
            f"num_messages_in_batch {n} is out of range: 1 to {max_batch} "
            f"(max_messages_per_batch)"
        )
    if is_foreign(metadata):
        return None
    if metadata.compression != _NONE or metadata.encryption_keys:
        size = (
            metadata.uncompressed_size if metadata.compression != _NONE else len(payload) - start
        )
        if n * MIN_BATCHED_MESSAGE_SIZE > size:
            return (
                f"num_messages_in_batch {n} does not fit in the batch's {size} uncompressed "
                f"bytes ({MIN_BATCHED_MESSAGE_SIZE} at least a message)"
            )
        return None
    try:
        check_batch(payload, n, start)
    except MalformedFrame as exc:
        return f"num_messages_in_batch {n} does not match the payload: {exc}"
    return None

