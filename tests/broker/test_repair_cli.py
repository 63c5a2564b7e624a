"""Corruption in acknowledged data: the topic is refused with a clear error, and
`magnetar repair` cuts the log before the bad record on the operator's word."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pulsar

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import RECEIVE_MS
from .rawclient import RawPeer

TOPIC = "persistent://public/default/rotten"


def magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "magnetar", *args], capture_output=True, text=True, timeout=60
    )


def test_a_corrupt_topic_is_refused_until_repaired(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        producer = client_factory(broker.service_url).create_producer(TOPIC)
        for i in range(3):
            producer.send(f"m{i}".encode())
    segment = next((tmp_path / "persistent" / "public" / "default" / "rotten").rglob("*.seg"))
    data = bytearray(segment.read_bytes())
    second = 8 + int.from_bytes(data[0:4], "big")  # [len u32][crc u32][record]
    data[second + 8 + 20] ^= 0xFF  # bit rot inside the second, fsynced record
    segment.write_bytes(bytes(data))

    with EmbeddedBroker(data_dir=tmp_path) as broker:
        peer = RawPeer(broker.port)
        peer.send(
            BaseCommand(
                type=BaseCommand.PRODUCER,
                producer=pb.CommandProducer(topic=TOPIC, producer_id=1, request_id=1),
            )
        )
        error = peer.expect(BaseCommand.ERROR).command.error
        assert error.error == pb.PersistenceError
        assert "corrupt" in error.message and "magnetar repair" in error.message
        peer.close()

    dry = magnetar("repair", "--data-dir", str(tmp_path), "rotten", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would cut" in dry.stdout and f"offset {second}" in dry.stdout
    assert segment.read_bytes() == bytes(data)  # a dry run changes nothing
    done = magnetar("repair", "--data-dir", str(tmp_path), "rotten")
    assert done.returncode == 0, done.stderr
    assert "cut" in done.stdout and "from entry 1" in done.stdout

    with EmbeddedBroker(data_dir=tmp_path) as broker:
        client = client_factory(broker.service_url)
        client.create_producer(TOPIC).send(b"after repair")
        consumer = client.subscribe(TOPIC, "s", initial_position=pulsar.InitialPosition.Earliest)
        got = [consumer.receive(RECEIVE_MS).data() for _ in range(2)]
        assert got == [b"m0", b"after repair"]


def test_repair_of_a_healthy_topic_cuts_nothing(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        client_factory(broker.service_url).create_producer("fine").send(b"x")
    result = magnetar("repair", "--data-dir", str(tmp_path), "fine")
    assert result.returncode == 0 and "nothing to cut" in result.stdout
    missing = magnetar("repair", "--data-dir", str(tmp_path), "no-such-topic")
    assert missing.returncode == 2 and "cannot repair" in missing.stderr


def test_repair_refuses_the_data_dir_of_a_running_broker(tmp_path: Path) -> None:
    with EmbeddedBroker(mode="subprocess", data_dir=tmp_path):
        result = magnetar("repair", "--dry-run", "--data-dir", str(tmp_path), "fine")
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "in use by another broker" in lines[0], result.stderr
    after = magnetar("repair", "--data-dir", str(tmp_path), "fine")  # the broker is gone
    assert "in use" not in after.stderr, after.stderr
