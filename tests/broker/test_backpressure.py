"""Backpressure in bytes, both directions, against peers that never read.

A producer that pipelines SENDs and never reads its receipts is stopped being read
(its send side blocks) with a bounded number of messages pending; a consumer that
grants 100k permits and never reads holds a bounded write buffer. Both get all they
are owed, in order, once they read; an official client beside them keeps working.

The loopback's kernel buffers hold megabytes; the tests shrink the two ends' socket
buffers so that a stall comes after thousands of messages rather than 100k. All
waits are generous deadlines that only bound a failure."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pulsar

from magnetar.broker.session.connection import PAUSED_WRITE, ServerCnx
from magnetar.protocol.frames import FrameDecoder, encode_payload_command, max_frame_size
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer

DEADLINE = 60.0  # seconds: only bounds a failure
SMALL_BUFFER = 4096  # socket buffer bytes asked of the kernel at both ends
RECEIPT_MAX = 64  # bytes: a SEND_RECEIPT frame is smaller
MESSAGE_HEADER_MAX = 1024  # bytes: a MESSAGE frame's command, before its entry
R = TypeVar("R")


def on_loop(broker: EmbeddedBroker, fn: Callable[[], R]) -> R:
    """Run ``fn`` on the broker's event loop (its state belongs to the loop)."""
    assert broker.service is not None

    async def run() -> R:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), broker.service.loop).result(10)


class SmallBufferPeer(RawPeer):
    """A RawPeer whose socket buffers are small, and whose broker-side connection's
    send buffer is made small too (in-process broker)."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_BUFFER)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER)
        sock.settimeout(10)
        sock.connect(("127.0.0.1", broker.port))
        self.sock = sock
        self.decoder = FrameDecoder()
        self.backlog = []
        self.send(
            BaseCommand(
                type=BaseCommand.CONNECT,
                connect=pb.CommandConnect(client_version="raw", protocol_version=21),
            )
        )
        self.expect(BaseCommand.CONNECTED)
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        assert broker.service is not None
        service = broker.service

        def find() -> ServerCnx:
            (cnx,) = [c for c in service.connections if c.remote_address == address]
            assert cnx.transport is not None
            cnx.transport.get_extra_info("socket").setsockopt(
                socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL_BUFFER
            )
            return cnx

        self.cnx = on_loop(broker, find)


def send_frame(name: str, seq: int, payload: bytes, producer_id: int = 1) -> bytes:
    send = BaseCommand(
        type=BaseCommand.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=seq)
    )
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
    return encode_payload_command(send, md.SerializeToString(), payload)


def topic_name() -> str:
    return f"persistent://public/default/bp-{uuid.uuid4().hex[:10]}"


# ------------------------------------------------------------------- publish


def test_a_producer_that_never_reads_is_no_longer_read_and_gets_every_receipt_later(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any]
) -> None:
    limit = 50
    with EmbeddedBroker(
        data_dir=tmp_path, max_pending_publish_requests_per_connection=limit
    ) as broker:
        round_trip = official(broker)
        assert broker.service is not None
        service = broker.service
        peer = SmallBufferPeer(broker)
        cnx = peer.cnx
        name = peer.producer(topic_name())

        def state() -> dict[str, Any]:
            assert cnx.transport is not None
            return {
                "paused": cnx.read_paused,
                "pending": cnx.pending_publishes,
                "peak_pending": cnx.peak_pending_publishes,
                "write_buffer": cnx.transport.get_write_buffer_size(),
                "peak_write_buffer": cnx.peak_write_buffer,
                "high_water": cnx.transport.get_write_buffer_limits()[1],
                "partial": cnx.decoder.buffered,
                "held": sum(len(f.body) + f.command.ByteSize() + 8 for f in cnx._held),
            }

        # Pipeline SENDs and never read, until the socket will take no more and the
        # broker says it has stopped reading this connection.
        peer.sock.setblocking(False)
        seq = 0
        out = b""
        deadline = time.monotonic() + DEADLINE
        while True:
            assert time.monotonic() < deadline, f"never stalled: {on_loop(broker, state)}"
            if not out:
                out = send_frame(name, seq, b"x" * 100)
                seq += 1
            try:
                out = out[peer.sock.send(out) :]
                continue
            except BlockingIOError:
                pass
            now = on_loop(broker, state)
            assert now["pending"] <= limit
            if now["paused"] & PAUSED_WRITE:
                break
            time.sleep(0.01)

        stalled = on_loop(broker, state)
        # What the broker holds for it is bounded by the settings, not by how much
        # it sent: its pending publishes, its receipts past the high-water mark, one
        # partial frame, and the frames of one read (at most 256 KiB) held unhandled.
        assert stalled["peak_pending"] <= limit
        assert stalled["peak_write_buffer"] <= stalled["high_water"] + limit * RECEIPT_MAX
        assert stalled["partial"] <= max_frame_size(service.config.max_message_size)
        assert stalled["held"] <= 256 * 1024
        assert seq > limit * 10  # it did pipeline far more than the limit

        round_trip("while a producer stalls")  # the broker serves everyone else

        # Now it reads: every SEND it wrote gets its receipt, in order.
        peer.sock.setblocking(True)
        receipts: list[int] = []
        decoder = FrameDecoder()
        deadline = time.monotonic() + DEADLINE
        while len(receipts) < seq:
            assert time.monotonic() < deadline, f"{len(receipts)} of {seq} receipts"
            readable, writable, _ = select.select([peer.sock], [peer.sock] if out else [], [], 1)
            if writable:
                out = out[peer.sock.send(out) :]
            if readable:
                data = peer.sock.recv(1 << 20)
                assert data, "the broker closed the connection"
                for frame in decoder.feed(data):
                    assert frame.command.type == BaseCommand.SEND_RECEIPT, frame.command
                    receipts.append(frame.command.send_receipt.sequence_id)
        assert receipts == list(range(seq))
        done = on_loop(broker, state)
        assert done["pending"] == 0 and done["paused"] == 0
        assert done["peak_pending"] <= limit
        assert on_loop(broker, lambda: service.publish_buffer.bytes) == 0
        round_trip("after")


def test_the_official_client_publishes_through_a_small_pending_limit(
    tmp_path: Any, client_factory: Callable[..., pulsar.Client]
) -> None:
    """Reading pauses and resumes many times under a pipelining official producer;
    every message is receipted and delivered in order."""
    with EmbeddedBroker(data_dir=tmp_path, max_pending_publish_requests_per_connection=4) as broker:
        client = client_factory(broker.service_url)
        topic = topic_name()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        count = 500
        failures: list[object] = []
        for i in range(count):
            producer.send_async(
                f"{i}".encode(),
                lambda result, _id: failures.append(result) if result != pulsar.Result.Ok else None,
            )
        producer.flush()
        assert failures == []
        got = [consumer.receive(timeout_millis=20_000).data() for _ in range(count)]
        assert got == [f"{i}".encode() for i in range(count)]
        assert broker.service is not None
        service = broker.service
        peaks = on_loop(broker, lambda: [c.peak_pending_publishes for c in service.connections])
        assert max(peaks) <= 4


def test_the_broker_wide_publish_buffer_holds_publishers_past_its_limit(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any]
) -> None:
    """max_message_publish_buffer_bytes below one message: every publish takes the
    buffer past it, so each connection is held after each message until the buffer
    drains; two producers pipelining at once never have more than one message each
    pending, and get all their receipts in order."""
    limit = 50_000
    payload = b"p" * 60_000
    count = 40
    with EmbeddedBroker(data_dir=tmp_path, max_message_publish_buffer_bytes=limit) as broker:
        round_trip = official(broker)
        assert broker.service is not None
        service = broker.service
        topic = topic_name()
        peers = [RawPeer(broker.port) for _ in range(2)]
        names = [peer.producer(topic, producer_id=1) for peer in peers]
        frames = [[send_frame(n, seq, payload) for seq in range(count)] for n in names]
        frame_size = len(frames[0][0])

        def pipeline(peer: RawPeer, data: list[bytes]) -> None:
            peer.sock.sendall(b"".join(data))

        senders = [
            threading.Thread(target=pipeline, args=(peer, data), daemon=True)
            for peer, data in zip(peers, frames, strict=True)
        ]
        for sender in senders:
            sender.start()
        for peer in peers:
            got = [
                peer.expect(BaseCommand.SEND_RECEIPT, timeout=DEADLINE).command.send_receipt
                for _ in range(count)
            ]
            assert [r.sequence_id for r in got] == list(range(count))
        for sender in senders:
            sender.join(DEADLINE)
        buffer = service.publish_buffer
        peak, holds, left = on_loop(broker, lambda: (buffer.peak, buffer.holds, buffer.bytes))
        assert peak <= limit + 2 * frame_size
        assert holds >= count  # held after each of its messages, at least
        assert left == 0
        round_trip("after")


# ------------------------------------------------------------------ dispatch


def test_a_consumer_that_never_reads_holds_a_bounded_write_buffer(
    tmp_path: Any, client_factory: Callable[..., pulsar.Client]
) -> None:
    size = 256 * 1024
    backlog, live = 30, 30
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        assert broker.service is not None
        config = broker.service.config
        client = client_factory(broker.service_url)
        topic = topic_name()
        producer = client.create_producer(topic, batching_enabled=False)

        def value(i: int) -> bytes:
            return f"{i:08d}".encode() + b"m" * (size - 8)

        for i in range(backlog):  # waiting before the consumer comes
            producer.send(value(i))
        peer = SmallBufferPeer(broker)
        cnx = peer.cnx
        peer.subscribe(topic, "s", permits=100_000)  # and never reads
        for i in range(backlog, backlog + live):  # arriving while it does not read
            producer.send(value(i))

        def state() -> dict[str, Any]:
            assert cnx.transport is not None
            (consumer,) = cnx.consumers.values()
            return {
                "write_buffer": cnx.transport.get_write_buffer_size(),
                "peak_write_buffer": cnx.peak_write_buffer,
                "high_water": cnx.transport.get_write_buffer_limits()[1],
                "writable": cnx.writable,
                "sent": consumer.messages_out,
            }

        deadline = time.monotonic() + DEADLINE
        now = on_loop(broker, state)
        while now["writable"]:
            assert time.monotonic() < deadline, f"the broker never stopped: {now}"
            time.sleep(0.02)
            now = on_loop(broker, state)
        # The bound: under the high-water mark when a round starts, one round's bytes
        # (dispatch_max_bytes_per_round plus the entry that crosses it) on top.
        bound = now["high_water"] + config.dispatch_max_bytes_per_round + size + MESSAGE_HEADER_MAX
        assert now["write_buffer"] <= bound
        assert now["peak_write_buffer"] <= bound
        assert now["sent"] < backlog + live  # the rest waits in the log, not in memory

        # Now it reads: every message, in order, none twice.
        peer.sock.settimeout(DEADLINE)
        got: list[bytes] = []
        while len(got) < backlog + live:
            frame = peer.expect(BaseCommand.MESSAGE, timeout=DEADLINE)
            got.append(frame.body[-size:][:8])
        assert got == [f"{i:08d}".encode() for i in range(backlog + live)]
        assert peer.nothing_of(BaseCommand.MESSAGE, wait=0.3)
        assert on_loop(broker, state)["peak_write_buffer"] <= bound


def test_a_consumer_that_drains_is_resumed(tmp_path: Any) -> None:
    """resume_writing restarts dispatch: a consumer that paused the broker (write
    buffer full) receives what was published meanwhile once it reads."""
    with EmbeddedBroker(data_dir=tmp_path, dispatch_max_bytes_per_round=64 * 1024) as broker:
        peer = SmallBufferPeer(broker)
        producer_peer = RawPeer(broker.port)
        topic = topic_name()
        name = producer_peer.producer(topic)
        peer.subscribe(topic, "s", permits=100_000)
        count = 200
        for seq in range(count):
            producer_peer.publish(1, name, seq, f"{seq:08d}".encode() + b"z" * 20_000)
        got: list[bytes] = []
        while len(got) < count:
            frame = peer.expect(BaseCommand.MESSAGE, timeout=DEADLINE)
            got.append(frame.body[-20_008:][:8])
        assert got == [f"{i:08d}".encode() for i in range(count)]
