"""Hand-rolled encoders for the frames on the broker's hot paths.

MESSAGE (dispatch, with the ``ack_set`` of a partly acked batch too), SEND_RECEIPT
(publish) and PIP-371's REQUEST_RECEIPT and ACK_RESPONSE are written once per message, so
they are encoded directly as protobuf wire bytes instead of building a
``BaseCommand`` object each time. ``tests/protocol/test_fastpath.py`` checks the
bytes against the generated code.
"""

from __future__ import annotations

import struct

from magnetar.protocol.varint import varint

_TWO_U32 = struct.Struct(">II")
_TYPE_MESSAGE = b"\x08\x09"
_TYPE_SEND_RECEIPT = b"\x08\x07"
_FIELD_MESSAGE = 0x4A  # BaseCommand.message = 9, length-delimited
_FIELD_SEND_RECEIPT = 0x3A  # BaseCommand.send_receipt = 7, length-delimited
_TYPE_REQUEST_RECEIPT = b"\x08\x45"  # REQUEST_RECEIPT = 69
_FIELD_REQUEST_RECEIPT = b"\xaa\x04"  # BaseCommand.requestReceipt = 69, length-delimited


def message_id_bytes(ledger_id: int, entry_id: int, partition: int, batch_index: int = -1) -> bytes:
    body = b"\x08" + varint(ledger_id) + b"\x10" + varint(entry_id)
    if partition >= 0:
        body += b"\x18" + varint(partition)
    if batch_index >= 0:
        body += b"\x20" + varint(batch_index)
    return body


class MessageIdEncoder:
    """``message_id_bytes`` for one ledger and partition, with the constant parts made once."""

    __slots__ = ("_prefix", "_suffix")

    def __init__(self, ledger_id: int, partition: int) -> None:
        self._prefix = b"\x08" + varint(ledger_id) + b"\x10"
        self._suffix = b"\x18" + varint(partition) if partition >= 0 else b""

    def __call__(self, entry_id: int, batch_index: int = -1) -> bytes:
        if batch_index >= 0:
            return self._prefix + varint(entry_id) + self._suffix + b"\x20" + varint(batch_index)
        return self._prefix + varint(entry_id) + self._suffix


def encode_message_frame(
    consumer_id: int,
    message_id: bytes,
    redelivery_count: int,
    entry: bytes,
    consumer_epoch: int | None = None,
    ack_set: list[int] | None = None,
) -> bytes:
    """MESSAGE command followed by a stored entry (magic number to end of payload).

    ``message_id`` is the output of :func:`message_id_bytes`; ``ack_set`` (PIP-54, a
    partly acked batch going out again) the int64 words of the batch's messages still
    unacked, written unpacked as proto2 does.
    """
    return encode_message_head(
        consumer_id, message_id, redelivery_count, len(entry), consumer_epoch, ack_set
    ) + entry


def encode_message_head(
    consumer_id: int,
    message_id: bytes,
    redelivery_count: int,
    entry_size: int,
    consumer_epoch: int | None = None,
    ack_set: list[int] | None = None,
) -> bytes:
    """:func:`encode_message_frame` up to the entry: the frame's sizes and its MESSAGE
    command, for a writer that sends the stored entry's own bytes after it (no copy of
    the entry per consumer)."""
    inner = b"\x08" + varint(consumer_id) + b"\x12" + varint(len(message_id)) + message_id
    if redelivery_count:
        inner += b"\x18" + varint(redelivery_count)
    if ack_set:
        inner += b"".join([b"\x20" + varint(word) for word in ack_set])
    if consumer_epoch is not None:
        inner += b"\x28" + varint(consumer_epoch)
    cmd = _TYPE_MESSAGE + bytes((_FIELD_MESSAGE,)) + varint(len(inner)) + inner
    return _TWO_U32.pack(len(cmd) + 4 + entry_size, len(cmd)) + cmd


def encode_request_receipt(
    producer_id: int,
    request_id: bytes,
    is_error: bool,
    body: bytes,
    sequence_id: int | None = None,
) -> bytes:
    """PIP-371 REQUEST_RECEIPT (BaseCommand field 69) followed by the reply body.

    ``request_id`` is the output of :func:`message_id_bytes`; ``sequence_id`` is the
    request's producer sequence id (field 4), which the client matches replies by.
    """
    inner = b"\x08" + varint(producer_id) + b"\x12" + varint(len(request_id)) + request_id
    if is_error:
        inner += b"\x18\x01"
    if sequence_id is not None:
        inner += b"\x20" + varint(sequence_id)
    cmd = _TYPE_REQUEST_RECEIPT + _FIELD_REQUEST_RECEIPT + varint(len(inner)) + inner
    return _TWO_U32.pack(len(cmd) + 4 + len(body), len(cmd)) + cmd + body


_TYPE_ACK_RESPONSE = b"\x08\x26"  # ACK_RESPONSE = 38
_FIELD_ACK_RESPONSE = b"\xb2\x02"  # BaseCommand.ackResponse = 38, length-delimited


def encode_ack_response(consumer_id: int, request_id: int) -> bytes:
    """A successful ACK_RESPONSE (every PIP-371 reply gets one)."""
    inner = b"\x08" + varint(consumer_id) + b"\x30" + varint(request_id)
    cmd = _TYPE_ACK_RESPONSE + _FIELD_ACK_RESPONSE + varint(len(inner)) + inner
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


def encode_send_receipt(
    producer_id: int,
    sequence_id: int,
    message_id: bytes,
    highest_sequence_id: int = 0,
) -> bytes:
    inner = (
        b"\x08"
        + varint(producer_id)
        + b"\x10"
        + varint(sequence_id)
        + b"\x1a"
        + varint(len(message_id))
        + message_id
    )
    if highest_sequence_id:
        inner += b"\x20" + varint(highest_sequence_id)
    cmd = _TYPE_SEND_RECEIPT + bytes((_FIELD_SEND_RECEIPT,)) + varint(len(inner)) + inner
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd
