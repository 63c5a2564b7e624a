"""The hand-written MESSAGE (with or without an ack set) and SEND_RECEIPT encoders agree
with protobuf."""

from __future__ import annotations

import pytest

from magnetar.protocol.fastpath import (
    encode_message_frame,
    encode_send_receipt,
    message_id_bytes,
    varint,
)
from magnetar.protocol.frames import FrameDecoder, encode_command_with_body
from magnetar.protocol.pb import BaseCommand, pb


@pytest.mark.parametrize(
    "value",
    [0, 1, 127, 128, 300, 4095, 4096, 2**14 - 1, 2**14, 65535, 65536, 2**21 - 1, 2**21,
     2**28 - 1, 2**28, 2**32, 2**64 - 1],
)
def test_varint_matches_protobuf(value: int) -> None:
    msg = pb.CommandFlow(consumer_id=value, messagePermits=0)
    assert msg.SerializeToString()[1:].startswith(varint(value))


@pytest.mark.parametrize(
    ("consumer_id", "ledger", "entry", "partition", "redeliveries", "epoch"),
    [(1, 5, 0, -1, 0, None), (2**40, 1795307393, 123456, 3, 4, 7), (0, 0, 2**40, 0, 0, 0)],
)
def test_message_frame_matches_generated_code(
    consumer_id: int, ledger: int, entry: int, partition: int, redeliveries: int, epoch: int | None
) -> None:
    stored = b"\x0e\x01" + b"entry-bytes"
    fast = encode_message_frame(
        consumer_id, message_id_bytes(ledger, entry, partition), redeliveries, stored, epoch
    )
    mid = pb.MessageIdData(ledgerId=ledger, entryId=entry)
    if partition >= 0:
        mid.partition = partition
    message = pb.CommandMessage(consumer_id=consumer_id, message_id=mid)
    if redeliveries:
        message.redelivery_count = redeliveries
    if epoch is not None:
        message.consumer_epoch = epoch
    slow = encode_command_with_body(BaseCommand(type=BaseCommand.MESSAGE, message=message), stored)
    assert fast == slow
    frame = FrameDecoder().feed(fast)[0]
    assert frame.command.message.message_id.entryId == entry
    assert frame.body == stored


@pytest.mark.parametrize(
    ("ack_set", "redeliveries", "epoch"),
    [([0b1010], 0, None), ([-1, 5], 2, 3), ([], 0, 0), ([-(2**63), 2**63 - 1], 1, None)],
)
def test_message_frame_with_an_ack_set_matches_generated_code(
    ack_set: list[int], redeliveries: int, epoch: int | None
) -> None:
    """A partly acked batch's MESSAGE (PIP-54) comes from the same encoder, field for
    field what protobuf writes (int64 words, negative ones in ten bytes)."""
    stored = b"\x0e\x01" + b"entry-bytes"
    fast = encode_message_frame(
        9, message_id_bytes(7, 42, 1), redeliveries, stored, epoch, ack_set
    )
    message = pb.CommandMessage(
        consumer_id=9, message_id=pb.MessageIdData(ledgerId=7, entryId=42, partition=1),
        ack_set=ack_set,
    )
    if redeliveries:
        message.redelivery_count = redeliveries
    if epoch is not None:
        message.consumer_epoch = epoch
    slow = encode_command_with_body(BaseCommand(type=BaseCommand.MESSAGE, message=message), stored)
    assert fast == slow
    assert list(FrameDecoder().feed(fast)[0].command.message.ack_set) == ack_set


def test_send_receipt_matches_generated_code() -> None:
    fast = encode_send_receipt(3, 99, message_id_bytes(10, 20, -1), 0)
    receipt = pb.CommandSendReceipt(
        producer_id=3, sequence_id=99, message_id=pb.MessageIdData(ledgerId=10, entryId=20)
    )
    slow = encode_command_with_body(
        BaseCommand(type=BaseCommand.SEND_RECEIPT, send_receipt=receipt), b""
    )
    assert fast == slow


def test_message_id_encoder_matches_the_function() -> None:
    from magnetar.protocol.fastpath import MessageIdEncoder

    for ledger, partition in ((1795307393, -1), (7, 3)):
        encode = MessageIdEncoder(ledger, partition)
        for entry in (0, 1, 70000, 2**40):
            assert encode(entry) == message_id_bytes(ledger, entry, partition)
            assert encode(entry, 7) == message_id_bytes(ledger, entry, partition, 7)


def test_request_receipt_matches_generated_code() -> None:
    from magnetar.protocol.fastpath import encode_request_receipt

    for is_error, sequence_id in ((False, None), (True, None), (False, 0), (True, 2**40)):
        fast = encode_request_receipt(
            5, message_id_bytes(1795307393, 42, 2, 3), is_error, b"body", sequence_id
        )
        receipt = pb.CommandRequestReceipt(
            reply_to_producer_id=5,
            request_message_id=pb.MessageIdData(
                ledgerId=1795307393, entryId=42, partition=2, batch_index=3
            ),
        )
        if is_error:
            receipt.is_error = True
        if sequence_id is not None:
            receipt.request_sequence_id = sequence_id
        slow = encode_command_with_body(
            BaseCommand(type=BaseCommand.REQUEST_RECEIPT, requestReceipt=receipt), b"body"
        )
        assert fast == slow


def test_ack_response_matches_generated_code() -> None:
    from magnetar.protocol.fastpath import encode_ack_response
    from magnetar.protocol.frames import encode_command

    for consumer_id, request_id in ((0, 0), (1, 55), (2**40, 2**63 - 1)):
        slow = encode_command(
            BaseCommand(
                type=BaseCommand.ACK_RESPONSE,
                ackResponse=pb.CommandAckResponse(consumer_id=consumer_id, request_id=request_id),
            )
        )
        assert encode_ack_response(consumer_id, request_id) == slow
