"""A SEND's ``num_messages_in_batch`` must match its payload: consumers split the entry
by that count and the broker charges that many permits.

A producer that lied (N = 2 or 5,000 around a payload that is no batch) made the
official client's consumer die with SIGSEGV and stalled magnetar's. The broker now
walks an uncompressed Pulsar batch, bounds a compressed one's count by its
uncompressed size, bounds a foreign entry's count (it is no Pulsar batch), and refuses
the rest with a SEND_ERROR that says why. Both clients then read the topic whole.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid

import pytest

from magnetar.client import Client
from magnetar.protocol.batch import build_batch
from magnetar.protocol.compression import LZ4, compress
from magnetar.protocol.frames import encode_payload_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer

NOT_A_BATCH = b"\xff\xff\xff\xf0 this is not a batch of messages, whatever it says"
KAFKA = [("entry.format", "kafka")]


def batch(*values: bytes) -> bytes:
    return build_batch((pb.SingleMessageMetadata(), value) for value in values)


def send(peer: RawPeer, seq: int, payload: bytes, n: int | None = None,
         properties: list[tuple[str, str]] = (), **fields: int) -> BaseCommand:  # type: ignore[assignment]
    md = pb.MessageMetadata(producer_name="raw", sequence_id=seq, publish_time=1, **fields)
    if n is not None:
        md.num_messages_in_batch = n
    for key, value in properties:
        md.properties.add(key=key, value=value)
    command = BaseCommand(type=BaseCommand.SEND,
                          send=pb.CommandSend(producer_id=1, sequence_id=seq))
    peer.sock.sendall(encode_payload_command(command, md.SerializeToString(), payload))
    while True:
        reply = peer.next_frame().command
        if reply.type in (BaseCommand.SEND_RECEIPT, BaseCommand.SEND_ERROR):
            return reply


def refused(reply: BaseCommand, words: str) -> bool:
    return (reply.type == BaseCommand.SEND_ERROR
            and reply.send_error.error == pb.NotAllowedError
            and words in reply.send_error.message)


OFFICIAL_CONSUMER = textwrap.dedent("""
    import json, sys, pulsar
    url, topic = sys.argv[1:3]
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    consumer = client.subscribe(topic, "official",
                                initial_position=pulsar.InitialPosition.Earliest)
    while True:
        msg = consumer.receive(20000)
        consumer.acknowledge(msg)
        print(json.dumps(msg.data().hex()), flush=True)
        if msg.data() == b"after":
            break
    client.close()
""")


def official_values(url: str, topic: str) -> tuple[int, list[bytes]]:
    """The official client in a child process (it crashed on lying batches): its exit
    code and what it received up to b"after"."""
    result = subprocess.run([sys.executable, "-c", OFFICIAL_CONSUMER, url, topic],
                            capture_output=True, text=True, timeout=120)
    return result.returncode, [bytes.fromhex(json.loads(line))
                               for line in result.stdout.splitlines()]


async def magnetar_values(url: str, topic: str, n: int) -> list[bytes]:
    async with Client(url, operation_timeout=10.0) as client:
        consumer = await client.subscribe(topic, "ours", initial_position="earliest",
                                          receiver_queue_size=10)
        values = []
        for _ in range(n):
            msg = await consumer.receive(timeout=20.0)
            await consumer.acknowledge(msg)
            values.append(msg.value)
        assert consumer.discarded_entries == 0
        return values


def test_lying_batches_are_refused_and_both_clients_read_the_rest(
    broker: EmbeddedBroker, topic: str
) -> None:
    peer = RawPeer(broker.port)
    try:
        peer.producer(topic, name="raw")
        assert send(peer, 0, b"before").type == BaseCommand.SEND_RECEIPT
        for n in (2, 999, 5000, 2**31 - 1):  # no batch at all
            assert refused(send(peer, 1, NOT_A_BATCH, n), f"num_messages_in_batch {n}")
        three = batch(b"a", b"bb", b"ccc")
        assert refused(send(peer, 1, three, 4), "does not match the payload")
        assert refused(send(peer, 1, three, 2), "more than its 2 batched messages")
        assert refused(send(peer, 1, three, 0), "out of range")
        assert refused(send(peer, 1, three, -1), "out of range")
        assert refused(send(peer, 1, three, 100_001), "max_messages_per_batch")
        # Compressed: bounded by the uncompressed size it declares.
        packed = compress(LZ4, three)
        assert refused(send(peer, 1, packed, 1000, compression=LZ4,
                            uncompressed_size=len(three)), "does not fit")
        # What is true goes through.
        assert send(peer, 1, three, 3).type == BaseCommand.SEND_RECEIPT
        assert send(peer, 2, packed, 3, compression=LZ4,
                    uncompressed_size=len(three)).type == BaseCommand.SEND_RECEIPT
        assert send(peer, 3, b"after").type == BaseCommand.SEND_RECEIPT
    finally:
        peer.close()
    expected = [b"before", b"a", b"bb", b"ccc", b"a", b"bb", b"ccc", b"after"]
    code, values = official_values(broker.service_url, topic)
    assert (code, values) == (0, expected)
    assert asyncio.run(magnetar_values(broker.service_url, topic, len(expected))) == expected


@pytest.mark.parametrize("n", [1, 2, 5000, 100_000])
def test_a_foreign_entry_is_no_pulsar_batch_only_its_count_is_bounded(
    broker: EmbeddedBroker, n: int
) -> None:
    topic = f"persistent://public/default/foreign-{uuid.uuid4().hex[:10]}"
    peer = RawPeer(broker.port)
    try:
        peer.producer(topic, name="raw")
        assert send(peer, 0, NOT_A_BATCH, n, KAFKA).type == BaseCommand.SEND_RECEIPT
        assert refused(send(peer, 1, NOT_A_BATCH, 100_001, KAFKA), "out of range")
        assert refused(send(peer, 1, NOT_A_BATCH, 0, KAFKA), "out of range")
        # Named Pulsar's, it is a Pulsar batch and walked.
        assert refused(send(peer, 1, NOT_A_BATCH, 2, [("entry.format", "pulsar")]),
                       "does not match the payload")
    finally:
        peer.close()
