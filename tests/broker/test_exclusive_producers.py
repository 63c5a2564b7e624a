"""PIP-68 access modes with the official client: exclusivity, waiting, fencing, epochs."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer

Mode = pulsar.ProducerAccessMode
ROOT = Path(__file__).resolve().parents[2]


def epoch_of(broker: EmbeddedBroker, topic: str) -> int:
    assert broker.service is not None
    return broker.service.topics[topic].metadata.topic_epoch


def read_all(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(5000).data())
    reader.close()
    return out


def test_shared_producer_is_refused_while_an_exclusive_one_holds_the_topic(
    client: pulsar.Client, topic: str
) -> None:
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    holder.close()
    client.create_producer(topic).send(b"shared again")


def test_exclusive_is_fenced_at_once_when_any_producer_is_connected(
    client: pulsar.Client, topic: str
) -> None:
    # As Apache Pulsar's AbstractTopic: an Exclusive producer that meets shared
    # producers or an exclusive one is answered ProducerFenced, not ProducerBusy.
    shared = client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    shared.close()
    exclusive = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    exclusive.send(b"ok")


def test_refusals_name_the_reason_as_pulsar_does(broker: EmbeddedBroker, topic: str) -> None:
    peer = RawPeer(broker.port)
    try:
        peer.producer(topic, producer_id=1, name="shared-one")

        def attempt(producer_id: int, mode: int) -> pb.CommandError:
            cmd = pb.CommandProducer(
                topic=topic,
                producer_id=producer_id,
                request_id=100 + producer_id,
                producer_access_mode=mode,  # type: ignore[arg-type]
            )
            peer.send(BaseCommand(type=BaseCommand.PRODUCER, producer=cmd))
            return peer.expect(BaseCommand.ERROR).command.error

        error = attempt(2, pb.Exclusive)
        assert (error.error, error.message) == (
            pb.ProducerFenced,
            "Topic has existing shared producers",
        )
        peer.send(
            BaseCommand(
                type=BaseCommand.CLOSE_PRODUCER,
                close_producer=pb.CommandCloseProducer(producer_id=1, request_id=7),
            )
        )
        peer.expect(BaseCommand.SUCCESS)
        cmd = pb.CommandProducer(
            topic=topic,
            producer_id=3,
            request_id=103,
            producer_name="the-leader",
            producer_access_mode=pb.Exclusive,
        )
        peer.send(BaseCommand(type=BaseCommand.PRODUCER, producer=cmd))
        peer.expect(BaseCommand.PRODUCER_SUCCESS)
        error = attempt(4, pb.Exclusive)
        assert (error.error, error.message) == (
            pb.ProducerFenced,
            "Topic has an existing exclusive producer: the-leader",
        )
        error = attempt(5, pb.Shared)
        assert (error.error, error.message) == (
            pb.ProducerBusy,
            "Topic has an existing exclusive producer: the-leader",
        )
    finally:
        peer.close()


def test_wait_for_exclusive_is_promoted_when_the_last_shared_producer_leaves(
    client: pulsar.Client,
    client_factory: Callable[..., pulsar.Client],
    broker: EmbeddedBroker,
    topic: str,
) -> None:
    first = client.create_producer(topic)
    second = client.create_producer(topic)
    waiting_client = client_factory(broker.service_url)
    created: queue.Queue[pulsar.Producer] = queue.Queue()
    thread = threading.Thread(
        target=lambda: created.put(
            waiting_client.create_producer(
                topic, producer_name="waiter", access_mode=Mode.WaitForExclusive
            )
        )
    )
    thread.start()
    assert broker.service is not None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        t = broker.service.topics.get(topic)
        if t is not None and t.access.waiters:
            break
        time.sleep(0.02)
    # While an exclusive producer waits, a new shared one is refused (as in Pulsar),
    # and a later Exclusive one does not overtake it.
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    assert created.empty()
    first.close()
    assert created.empty(), "one shared producer is still attached"
    second.close()
    waiter = created.get(timeout=10)
    thread.join(10)
    waiter.send(b"from the waiter")
    assert read_all(client, topic) == [b"from the waiter"]


def test_a_half_open_exclusive_holder_does_not_block_its_own_reconnect(
    client_factory: Callable[..., pulsar.Client], tmp_path: Path, topic: str
) -> None:
    # The old connection never answers again (its peer vanished without a FIN):
    # the broker pings it, and when no PONG comes the newcomer takes over at once
    # instead of after the keepalive period (here an hour).
    with EmbeddedBroker(
        data_dir=tmp_path, keepalive_interval=3600.0, connection_liveness_check_timeout=0.5
    ) as b:
        silent = RawPeer(b.port)
        cmd = pb.CommandProducer(
            topic=topic,
            producer_id=1,
            request_id=1,
            producer_name="leader",
            producer_access_mode=pb.Exclusive,
        )
        silent.send(BaseCommand(type=BaseCommand.PRODUCER, producer=cmd))
        silent.expect(BaseCommand.PRODUCER_SUCCESS)
        client = client_factory(b.service_url)
        producer = client.create_producer(
            topic, producer_name="leader", access_mode=Mode.Exclusive
        )
        producer.send(b"after the takeover")
        assert read_all(client, topic) == [b"after the takeover"]
        # A holder that answers its ping keeps the name.
        lively = client_factory(b.service_url)
        with pytest.raises(pulsar.ProducerBusy):
            lively.create_producer(topic, producer_name="leader", access_mode=Mode.Exclusive)
        silent.close()


def test_wait_for_exclusive_blocks_until_the_holder_closes(
    client: pulsar.Client,
    client_factory: Callable[..., pulsar.Client],
    broker: EmbeddedBroker,
    topic: str,
) -> None:
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    other = client_factory(broker.service_url)
    created: dict[str, object] = {}

    def wait() -> None:
        created["producer"] = other.create_producer(topic, access_mode=Mode.WaitForExclusive)
        created["at"] = time.monotonic()

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(1.0)
    assert "producer" not in created, "WaitForExclusive must block while the topic is held"
    closed_at = time.monotonic()
    holder.close()
    thread.join(10)
    assert "producer" in created
    assert float(created["at"]) >= closed_at  # type: ignore[arg-type]
    first_epoch = 1
    assert epoch_of(broker, topic) == first_epoch + 1
    created["producer"].send(b"from the waiter")  # type: ignore[attr-defined]


def test_waiters_are_promoted_in_arrival_order(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    holder_client = client_factory(broker.service_url)
    holder = holder_client.create_producer(topic, access_mode=Mode.Exclusive)
    order: list[str] = []
    producers: dict[str, pulsar.Producer] = {}
    lock = threading.Lock()

    def contender(name: str) -> None:
        c = client_factory(broker.service_url)
        p = c.create_producer(topic, producer_name=name, access_mode=Mode.WaitForExclusive)
        with lock:
            order.append(name)
            producers[name] = p

    threads = []
    for name in ("first", "second", "third"):
        t = threading.Thread(target=contender, args=(name,))
        t.start()
        threads.append(t)
        time.sleep(0.3)  # make arrival order unambiguous
    holder.close()
    for expected in ("first", "second", "third"):
        deadline = time.monotonic() + 5
        while expected not in producers and time.monotonic() < deadline:
            time.sleep(0.01)
        assert order[-1] == expected
        producers[expected].send(expected.encode())
        producers[expected].close()
    for t in threads:
        t.join(5)
    assert read_all(holder_client, topic) == [b"first", b"second", b"third"]
    assert epoch_of(broker, topic) == 4


def test_a_waiter_whose_connection_drops_leaves_the_line(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    holder_client = client_factory(broker.service_url)
    holder = holder_client.create_producer(topic, access_mode=Mode.Exclusive)
    quitter = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "examples" / "leader_election.py"),
            "--service-url",
            broker.service_url,
            "--topic",
            topic,
            "--name",
            "quitter",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert quitter.stdout is not None
    assert "waiting" in quitter.stdout.readline()
    time.sleep(0.5)
    quitter.send_signal(signal.SIGKILL)
    quitter.wait(10)
    stayer_client = client_factory(broker.service_url)
    got: dict[str, pulsar.Producer] = {}
    t = threading.Thread(
        target=lambda: got.setdefault(
            "p", stayer_client.create_producer(topic, access_mode=Mode.WaitForExclusive)
        )
    )
    t.start()
    time.sleep(0.5)
    holder.close()
    t.join(5)
    assert "p" in got, "the live waiter must be promoted, not the dead one"
    got["p"].send(b"stayer")
    assert broker.service is not None
    assert broker.service.topics[topic].access.holder_name() != "quitter"


def test_exclusive_with_fencing_evicts_the_holder_and_the_waiters(
    client_factory: Callable[..., pulsar.Client], broker: EmbeddedBroker, topic: str
) -> None:
    old_client = client_factory(broker.service_url)
    old = old_client.create_producer(topic, access_mode=Mode.Exclusive)
    old.send(b"old-1")
    waiter_client = client_factory(broker.service_url)
    waiter_error: list[BaseException] = []

    def wait() -> None:
        try:
            waiter_client.create_producer(topic, access_mode=Mode.WaitForExclusive)
        except Exception as exc:
            waiter_error.append(exc)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.3)
    new_client = client_factory(broker.service_url)
    new = new_client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"new-1")
    t.join(5)
    assert waiter_error and isinstance(waiter_error[0], pulsar.ProducerFenced)
    time.sleep(0.3)
    with pytest.raises(pulsar.ProducerFenced):
        old.send(b"old-2")
    with pytest.raises(pulsar.ProducerFenced):
        old.send(b"old-3")
    new.send(b"new-2")
    assert read_all(new_client, topic) == [b"old-1", b"new-1", b"new-2"]
    assert epoch_of(broker, topic) == 2


def test_fencing_also_evicts_shared_producers(client: pulsar.Client, topic: str) -> None:
    shared = client.create_producer(topic)
    shared.send(b"s")
    client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing).send(b"x")
    time.sleep(0.3)
    with pytest.raises(pulsar.ProducerFenced):
        shared.send(b"late")


def test_epoch_survives_restart_and_a_reconnecting_holder_keeps_it(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    topic = "persistent://public/default/epochs"
    broker = EmbeddedBroker(data_dir=tmp_path)
    broker.start()
    try:
        client = client_factory(broker.service_url)
        for _ in range(3):
            client.create_producer(topic, access_mode=Mode.Exclusive).close()
        holder = client.create_producer(topic, access_mode=Mode.Exclusive)
        holder.send(b"before restart")
        assert epoch_of(broker, topic) == 4
        broker.restart()  # same port and data dir; the client reconnects with epoch 4
        holder.send(b"after restart")
        assert epoch_of(broker, topic) == 4, "the returning holder keeps its epoch"
        other = client_factory(broker.service_url)
        with pytest.raises(pulsar.ProducerFenced):
            other.create_producer(topic, access_mode=Mode.Exclusive)
        holder.close()
        other.create_producer(topic, access_mode=Mode.Exclusive).send(b"next leader")
        assert epoch_of(broker, topic) == 5
        assert read_all(other, topic) == [b"before restart", b"after restart", b"next leader"]
    finally:
        broker.close()


def test_stats_show_the_holder_mode_and_epoch(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic, producer_name="boss", access_mode=Mode.Exclusive).send(b"x")
    local = topic.split("/")[-1]
    with urllib.request.urlopen(
        f"{broker.admin_url}/admin/v2/persistent/public/default/{local}/stats", timeout=5
    ) as response:
        stats = json.load(response)
    assert stats["exclusiveProducer"] == "boss"
    assert stats["accessMode"] == "Exclusive"
    assert stats["topicEpoch"] == 1
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as response:
        metrics = response.read().decode()
    labels = f'cluster="standalone",namespace="public/default",topic="{topic}"'
    assert f"magnetar_topic_epoch{{{labels}}} 1.0" in metrics


def test_leader_election_with_three_contender_processes(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    names = ["alpha", "beta", "gamma"]
    procs = {
        name: subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "examples" / "leader_election.py"),
                "--service-url",
                broker.service_url,
                "--topic",
                topic,
                "--name",
                name,
                "--interval",
                "0.02",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for name in names
    }
    announcements = watch_stdout(procs)
    leaders: list[str] = []
    try:
        for _ in names:
            leader = wait_for_leader(announcements, exclude=leaders)
            leaders.append(leader)
            time.sleep(0.5)  # the leader writes for a while
            procs[leader].send_signal(signal.SIGKILL)  # crash, no goodbye
            procs[leader].wait(10)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    history = [m.decode().split(":") for m in read_all(client, topic)]
    writers = [w for w, _ in history]
    reigns = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
    assert reigns == leaders, f"history is interleaved: {reigns}"
    for name in leaders:
        seqs = [int(s) for w, s in history if w == name]
        assert seqs == list(range(len(seqs))) and seqs
    assert epoch_of(broker, topic) == 3


def watch_stdout(procs: dict[str, subprocess.Popen[str]]) -> queue.Queue[tuple[str, str]]:
    """Lines the contenders print, as (name, line), read by one thread per process."""
    lines: queue.Queue[tuple[str, str]] = queue.Queue()

    def pump(name: str, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put((name, line))

    for name, proc in procs.items():
        threading.Thread(target=pump, args=(name, proc), daemon=True).start()
    return lines


def wait_for_leader(lines: queue.Queue[tuple[str, str]], exclude: list[str]) -> str:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            name, line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        if line.startswith("LEADER") and name not in exclude:
            return name
    raise AssertionError("no contender became leader")
