"""What the client sends when it asks an Exclusive subscription to redeliver after a
negative ack (PIP-106), seen by a scripted broker: the acks it still held first, then
REDELIVER_UNACKNOWLEDGED_MESSAGES naming the nacked entries in a new consumer epoch,
then the permits of what it dropped from its receiver queue, by message."""

from __future__ import annotations

import asyncio
import time

import pytest
from scripted_broker import T, lookup_answer, serve

from magnetar.client import Client
from magnetar.protocol import client_codec
from magnetar.protocol.batch import build_batch
from magnetar.protocol.frames import encode_command, encode_payload_command
from magnetar.protocol.pb import BaseCommand, pb

pytestmark = pytest.mark.timeout(30)

LEDGER = 9


def _entry(consumer_id: int, entry: int, batch: int) -> bytes:
    """MESSAGE of entry ``entry``: a single message, or a batch of ``batch``."""
    message = BaseCommand(type=T.MESSAGE)
    message.message.consumer_id = consumer_id
    message.message.message_id.ledgerId = LEDGER
    message.message.message_id.entryId = entry
    now = int(time.time() * 1000)
    if batch:
        singles = [(pb.SingleMessageMetadata(sequence_id=i), b"e%d-%d" % (entry, i))
                   for i in range(batch)]
        metadata = client_codec.encode_message_metadata(b"p", entry, now,
                                                        num_messages_in_batch=batch)
        return encode_payload_command(message, metadata, build_batch(singles))
    metadata = client_codec.encode_message_metadata(b"p", entry, now)
    return encode_payload_command(message, metadata, b"e%d" % entry)


async def test_exclusive_nack_redelivery_names_the_nacked_entries() -> None:
    frames: list[tuple[BaseCommand, bytes]] = []
    urls: list[str] = []
    sent = []

    def broker(cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if cmd.type == T.PARTITIONED_METADATA:
            reply = BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
            reply.partitionMetadataResponse.request_id = cmd.partitionMetadata.request_id
            transport.write(encode_command(reply))
        elif cmd.type == T.LOOKUP:
            transport.write(lookup_answer(cmd, urls[0],
                                          pb.CommandLookupTopicResponse.Connect, False))
        elif cmd.type in (T.SUBSCRIBE, T.CLOSE_CONSUMER):
            reply = BaseCommand(type=T.SUCCESS)
            reply.success.request_id = (cmd.subscribe.request_id if cmd.type == T.SUBSCRIBE
                                        else cmd.close_consumer.request_id)
            transport.write(encode_command(reply))
        elif cmd.type == T.FLOW and not sent:
            # Entries 0 and 1 single messages, entry 2 a batch of three.
            sent.append(True)
            consumer_id = cmd.flow.consumer_id
            transport.write(b"".join(_entry(consumer_id, e, b) for e, b in
                                     ((0, 0), (1, 0), (2, 3))))

    server, url, _ = await serve(broker, frames)
    urls.append(url)
    client = Client(url)
    try:
        consumer = await client.subscribe(
            "nack-wire", "s", receiver_queue_size=10, negative_ack_redelivery_delay=0.05,
            ack_group_time=10.0,  # the ack would wait: the redelivery must send it first
        )
        first = await consumer.receive(5)
        second = await consumer.receive(5)
        assert (first.value, second.value) == (b"e0", b"e1")
        await consumer.acknowledge(first)
        start = len(frames)
        consumer.negative_acknowledge(second)
        for _ in range(200):
            if any(c.type == T.REDELIVER_UNACKNOWLEDGED_MESSAGES for c, _ in frames):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        after = [c for c, _ in frames[start:]]
        assert [c.type for c in after] == [T.ACK, T.REDELIVER_UNACKNOWLEDGED_MESSAGES, T.FLOW]
        ack, redeliver, flow = after
        assert [(m.ledgerId, m.entryId) for m in ack.ack.message_id] == [(LEDGER, 0)]
        red = redeliver.redeliverUnacknowledgedMessages
        assert red.consumer_epoch == 1
        assert [(m.ledgerId, m.entryId) for m in red.message_ids] == [(LEDGER, 1)]
        # Two messages taken, and the three of the dropped batch given back.
        assert flow.flow.messagePermits == 5
    finally:
        await client.close()
        server.close()
