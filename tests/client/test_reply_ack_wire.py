"""The ACK frames a PIP-371 reply produces, and what the client does with the
broker's answer to them, seen by a scripted broker that delivers one batch of three
requests and answers each ACK that carries a request id as told."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from scripted_broker import T, lookup_answer, serve

from magnetar.client import Client, Consumer, MessageTooBig, NotAllowed
from magnetar.client.errors import ConnectError, TimeoutError
from magnetar.client.message import Message
from magnetar.client.request_reply import REQUEST_TIMEOUT_PROPERTY
from magnetar.protocol import client_codec
from magnetar.protocol.batch import build_batch
from magnetar.protocol.frames import (
    DEFAULT_MAX_MESSAGE_SIZE,
    encode_command,
    encode_payload_command,
)
from magnetar.protocol.pb import BaseCommand, pb

pytestmark = pytest.mark.timeout(30)

Refusal = tuple[int, str]  # (ServerError code, message)


class BatchBroker:
    """Subscribes anybody, sends one batch of three requests from ``requester`` at
    entry 42:7, and answers an ACK with a request id with the next of ``answers``
    (``None``: accepted) — accepted once they run out."""

    def __init__(self) -> None:
        self.url = ""
        self.frames: list[tuple[BaseCommand, bytes]] = []
        self.answers: list[Refusal | None] = []
        self.withheld: list[tuple[asyncio.Transport, bytes]] = []  # answers not sent yet
        self.withhold = False

    def acks(self) -> list[tuple[pb.CommandAck, bytes]]:
        return [(c.ack, body) for c, body in self.frames if c.type == T.ACK]

    def __call__(self, cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if cmd.type == T.PARTITIONED_METADATA:
            reply = BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
            reply.partitionMetadataResponse.request_id = cmd.partitionMetadata.request_id
            transport.write(encode_command(reply))
        elif cmd.type == T.LOOKUP:
            transport.write(lookup_answer(cmd, self.url,
                                          pb.CommandLookupTopicResponse.Connect, False))
        elif cmd.type in (T.SUBSCRIBE, T.CLOSE_CONSUMER):
            reply = BaseCommand(type=T.SUCCESS)
            reply.success.request_id = (cmd.subscribe.request_id if cmd.type == T.SUBSCRIBE
                                        else cmd.close_consumer.request_id)
            transport.write(encode_command(reply))
        elif cmd.type == T.FLOW:
            singles = []
            for i in range(3):
                single = pb.SingleMessageMetadata(sequence_id=i)
                single.properties.add(key=REQUEST_TIMEOUT_PROPERTY, value="5000")
                singles.append((single, b"request-%d" % i))
            metadata = client_codec.encode_message_metadata(
                b"requester", 0, int(time.time() * 1000), num_messages_in_batch=3)
            message = BaseCommand(type=T.MESSAGE)
            message.message.consumer_id = cmd.flow.consumer_id
            message.message.message_id.ledgerId = 42
            message.message.message_id.entryId = 7
            transport.write(encode_payload_command(message, metadata, build_batch(singles)))
        elif cmd.type == T.ACK and cmd.ack.HasField("request_id"):
            answer = self.answers.pop(0) if self.answers else None
            reply = BaseCommand(type=T.ACK_RESPONSE)
            reply.ackResponse.consumer_id = cmd.ack.consumer_id
            reply.ackResponse.request_id = cmd.ack.request_id
            if answer is not None:
                reply.ackResponse.error = answer[0]  # type: ignore[assignment]
                reply.ackResponse.message = answer[1]
            if self.withhold:
                self.withheld.append((transport, encode_command(reply)))
            else:
                transport.write(encode_command(reply))

    def release(self) -> None:
        for transport, frame in self.withheld:
            transport.write(frame)
        self.withheld.clear()


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[BatchBroker, Consumer, list[Message]]]:
    """The scripted broker, a shared consumer of it and the three requests received."""
    broker = BatchBroker()
    server, broker.url, _ = await serve(broker, broker.frames)
    client = Client(broker.url, operation_timeout=5.0)
    try:
        consumer = await client.subscribe("wire", "s", subscription_type="shared")
        msgs = [await consumer.receive(5) for _ in range(3)]
        yield broker, consumer, msgs
    finally:
        await client.close()
        server.close()


async def _settle(consumer: Consumer) -> None:
    """Let every queued ack reach the scripted broker."""
    await consumer.flush_acks()
    await asyncio.sleep(0.1)


async def test_reply_ack_wire_format(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    assert msgs[1].producer_name == "requester"
    await (await consumer.acknowledge(msgs[1], reply=b"answer-1", is_error=True))
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2])
    await _settle(consumer)
    acks = broker.acks()
    assert len(acks) == 2
    reply_ack, body = acks[0]
    assert body == b"answer-1"  # the reply is the frame body after the command
    assert reply_ack.reply_to_client == "requester" and reply_ack.reply_is_error
    assert reply_ack.ack_type == pb.CommandAck.Individual
    assert reply_ack.HasField("request_id")  # the broker answers it: ACK_RESPONSE
    (mid,) = reply_ack.message_id
    assert (mid.ledgerId, mid.entryId, mid.batch_index, mid.batch_size) == (42, 7, 1, 3)
    assert list(mid.ack_set) == [0b101]  # messages 0 and 2 still unacked: entry kept
    grouped, grouped_body = acks[1]
    assert grouped_body == b"" and not grouped.HasField("reply_to_client")
    assert not grouped.HasField("request_id")
    assert [(m.ledgerId, m.entryId, list(m.ack_set)) for m in grouped.message_id] == [
        (42, 7, [])]  # the whole entry, once all three were acked


async def test_a_reply_by_message_id_leaves_the_requester_to_the_broker(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    await (await consumer.acknowledge(msgs[0].message_id, reply=b"by id"))
    await (await consumer.acknowledge(msgs[2].message_id, reply="error by id", is_error=True))
    first, second = broker.acks()
    assert first[0].HasField("reply_to_client") and first[0].reply_to_client == ""
    assert first[1] == b"by id" and not first[0].reply_is_error
    (mid,) = first[0].message_id
    assert (mid.batch_index, list(mid.ack_set)) == (0, [0b110])
    assert second[0].HasField("reply_to_client") and second[0].reply_to_client == ""
    assert second[1] == b"error by id" and second[0].reply_is_error
    (mid,) = second[0].message_id
    assert (mid.batch_index, list(mid.ack_set)) == (2, [0b010])


async def test_a_refused_reply_raises_and_leaves_the_message_unacknowledged(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    broker.answers.append((pb.NotAllowedError, "reply names requester 'x', but ..."))
    with pytest.raises(NotAllowed, match="reply names requester") as refused:
        await (await consumer.acknowledge(msgs[1], reply=b"refused"))
    assert refused.value.code == pb.NotAllowedError
    # Message 1 is still unacknowledged: acking the other two does not ack the entry.
    await consumer.acknowledge(msgs[0])
    await consumer.acknowledge(msgs[2])
    await _settle(consumer)
    assert len(broker.acks()) == 1  # only the refused reply
    # Replied again and accepted, it is the last of the batch: the entry is acked.
    await (await consumer.acknowledge(msgs[1], reply=b"accepted"))
    reply_ack, body = broker.acks()[-1]
    assert body == b"accepted"
    (mid,) = reply_ack.message_id
    assert (mid.batch_index, list(mid.ack_set)) == (1, [])


async def test_the_last_message_of_a_batch_acked_during_a_reply_acks_the_entry(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    await consumer.acknowledge(msgs[0])
    reply = asyncio.ensure_future(consumer.acknowledge(msgs[1], reply=b"answer"))
    await asyncio.sleep(0)  # the reply's ACK is on its way, naming 2 as unacked
    await consumer.acknowledge(msgs[2])
    await (await reply)
    await _settle(consumer)
    entry_acks = [a for a, _ in broker.acks()
                  if not a.HasField("reply_to_client")
                  and [(m.entryId, list(m.ack_set)) for m in a.message_id] == [(7, [])]]
    assert len(entry_acks) == 1


async def test_an_oversized_reply_is_refused_before_it_is_sent(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    too_big = b"x" * (DEFAULT_MAX_MESSAGE_SIZE + 1)  # the broker announced no other size
    with pytest.raises(MessageTooBig, match="exceeds the broker's limit"):
        await consumer.acknowledge(msgs[1], reply=too_big)
    await _settle(consumer)
    assert broker.acks() == []
    await (await consumer.acknowledge(msgs[1], reply=b"fits"))
    assert [body for _, body in broker.acks()] == [b"fits"]


async def test_a_reply_is_pipelined_and_its_refusal_is_never_silent(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    """The call returns once the reply is written, before the broker's verdict; a
    refusal nobody awaits is still counted (and logged)."""
    broker, consumer, msgs = scripted
    broker.withhold = True
    broker.answers.append((pb.NotAllowedError, "refused for the test"))
    receipts = [await consumer.acknowledge(m, reply=b"answer") for m in msgs[:2]]
    await asyncio.sleep(0.1)
    assert len(broker.acks()) == 2  # both replies are on the wire
    assert not any(r.done() for r in receipts)  # and no verdict yet
    broker.release()
    with pytest.raises(NotAllowed, match="refused for the test"):
        await receipts[0]
    assert await receipts[1] is None
    assert consumer.refused_replies == 1
    # Refused and never awaited: counted all the same.
    broker.withhold = False
    broker.answers.append((pb.NotAllowedError, "refused again"))
    await consumer.acknowledge(msgs[0], reply=b"answer")
    await _settle(consumer)
    assert consumer.refused_replies == 2


def _live_timers() -> int:
    """Timers armed on this loop and not cancelled (the default asyncio loop's)."""
    scheduled = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    return sum(1 for handle in scheduled if not handle.cancelled())


async def test_replies_waiting_for_their_verdict_share_one_timer_that_still_fails_them() -> None:
    """Pipelined replies arm no timer each: one timer covers every reply waiting for
    the broker's verdict, and a verdict that never comes still fails its receipt after
    the operation timeout, counted as refused."""
    broker = BatchBroker()
    broker.withhold = True  # no verdict, ever
    server, broker.url, _ = await serve(broker, broker.frames)
    client = Client(broker.url, operation_timeout=0.5)
    try:
        consumer = await client.subscribe("wire", "s", subscription_type="shared")
        msgs = [await consumer.receive(5) for _ in range(3)]
        before = _live_timers()
        receipts = [await consumer.acknowledge(m, reply=b"answer") for m in msgs]
        assert _live_timers() - before <= 1
        for receipt in receipts:
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(receipt, 5)
        assert consumer.refused_replies == 3
    finally:
        await client.close()
        server.close()


async def test_a_reply_whose_connection_ends_before_its_verdict_fails_its_receipt(
    scripted: tuple[BatchBroker, Consumer, list[Message]],
) -> None:
    broker, consumer, msgs = scripted
    broker.withhold = True
    receipt = await consumer.acknowledge(msgs[0], reply=b"answer")
    await asyncio.sleep(0.1)
    conn = consumer._subs[next(iter(consumer._subs))]._conn
    assert conn is not None
    conn.close()
    with pytest.raises(ConnectError):
        await asyncio.wait_for(receipt, 5)
    assert consumer.refused_replies == 1
