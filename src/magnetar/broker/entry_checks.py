"""What an entry must be before the broker stores it, whoever wrote it (a SEND, the
raw-ingest route): small enough that the MESSAGE frame carrying it out fits every
consumer's frame limit.

Pulsar's clients and broker accept frames up to ``max_message_size`` plus a fixed
10 KiB allowance (Commands.MESSAGE_SIZE_FRAME_PADDING) for command and metadata.
Judging only the payload let a SEND at the limit (5 MiB of payload, 10 KiB of
properties) be stored and then go out in a MESSAGE frame a few bytes over the
consumer's limit: the consumer dropped its connection and got the same entry again,
forever. So the judge is the frame the consumer will receive.
"""

from __future__ import annotations

from magnetar.protocol.frames import FRAME_PADDING, dispatch_frame_size, max_frame_size


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
