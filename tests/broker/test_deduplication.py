"""Message deduplication against a real broker, driven by the official ``pulsar`` client
(and by raw frames where the exact answer matters): duplicates are not stored and are
answered as Pulsar answers them, ``last_sequence_id`` lets a producer of the same name
go on where it left off (after a reconnect, a restart, a kill -9), and it is off by
default."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.features.raw_entries import append_raw_entry_blocking
from magnetar.client import Client
from magnetar.protocol.frames import Frame, encode_payload_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import drain
from .rawclient import RawPeer

UINT64_MINUS_ONE = (1 << 64) - 1  # how -1 travels in MessageIdData's uint64 fields


@pytest.fixture(scope="module")
def dedup_broker() -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(broker_deduplication_enabled=True) as broker:
        yield broker


@pytest.fixture
def dclient(
    dedup_broker: EmbeddedBroker, client_factory: Callable[..., pulsar.Client]
) -> pulsar.Client:
    return client_factory(dedup_broker.service_url)


def stored(client: pulsar.Client, topic: str) -> list[bytes]:
    """Every message of the topic, from the start."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while True:
        try:
            out.append(reader.read_next(1000).data())
        except pulsar.Timeout:
            reader.close()
            return out


def is_duplicate_receipt(mid: pulsar.MessageId) -> bool:
    return mid.ledger_id() == -1 and mid.entry_id() == -1


# ------------------------------------------------------------ off by default


def test_off_by_default_duplicates_are_stored(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, producer_name="p")
    for i in range(3):
        producer.send(f"m{i}".encode())
    again = producer.send(b"m1-again", sequence_id=1)
    assert again.entry_id() >= 0
    producer.close()
    assert client.create_producer(topic, producer_name="p").last_sequence_id() == -1
    assert stored(client, topic) == [b"m0", b"m1", b"m2", b"m1-again"]


# ------------------------------------------------------------ on


def test_duplicates_are_dropped_and_answered(dclient: pulsar.Client, topic: str) -> None:
    producer = dclient.create_producer(topic, producer_name="p")
    ids = [producer.send(f"m{i}".encode()) for i in range(5)]
    assert all(mid.entry_id() >= 0 for mid in ids)
    assert is_duplicate_receipt(producer.send(b"dup-2", sequence_id=2))
    assert is_duplicate_receipt(producer.send(b"dup-4", sequence_id=4))
    assert producer.send(b"m5", sequence_id=5).entry_id() >= 0
    assert producer.last_sequence_id() == 5
    assert stored(dclient, topic) == [b"m0", b"m1", b"m2", b"m3", b"m4", b"m5"]


def test_last_sequence_id_continues_after_reconnect(dclient: pulsar.Client, topic: str) -> None:
    first = dclient.create_producer(topic, producer_name="p")
    assert first.last_sequence_id() == -1
    for i in range(3):
        first.send(f"m{i}".encode())
    first.close()
    second = dclient.create_producer(topic, producer_name="p")
    assert second.last_sequence_id() == 2
    second.send(b"m3")  # numbered 3 by the client
    assert second.last_sequence_id() == 3
    assert is_duplicate_receipt(second.send(b"dup", sequence_id=1))
    other = dclient.create_producer(topic, producer_name="q")  # per producer name
    assert other.last_sequence_id() == -1
    other.send(b"q0")
    assert stored(dclient, topic) == [b"m0", b"m1", b"m2", b"m3", b"q0"]


def test_batches_count_their_last_sequence_id(dclient: pulsar.Client, topic: str) -> None:
    batcher = dclient.create_producer(
        topic, producer_name="b", batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(10):
        batcher.send_async(f"m{i}".encode(), None)
    batcher.flush()
    batcher.close()
    again = dclient.create_producer(topic, producer_name="b")
    assert again.last_sequence_id() == 9
    # The batch sent again, one by one (the official client cannot send an explicit 0).
    for i in range(1, 10):
        assert is_duplicate_receipt(again.send(f"m{i}".encode(), sequence_id=i))
    again.send(b"m10")
    assert stored(dclient, topic) == [f"m{i}".encode() for i in range(11)]


def test_partitions_deduplicate_each(
    dedup_broker: EmbeddedBroker, dclient: pulsar.Client, topic: str
) -> None:
    dedup_broker.create_partitioned_topic(topic, 2)
    producer = dclient.create_producer(topic, producer_name="pp")
    for i in range(10):
        producer.send(f"m{i}".encode())
    producer.close()
    again = dclient.create_producer(topic, producer_name="pp")
    # The official client numbers each partition's messages on their own (0..4 each,
    # round robin); each partition remembers its own, and the client takes the highest.
    assert again.last_sequence_id() == 4
    assert sorted(stored(dclient, topic)) == sorted(f"m{i}".encode() for i in range(10))


def test_exclusive_producer_waiting_for_its_turn_learns_its_last_id(
    dclient: pulsar.Client, topic: str
) -> None:
    """PIP-68: the PRODUCER_SUCCESS that promotes a WaitForExclusive producer carries it."""
    modes = pulsar.ProducerAccessMode
    x = dclient.create_producer(topic, producer_name="x", access_mode=modes.Exclusive)
    for i in range(3):
        x.send(f"x{i}".encode())
    x.close()
    holder = dclient.create_producer(topic, producer_name="y", access_mode=modes.Exclusive)
    result: dict[str, object] = {}

    def wait_for_turn() -> None:
        waiting = dclient.create_producer(
            topic, producer_name="x", access_mode=modes.WaitForExclusive
        )
        result["last"] = waiting.last_sequence_id()
        result["dup"] = is_duplicate_receipt(waiting.send(b"x2-again", sequence_id=2))

    thread = threading.Thread(target=wait_for_turn)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # still waiting while y holds the topic
    holder.close()
    thread.join(30)
    assert result == {"last": 2, "dup": True}


def test_raw_entries_are_not_deduplicated(
    dedup_broker: EmbeddedBroker, dclient: pulsar.Client, topic: str
) -> None:
    """PIP-96 entries appended through the broker bypass producers and deduplication."""
    assert dedup_broker.service is not None
    for _ in range(2):
        append_raw_entry_blocking(dedup_broker.service, topic, b"raw", sequence_id=7)
    producer = dclient.create_producer(topic, producer_name="p")
    producer.send(b"m0")
    producer.send(b"m1")
    assert is_duplicate_receipt(producer.send(b"m1-again", sequence_id=1))
    assert stored(dclient, topic) == [b"raw", b"raw", b"m0", b"m1"]


async def test_magnetar_client_and_request_reply(dedup_broker: EmbeddedBroker) -> None:
    topic = f"persistent://public/default/rr-{uuid.uuid4().hex[:10]}"
    async with Client(dedup_broker.service_url, operation_timeout=10.0) as client:
        producer = await client.create_producer(topic, producer_name="m")
        for i in range(3):
            await producer.send(f"m{i}".encode())
        await producer.close()
        producer = await client.create_producer(topic, producer_name="m")
        assert producer.last_sequence_id == 2
        consumer = await client.subscribe(topic, "server", subscription_type="shared",
                                          initial_position="latest")

        async def serve() -> None:
            async for request in consumer.requests():
                await request.reply(b"re:" + request.value)

        server = asyncio.ensure_future(serve())
        try:
            reply = await producer.request(b"q", timeout=10)
            assert reply.value == b"re:q"
        finally:
            server.cancel()
        await producer.close()  # the request had sequence id 3
        producer = await client.create_producer(topic, producer_name="m")
        assert producer.last_sequence_id == 3


# ------------------------------------------------------------ the exact answers


def send_frame(producer_id: int, name: str, seq: int, payload: bytes, **fields: object) -> bytes:
    send = BaseCommand(
        type=BaseCommand.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=seq)
    )
    md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1, **fields)  # type: ignore[arg-type]
    return encode_payload_command(send, md.SerializeToString(), payload)


def answers(peer: RawPeer, count: int) -> list[Frame]:
    """The next ``count`` SEND_RECEIPT / SEND_ERROR frames, in their order."""
    out = []
    while len(out) < count:
        frame = peer.next_frame()
        if frame.command.type in (BaseCommand.SEND_RECEIPT, BaseCommand.SEND_ERROR):
            out.append(frame)
        elif frame.command.type == BaseCommand.PING:
            peer.send(BaseCommand(type=BaseCommand.PONG, pong=pb.CommandPong()))
    return out


def attach(peer: RawPeer, topic: str, name: str, producer_id: int = 1) -> int:
    """A producer named ``name``; its PRODUCER_SUCCESS's last_sequence_id."""
    peer.send(
        BaseCommand(
            type=BaseCommand.PRODUCER,
            producer=pb.CommandProducer(
                topic=topic, producer_id=producer_id, request_id=producer_id, producer_name=name
            ),
        )
    )
    success = peer.expect(BaseCommand.PRODUCER_SUCCESS).command.producer_success
    return success.last_sequence_id


def test_a_copy_sent_while_the_first_is_written_is_refused_then_answered(
    dedup_broker: EmbeddedBroker, topic: str
) -> None:
    peer = RawPeer(dedup_broker.port)
    try:
        assert attach(peer, topic, "raw") == -1
        # Both in one write: the second arrives before the first is durable.
        peer.sock.sendall(send_frame(1, "raw", 0, b"a") + send_frame(1, "raw", 0, b"a"))
        frames = answers(peer, 2)
        errors = [f.command.send_error for f in frames if f.command.HasField("send_error")]
        receipts = [f.command.send_receipt for f in frames if f.command.HasField("send_receipt")]
        assert len(errors) == 1 and len(receipts) == 1
        assert errors[0].error == pb.PersistenceError and errors[0].sequence_id == 0
        assert "Cannot determine whether the message is a duplicate" in errors[0].message
        assert receipts[0].message_id.entryId != UINT64_MINUS_ONE
        # Sent again once the first is stored: a receipt for -1:-1, nothing stored.
        peer.sock.sendall(send_frame(1, "raw", 0, b"a"))
        (again,) = answers(peer, 1)
        receipt = again.command.send_receipt
        assert receipt.sequence_id == 0 and receipt.producer_id == 1
        assert receipt.message_id.ledgerId == UINT64_MINUS_ONE
        assert receipt.message_id.entryId == UINT64_MINUS_ONE
    finally:
        peer.close()


def test_only_the_last_chunk_of_a_resent_message_is_deduplicated(
    dedup_broker: EmbeddedBroker, dclient: pulsar.Client, topic: str
) -> None:
    peer = RawPeer(dedup_broker.port)
    try:
        attach(peer, topic, "chunker")

        def chunks() -> bytes:
            return b"".join(
                send_frame(1, "chunker", 5, b"c%d" % i, chunk_id=i, num_chunks_from_msg=3,
                           uuid="chunker-5", total_chunk_msg_size=6)
                for i in range(3)
            )

        peer.sock.sendall(chunks())
        assert all(f.command.send_receipt.message_id.entryId < UINT64_MINUS_ONE
                   for f in answers(peer, 3))
        # As Pulsar: the chunks before the last are stored again (receipted once
        # durable); the last is answered at once as a duplicate.
        peer.sock.sendall(chunks())
        resent = [f.command.send_receipt.message_id.entryId for f in answers(peer, 3)]
        assert resent[0] == UINT64_MINUS_ONE
        assert UINT64_MINUS_ONE not in resent[1:]
    finally:
        peer.close()
    peer = RawPeer(dedup_broker.port)
    try:
        assert attach(peer, topic, "chunker") == 5
    finally:
        peer.close()


# ------------------------------------------------------------ restarts


def test_last_sequence_id_survives_a_restart(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, broker_deduplication_enabled=True)
    broker.start()
    try:
        client = client_factory(broker.service_url)
        producer = client.create_producer("restart", producer_name="p")
        for i in range(7):
            producer.send(f"m{i}".encode())
        client.close()
        broker.restart()
        client = client_factory(broker.service_url)
        producer = client.create_producer("restart", producer_name="p")
        assert producer.last_sequence_id() == 6
        assert is_duplicate_receipt(producer.send(b"m6", sequence_id=6))
    finally:
        broker.close()


def test_kill_9_mid_run_then_resend_everything_stores_each_message_once(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """The producer's application resends every message after the broker was killed in
    the middle of a publish run: each ends up stored exactly once, in order. (Message i
    has sequence id i + 1: the official client cannot send an explicit 0.)"""
    topic = "persistent://public/default/exactly-once"
    total = 3000
    broker = EmbeddedBroker(
        data_dir=tmp_path,
        mode="subprocess",
        broker_deduplication_enabled=True,
        broker_deduplication_entries_interval=64,  # snapshots during the run, a tail after
    )
    broker.start()
    try:
        client = client_factory(broker.service_url, operation_timeout_seconds=5)
        producer = client.create_producer(
            topic, producer_name="app", block_if_queue_full=True, max_pending_messages=200,
            send_timeout_millis=3000,
        )
        acked: list[int] = []
        lock = threading.Lock()
        killed = threading.Event()

        def on_sent(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def callback(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    with lock:
                        acked.append(index)
                        if len(acked) == 500:
                            killed.set()

            return callback

        def publish() -> None:
            for i in range(total):
                if killed.is_set():
                    break
                try:
                    producer.send_async(f"m{i:05d}".encode(), on_sent(i), sequence_id=i + 1)
                except Exception:
                    break

        publisher = threading.Thread(target=publish)
        publisher.start()
        assert killed.wait(60), "the publish run never reached 500 receipts"
        broker.kill()
        publisher.join(30)
        with contextlib.suppress(pulsar.PulsarException):  # NotConnected: broker gone
            client.close()
        with lock:
            highest_acked = max(acked)

        broker.start()
        client = client_factory(broker.service_url)
        producer = client.create_producer(topic, producer_name="app", max_pending_messages=200,
                                          block_if_queue_full=True)
        last = producer.last_sequence_id()
        assert last >= highest_acked + 1  # nothing receipted is forgotten
        results: dict[int, tuple[pulsar.Result, pulsar.MessageId]] = {}
        done = threading.Event()

        def resent(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def callback(result: pulsar.Result, mid: pulsar.MessageId) -> None:
                results[index] = (result, mid)
                if len(results) == total:
                    done.set()

            return callback

        for i in range(total):
            producer.send_async(f"m{i:05d}".encode(), resent(i), sequence_id=i + 1)
        producer.flush()
        assert done.wait(60)
        assert {result for result, _ in results.values()} == {pulsar.Result.Ok}
        duplicates = sorted(i for i, (_, mid) in results.items() if is_duplicate_receipt(mid))
        assert duplicates == list(range(last))  # exactly what was stored before
        consumer = client.subscribe(
            topic, "check", initial_position=pulsar.InitialPosition.Earliest
        )
        values = [msg.data() for msg in drain(consumer, idle_ms=2000)]
        assert values == [f"m{i:05d}".encode() for i in range(total)]
    finally:
        broker.close()


def test_retention_does_not_trim_what_a_replay_needs(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """Consumed segments are removed; a producer whose every entry went with them is
    still known after a restart (a snapshot is taken before the trim)."""
    broker = EmbeddedBroker(
        data_dir=tmp_path,
        broker_deduplication_enabled=True,
        broker_deduplication_entries_interval=1_000_000,  # no snapshot but the trim's
        broker_deduplication_snapshot_interval_seconds=0,
        segment_max_bytes=4096,
        retention_check_interval=0.1,
        cursor_flush_interval=0.05,
    )
    broker.start()
    try:
        client = client_factory(broker.service_url)
        topic = "persistent://public/default/trimmed"
        consumer = client.subscribe(topic, "s", initial_position=pulsar.InitialPosition.Earliest)
        early = client.create_producer(topic, producer_name="early")
        for _ in range(30):
            early.send(b"e" * 200)
        early.close()
        late = client.create_producer(topic, producer_name="late")
        for _ in range(60):
            late.send(b"l" * 200)
        assert len(drain(consumer)) == 90
        assert broker.service is not None
        ledger = broker.service.topics[topic].ledger
        deadline = time.monotonic() + 30
        while ledger.first_entry_id <= 30 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ledger.first_entry_id > 30, "retention never removed the early entries"
        client.close()
        broker.restart()
        client = client_factory(broker.service_url)
        early = client.create_producer(topic, producer_name="early")
        assert early.last_sequence_id() == 29
        assert is_duplicate_receipt(early.send(b"e", sequence_id=29))
    finally:
        broker.close()


async def test_magnetar_client_reports_a_dropped_duplicate_as_minus_one(
    dedup_broker: EmbeddedBroker,
) -> None:
    topic = f"persistent://public/default/dup-id-{uuid.uuid4().hex[:10]}"
    async with Client(dedup_broker.service_url, operation_timeout=10.0) as client:
        producer = await client.create_producer(topic, producer_name="d")
        first = await producer.send(b"a", sequence_id=5)
        duplicate = await producer.send(b"a again", sequence_id=5)
        assert (duplicate.ledger_id, duplicate.entry_id) == (-1, -1)
        after = await producer.send(b"b", sequence_id=6)
        assert (after.ledger_id, after.entry_id) > (first.ledger_id, first.entry_id)
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        got = [(await consumer.receive()).value for _ in range(2)]
        assert got == [b"a", b"b"]
