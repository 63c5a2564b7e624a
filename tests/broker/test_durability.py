"""kill -9 during a publish run loses nothing that was acknowledged (real subprocess)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar

from magnetar.testing import EmbeddedBroker

from .helpers import assert_nothing_more

TOPIC = "persistent://public/default/durable"


def test_sigkill_during_publish_keeps_every_acknowledged_message(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    broker = EmbeddedBroker(data_dir=tmp_path, mode="subprocess", cursor_flush_interval=0.1)
    broker.start()
    try:
        client = client_factory(broker.service_url, operation_timeout_seconds=5)
        # A subscription that has consumed and acknowledged the first 50 messages.
        consumer = client.subscribe(
            TOPIC, "durable-sub", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(
            TOPIC, block_if_queue_full=True, max_pending_messages=500, send_timeout_millis=3000
        )
        for i in range(50):
            producer.send(f"msg-{i:06d}".encode())
        for _ in range(50):
            consumer.acknowledge(consumer.receive(5000))
        time.sleep(0.5)  # past a cursor flush

        acked: list[int] = []
        lock = threading.Lock()
        killed = threading.Event()

        def on_sent(index: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
            def callback(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
                if result == pulsar.Result.Ok:
                    with lock:
                        acked.append(index)
                        if len(acked) == 2000:
                            killed.set()

            return callback

        def publish() -> None:
            for i in range(50, 100_000):
                if killed.is_set():
                    break
                try:
                    producer.send_async(f"msg-{i:06d}".encode(), on_sent(i))
                except Exception:
                    break

        publisher = threading.Thread(target=publish)
        publisher.start()
        assert killed.wait(60), "the publish run never reached 2000 receipts"
        broker.kill()  # SIGKILL mid-run: receipts for later messages never arrive
        publisher.join(30)
        # The old client would otherwise reconnect and hold the subscription; with its
        # broker gone, the official client's close may itself report NotConnected.
        with contextlib.suppress(pulsar.PulsarException):
            client.close()
        with lock:
            acknowledged = sorted(acked)
        assert len(acknowledged) >= 2000

        broker.start()  # same port, same data directory
        verifier = client_factory(broker.service_url)
        reader = verifier.create_reader(TOPIC, pulsar.MessageId.earliest)
        stored: list[int] = []
        while True:
            try:
                msg = reader.read_next(2000)
            except pulsar.Timeout:
                break
            stored.append(int(msg.data().decode().split("-")[1]))
        first_seen: dict[int, int] = {}
        for position, value in enumerate(stored):
            first_seen.setdefault(value, position)
        missing = [i for i in acknowledged if i not in first_seen]
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:5]}"
        positions = [first_seen[i] for i in acknowledged]
        assert positions == sorted(positions), "acknowledged messages out of order"
        assert stored[:50] == list(range(50))

        # The subscription resumes after what it acknowledged before the crash.
        resumed = verifier.subscribe(TOPIC, "durable-sub")
        first = int(resumed.receive(5000).data().decode().split("-")[1])
        assert first == 50
    finally:
        broker.close()


def test_subscription_acked_past_a_lost_tail_is_reset(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """Consumers may see an entry before its fsync; if the machine then loses the
    unsynced tail, the subscription must not treat the reused ids as acknowledged."""
    with EmbeddedBroker(data_dir=tmp_path, cursor_flush_interval=0.05) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe("tail", "sub")
        producer = client.create_producer("tail")
        for i in range(5):
            producer.send(f"old-{i}".encode())
        for _ in range(5):
            consumer.acknowledge(consumer.receive(5000))
        time.sleep(0.5)
        client.close()
    segment = next((tmp_path / "persistent" / "public" / "default" / "tail").rglob("*.seg"))
    data = segment.read_bytes()
    offset = 0
    for _ in range(2):  # keep two records: [len u32][crc u32][data]
        offset += 8 + int.from_bytes(data[offset : offset + 4], "big")
    segment.write_bytes(data[:offset])  # as if the machine lost the last three

    with EmbeddedBroker(data_dir=tmp_path) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe("tail", "sub")
        topic = broker.service.topics["persistent://public/default/tail"]  # type: ignore[union-attr]
        assert topic.ledger.next_entry_id == 2
        assert topic.subscriptions["sub"].cursor.mark_delete == 1  # not 4
        client.create_producer("tail").send(b"new")
        assert consumer.receive(5000).data() == b"new"


def test_consumers_only_see_durable_entries_when_configured(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, dispatch_before_sync=False) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe("synced-only", "sub")
        producer = client.create_producer("synced-only")
        for i in range(20):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = [consumer.receive(5000).data() for _ in range(20)]
        assert got == [f"m{i}".encode() for i in range(20)]
        topic = broker.service.topics["persistent://public/default/synced-only"]  # type: ignore[union-attr]
        assert topic.last_visible_entry_id == topic.ledger.last_confirmed_entry_id


def test_ids_are_never_handed_out_twice_after_a_lost_tail(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """A power loss drops what was not fsynced; consumers may have seen (and acked)
    those entries already. The positions are written again after the restart, but
    under a new ledger id: no message id repeats, and an ack of a lost message's id
    (a consumer that saw it before the crash) does not acknowledge the new one."""
    with EmbeddedBroker(data_dir=tmp_path, cursor_flush_interval=0.05) as broker:
        client = client_factory(broker.service_url)
        consumer = client.subscribe("ids", "sub")
        producer = client.create_producer("ids")
        for i in range(5):
            producer.send(f"old-{i}".encode())
        seen = [consumer.receive(5000) for _ in range(5)]
        for msg in seen[:2]:
            consumer.acknowledge(msg)
        client.close()
    old_ids = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in seen}
    segment = next((tmp_path / "persistent" / "public" / "default" / "ids").rglob("*.seg"))
    data = segment.read_bytes()
    offset = 0
    for _ in range(2):  # keep two records: [len u32][crc u32][data]
        offset += 8 + int.from_bytes(data[offset : offset + 4], "big")
    segment.write_bytes(data[:offset])  # the machine lost old-2..old-4

    for restart in range(2):  # a second restart must not disturb the ids either
        with EmbeddedBroker(data_dir=tmp_path) as broker:
            client = client_factory(broker.service_url)
            consumer = client.subscribe("ids", "sub")
            if restart == 0:
                producer = client.create_producer("ids")
                for i in range(2, 5):
                    producer.send(f"new-{i}".encode())
                # The consumer that saw old-2..old-4 acks them late: nothing new is hit.
                for msg in seen[2:]:
                    consumer.acknowledge(msg.message_id())
                consumer.acknowledge_cumulative(seen[4].message_id())
            got = [consumer.receive(5000) for _ in range(3)]
            assert [m.data() for m in got] == [b"new-2", b"new-3", b"new-4"]
            new_ids = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}
            assert not new_ids & old_ids
            assert_nothing_more(consumer)
            client.close()


def test_new_topics_survive_sigkill_whether_or_not_anything_was_acknowledged(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """A new topic's directory fsyncs wait for its first sync (storage/owed_syncs.py):
    a message acknowledged on a topic created just before is there after kill -9,
    and a topic killed before its first sync (no metadata file yet) loads again."""
    broker = EmbeddedBroker(data_dir=tmp_path, mode="subprocess")
    broker.start()
    try:
        client = client_factory(broker.service_url, operation_timeout_seconds=5)
        written = client.create_producer("new-written", send_timeout_millis=3000)
        written.send(b"acknowledged")
        client.create_producer("new-empty", send_timeout_millis=3000)
        broker.kill()
        with contextlib.suppress(pulsar.PulsarException):
            client.close()

        broker.start()  # same port, same data directory
        verifier = client_factory(broker.service_url)
        reader = verifier.create_reader("new-written", pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"acknowledged"
        consumer = verifier.subscribe("new-empty", "sub")
        verifier.create_producer("new-empty").send(b"after")
        assert consumer.receive(5000).data() == b"after"
        assert_nothing_more(consumer)
    finally:
        broker.close()
