"""Sizes are judged on the whole frame a consumer receives, not on the payload alone.

A SEND whose payload is at ``max_message_size`` and whose properties fill the frame
allowance was stored, and its MESSAGE frame (a longer command than SEND's) came out a
few bytes over the consumer's frame limit: magnetar's client dropped its connection,
got the same entry again, and received nothing more. The broker now refuses such a
SEND (and such a raw entry) with a clear error; an entry that fits reaches both
clients whole; magnetar's producer refuses what the broker would.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pulsar
import pytest
from official_client import quiet_logger

from magnetar.broker.features.raw_entries import EntryTooLarge, append_raw_entry_blocking
from magnetar.client import Client, MessageTooBig
from magnetar.protocol.frames import dispatch_frame_size, encode_payload_command, max_frame_size
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import receive_n
from .rawclient import RawPeer

LIMIT = 64 * 1024  # max_message_size of the broker here: frames up to LIMIT + 10 KiB


@pytest.fixture(scope="module")
def small() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(max_message_size=LIMIT) as broker:
        yield broker


@pytest.fixture
def topic() -> str:
    return f"persistent://public/default/frames-{uuid.uuid4().hex[:10]}"


def padded_send(seq: int, payload: bytes, frame_size: int) -> tuple[bytes, int]:
    """A SEND frame of producer 1 whose declared size is ``frame_size``: ``payload``
    and one property padded to fit. Also the size of the entry it stores."""
    pad = frame_size - len(payload)
    for _ in range(5):  # the property's length varint may grow by a byte: settle
        md = pb.MessageMetadata(producer_name="raw", sequence_id=seq, publish_time=1)
        md.properties.add(key="pad", value="p" * pad)
        send = BaseCommand(type=BaseCommand.SEND,
                           send=pb.CommandSend(producer_id=1, sequence_id=seq))
        frame = encode_payload_command(send, md.SerializeToString(), payload)
        pad += frame_size - (len(frame) - 4)
    assert len(frame) - 4 == frame_size
    entry_size = len(frame) - 8 - len(send.SerializeToString())
    return frame, entry_size


def send_raw(peer: RawPeer, frame: bytes) -> BaseCommand:
    peer.sock.sendall(frame)
    while True:
        command = peer.next_frame().command
        if command.type in (BaseCommand.SEND_RECEIPT, BaseCommand.SEND_ERROR):
            return command


async def magnetar_values(url: str, topic: str, n: int) -> list[tuple[bytes, dict[str, str]]]:
    async with Client(url, operation_timeout=10.0) as client:
        consumer = await client.subscribe(topic, "ours", initial_position="earliest")
        out = []
        for _ in range(n):
            msg = await consumer.receive(timeout=20.0)
            await consumer.acknowledge(msg)
            out.append((msg.value, msg.properties))
        return out


def official_values(url: str, topic: str, n: int) -> list[tuple[bytes, dict[str, str]]]:
    client = pulsar.Client(url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "official",
                                    initial_position=pulsar.InitialPosition.Earliest)
        return [(m.data(), m.properties()) for m in receive_n(consumer, n)]
    finally:
        client.close()


def test_a_send_is_judged_by_the_message_frame_it_makes(
    small: EmbeddedBroker, topic: str
) -> None:
    # The largest frame the broker's decoder takes: before, it was stored, and its
    # MESSAGE frame went over the consumers' limit.
    too_large, entry_size = padded_send(0, b"x" * LIMIT, max_frame_size(LIMIT))
    assert dispatch_frame_size(entry_size) > max_frame_size(LIMIT)
    # The largest SEND the broker takes: its MESSAGE frame, at its widest, is exactly
    # at the consumers' limit.
    command = BaseCommand(type=BaseCommand.SEND,
                          send=pb.CommandSend(producer_id=1, sequence_id=1))
    size = max_frame_size(LIMIT) - dispatch_frame_size(0) + 4 + len(command.SerializeToString())
    at_limit, entry_size = padded_send(1, b"y" * LIMIT, size)
    assert dispatch_frame_size(entry_size) == max_frame_size(LIMIT)
    peer = RawPeer(small.port)
    try:
        peer.producer(topic, name="raw")
        reply = send_raw(peer, too_large)
        assert reply.type == BaseCommand.SEND_ERROR
        assert reply.send_error.error == pb.NotAllowedError
        assert "exceeds the maximum message size" in reply.send_error.message
        assert "frame limit" in reply.send_error.message
        assert send_raw(peer, at_limit).type == BaseCommand.SEND_RECEIPT
        peer.publish(1, "raw", 2, b"after")  # the producer carries on
    finally:
        peer.close()
    # Both clients read the topic whole; the refused message is not in it.
    for values in (asyncio.run(magnetar_values(small.service_url, topic, 2)),
                   official_values(small.service_url, topic, 2)):
        assert [value for value, _ in values] == [b"y" * LIMIT, b"after"]
        assert len(values[0][1]["pad"]) > 9000


async def test_magnetar_producer_refuses_what_the_broker_would(
    small: EmbeddedBroker, topic: str
) -> None:
    async with Client(small.service_url, operation_timeout=10.0) as client:
        producer = await client.create_producer(topic)
        # Under the broker's decoder limit, over what its consumers may receive.
        properties = {"pad": "p" * (10 * 1024 - 60)}
        with pytest.raises(MessageTooBig, match="frame"):
            await producer.send(b"z" * LIMIT, properties=properties)
        with pytest.raises(MessageTooBig, match="frame"):
            await producer.send_entry(b"z" * LIMIT, properties=properties)
        await producer.send(b"z" * LIMIT, properties={"pad": "p" * 9000})
        await producer.send(b"after")
    values = await magnetar_values(small.service_url, topic, 2)
    assert [value for value, _ in values] == [b"z" * LIMIT, b"after"]


def test_a_raw_entry_is_judged_with_its_properties(small: EmbeddedBroker, topic: str) -> None:
    # The payload alone is within the limit; its properties take the frame past it.
    with pytest.raises(EntryTooLarge, match="frame limit"):
        append_raw_entry_blocking(small.service, topic, b"r" * LIMIT,
                                  properties={f"h{i}": "v" * 1000 for i in range(11)})
    append_raw_entry_blocking(small.service, topic, b"r" * LIMIT,
                              properties={f"h{i}": "v" * 1000 for i in range(9)})
    values = asyncio.run(magnetar_values(small.service_url, topic, 1))
    assert values[0][0] == b"r" * LIMIT
