"""Storage errors under a live topic (ENOSPC, EACCES, EMFILE injected into the write
path, or a topic whose files cannot be opened): producers get an error naming the
cause, the topic serves again once the cause is gone without a restart, and nothing
acknowledged is lost. Also: idle topics are unloaded and load again on use, and a
consumer's clean close persists its acks at once."""

from __future__ import annotations

import contextlib
import errno
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest
from official_client import quiet_logger

import magnetar.storage.write_pipeline as write_pipeline
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS
from .rawclient import RawPeer

QUIET = quiet_logger()


class InjectedWriteError:
    """Makes the ledger's writes fail with ``code`` until ``heal`` is called."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
        self.code = code
        self.real = write_pipeline.pwritev_all
        self.failures = 0
        self.healed = threading.Event()
        monkeypatch.setattr(write_pipeline, "pwritev_all", self)

    def __call__(self, *args: object, **kwargs: object) -> object:
        if not self.healed.is_set():
            self.failures += 1
            raise OSError(self.code, errno.errorcode[self.code] + " (injected)")
        return self.real(*args, **kwargs)  # type: ignore[arg-type]

    def heal(self) -> None:
        self.healed.set()


@pytest.mark.parametrize(
    "code", [errno.ENOSPC, errno.EACCES, errno.EMFILE], ids=errno.errorcode.get
)
def test_a_write_error_recovers_when_its_cause_is_gone(
    tmp_path: Path,
    client_factory: Callable[..., pulsar.Client],
    monkeypatch: pytest.MonkeyPatch,
    code: int,
) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        client = client_factory(broker.service_url)
        producer = client.create_producer("disk", send_timeout_millis=60_000)
        producer.send(b"before")
        injected = InjectedWriteError(monkeypatch, code)
        results: list[object] = []
        done = threading.Event()

        def callback(result: object, msg_id: object) -> None:
            results.append(result)
            done.set()

        producer.send_async(b"during", callback)
        deadline = time.monotonic() + 30
        while injected.failures < 2:  # it failed, the topic was reloaded, it failed again
            assert time.monotonic() < deadline, "the write was not retried"
            time.sleep(0.05)
        assert not done.is_set()  # not acknowledged while the disk refuses
        injected.heal()
        assert done.wait(30), "the send was not completed after the cause was gone"
        assert results == [pulsar.Result.Ok]
        producer.send(b"after")  # the topic serves again without a restart
        consumer = client.subscribe(
            "disk", "check", initial_position=pulsar.InitialPosition.Earliest
        )
        got = [consumer.receive(RECEIVE_MS).data() for _ in range(3)]
        assert got == [b"before", b"during", b"after"]


def test_a_topic_that_cannot_load_names_the_cause(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, topic_idle_unload_seconds=0.2) as broker:
        client = client_factory(broker.service_url)
        client.create_producer("blocked").send(b"kept")
        client.close()
        assert broker.service is not None
        deadline = time.monotonic() + 30
        while "persistent://public/default/blocked" in broker.service.topics:
            assert time.monotonic() < deadline, "the idle topic was not unloaded"
            time.sleep(0.05)
        # Its metadata file cannot be rewritten (as with a read-only directory,
        # which root would ignore): a directory stands where the temporary file goes.
        topic_dir = next(tmp_path.glob("persistent/public/default/blocked"))
        metadata = next(p for p in topic_dir.iterdir() if p.name.endswith(".json"))
        blocker = metadata.with_name(metadata.name + ".tmp")
        blocker.mkdir()
        peer = RawPeer(broker.port)
        peer.send(
            BaseCommand(
                type=BaseCommand.PRODUCER,
                producer=pb.CommandProducer(
                    topic="persistent://public/default/blocked", producer_id=1, request_id=1
                ),
            )
        )
        error = peer.expect(BaseCommand.ERROR).command.error
        assert error.error == pb.PersistenceError
        assert "cannot load topic" in error.message and "EISDIR" in error.message
        assert str(tmp_path) not in error.message  # the cause, not the broker's paths
        peer.close()
        blocker.rmdir()
        client = client_factory(broker.service_url)
        client.create_producer("blocked").send(b"again")
        consumer = client.subscribe(
            "blocked", "s", initial_position=pulsar.InitialPosition.Earliest
        )
        assert [consumer.receive(RECEIVE_MS).data() for _ in range(2)] == [b"kept", b"again"]


def test_an_idle_topic_is_unloaded_and_loads_again_on_use(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, topic_idle_unload_seconds=0.2) as broker:
        assert broker.service is not None
        client = client_factory(broker.service_url)
        consumer = client.subscribe("idle", "s")
        producer = client.create_producer("idle")
        producer.send(b"one")
        consumer.acknowledge(consumer.receive(RECEIVE_MS))
        time.sleep(0.6)  # clients attached: it stays loaded
        assert "persistent://public/default/idle" in broker.service.topics
        producer.close()
        consumer.close()
        deadline = time.monotonic() + 30
        while "persistent://public/default/idle" in broker.service.topics:
            assert time.monotonic() < deadline, "the idle topic was not unloaded"
            time.sleep(0.05)
        producer = client.create_producer("idle")
        producer.send(b"two")
        consumer = client.subscribe("idle", "s")
        assert consumer.receive(RECEIVE_MS).data() == b"two"  # "one" stayed acknowledged


def test_a_clean_consumer_close_persists_its_acks_at_once(tmp_path: Path) -> None:
    with EmbeddedBroker(
        data_dir=tmp_path, mode="subprocess", cursor_flush_interval=3600.0
    ) as broker:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        consumer = client.subscribe("acks", "s")
        producer = client.create_producer("acks")
        for i in range(3):
            producer.send(f"m{i}".encode())
        for _ in range(3):
            consumer.acknowledge(consumer.receive(RECEIVE_MS))
        consumer.close()
        broker.kill()  # right after the close, before any periodic cursor flush
        with contextlib.suppress(pulsar.PulsarException):  # NotConnected: broker gone
            client.close()
        broker.start()
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        consumer = client.subscribe("acks", "s")
        client.create_producer("acks").send(b"m3")
        assert consumer.receive(RECEIVE_MS).data() == b"m3"
        client.close()


def test_out_of_file_descriptors_unused_topics_give_theirs_back(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """A broker process limited to 256 descriptors serves 200 topics touched one after
    another (each loaded topic holds a few files): when it runs out, the topics nobody
    uses are unloaded and the command is answered once its client retries."""
    import resource
    import subprocess
    import sys

    from magnetar.testing.embedded import free_port, wait_until_listening

    port = free_port()
    log_path = tmp_path / "broker.log"

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    command = [sys.executable, "-m", "magnetar", "serve", "--port", str(port)]
    command += ["--admin-port", "off", "--data-dir", str(tmp_path / "data")]
    with log_path.open("w") as log_file:
        broker = subprocess.Popen(command, preexec_fn=limit_files, stderr=log_file)
    try:
        wait_until_listening(port, broker, 30)
        client = client_factory(f"pulsar://127.0.0.1:{port}", operation_timeout_seconds=30)
        for i in range(200):
            producer = client.create_producer(f"fd-{i}")
            producer.send(f"m{i}".encode())
            producer.close()
        reader = client.subscribe("fd-0", "s", initial_position=pulsar.InitialPosition.Earliest)
        assert reader.receive(RECEIVE_MS).data() == b"m0"  # unloaded, loaded again, intact
    finally:
        broker.terminate()
        broker.wait(30)
        log = log_path.read_text()
        print(log[-5000:])
    assert "unused topics: out of file descriptors" in log
