"""``magnetar produce``, ``consume`` and ``request`` as subprocesses against a real
broker; the official client checks what the CLI wrote, and writes what it reads."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.client import Client
from magnetar.testing import EmbeddedBroker

from .helpers import magnetar


def test_produce_is_read_by_the_official_client(broker: EmbeddedBroker, client: pulsar.Client,
                                                topic: str) -> None:
    consumer = client.subscribe(topic, "check")
    done = magnetar("produce", topic, "--service-url", broker.service_url,
                    "-m", "hello", "-m", "world", "-n", "3", "-k", "key-1", "-p", "a=1",
                    "-p", "b=x=y")
    assert done.returncode == 0, done.stderr
    assert "6 messages successfully produced" in done.stdout
    got = [consumer.receive(timeout_millis=10_000) for _ in range(6)]
    assert [m.data() for m in got] == [b"hello", b"world"] * 3
    assert {m.partition_key() for m in got} == {"key-1"}
    assert got[0].properties() == {"a": "1", "b": "x=y"}


def test_produce_file_and_rate(broker: EmbeddedBroker, client: pulsar.Client, topic: str,
                               tmp_path: Path) -> None:
    blob = bytes(range(256)) * 4
    (tmp_path / "blob.bin").write_bytes(blob)
    consumer = client.subscribe(topic, "check")
    done = magnetar("produce", topic, "--service-url", broker.service_url,
                    "-f", str(tmp_path / "blob.bin"), "-n", "5", "--rate", "100")
    assert done.returncode == 0, done.stderr
    for _ in range(5):
        assert consumer.receive(timeout_millis=10_000).data() == blob


def test_consume_prints_what_the_official_client_sent(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic)
    for i in range(4):
        producer.send(f"m{i}".encode(), partition_key=f"k{i}", properties={"i": str(i)})
    done = magnetar("consume", topic, "--service-url", broker.service_url, "-s", "cli",
                    "-t", "shared", "-n", "4", "--earliest", "--timeout", "30")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [m["payload"] for m in lines] == ["m0", "m1", "m2", "m3"]
    assert [m["key"] for m in lines] == ["k0", "k1", "k2", "k3"]
    assert lines[2]["properties"] == {"i": "2"}
    assert "4 messages successfully consumed" in done.stderr
    # They were acknowledged: a second run finds nothing and says so (exit 1).
    again = magnetar("consume", topic, "--service-url", broker.service_url, "-s", "cli",
                     "-t", "shared", "-n", "1", "--timeout", "1")
    assert again.returncode == 1
    assert "0 of 1 received" in again.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["produce", "t"],  # no message
        ["produce", "t", "-m", "x", "-p", "novalue"],
        ["produce", "t", "-f", "/nonexistent/file"],
        ["consume", "t"],  # no subscription
        ["consume", "t", "-s", "s", "-t", "round_robin"],
        ["request", "t"],  # no message
    ],
)
def test_usage_errors_are_exit_2(args: list[str]) -> None:
    assert magnetar(*args).returncode == 2


def test_unreachable_broker_is_exit_1() -> None:
    done = magnetar("produce", "t", "-m", "x", "--service-url", "pulsar://127.0.0.1:9")
    assert done.returncode == 1
    assert done.stderr.strip()


@pytest.fixture
def responder(broker: EmbeddedBroker, topic: str) -> Iterator[None]:
    """A magnetar consumer answering each request with its text upper-cased."""
    ready, stop = threading.Event(), threading.Event()

    async def serve() -> None:
        async with Client(broker.service_url) as client:
            consumer = await client.subscribe(topic, "responder", subscription_type="shared")
            ready.set()
            while not stop.is_set():
                try:
                    message = await consumer.receive(timeout=0.2)
                except TimeoutError:
                    continue
                await consumer.acknowledge(message, reply=message.value.upper())

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(30)
    yield
    stop.set()
    thread.join(30)


def test_request_prints_the_reply(broker: EmbeddedBroker, topic: str, responder: None) -> None:
    done = magnetar("request", topic, "ping", "--timeout", "30",
                    "--service-url", broker.service_url)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "PING\n"


def test_request_without_responder_times_out(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("request", topic, "ping", "--timeout", "1",
                    "--service-url", broker.service_url)
    assert done.returncode == 1
    assert "no reply within 1.0 s" in done.stderr


@pytest.mark.parametrize("command", ["produce", "consume", "request"])
def test_help(command: str) -> None:
    done = magnetar(command, "--help")
    assert done.returncode == 0
    assert f"usage: magnetar {command}" in done.stdout
