"""Every CLI failure is one line and its documented exit code, as subprocesses against
a real broker: an http:// service URL (looked up over HTTP), a bad topic domain, an
admin URL at the binary port, a closed stdout (``| head -1``), failed perf sends and
Ctrl-C on ``consume -n 0``."""

from __future__ import annotations

import json
import signal

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import magnetar, popen


def test_produce_to_an_http_service_url(broker: EmbeddedBroker, client: pulsar.Client,
                                        topic: str) -> None:
    consumer = client.subscribe(topic, "check")
    done = magnetar("produce", topic, "--service-url", broker.admin_url, "-m", "over-http")
    assert done.returncode == 0, done.stderr
    assert consumer.receive(timeout_millis=10_000).data() == b"over-http"


@pytest.mark.parametrize("command", [
    ["produce", "foo://public/default/t", "-m", "x"],
    ["consume", "foo://public/default/t", "-s", "s"],
    ["perf", "produce", "foo://public/default/t", "-m", "1"],
    ["admin", "topics", "stats", "foo://public/default/t"],
])
def test_a_bad_topic_domain_is_one_line(broker: EmbeddedBroker, command: list[str]) -> None:
    done = magnetar(*command, "--service-url" if command[0] != "admin" else "--admin-url",
                    broker.service_url if command[0] != "admin" else broker.admin_url)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "invalid topic domain 'foo'" in done.stderr


def test_an_admin_url_at_the_binary_port(broker: EmbeddedBroker) -> None:
    binary = broker.service_url.replace("pulsar://", "http://")
    done = magnetar("admin", "tenants", "list", "--admin-url", binary)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "does not answer HTTP" in done.stderr


def test_a_closed_stdout_ends_quietly(broker: EmbeddedBroker, topic: str) -> None:
    assert magnetar("produce", topic, "--service-url", broker.service_url, "-m", "m",
                    "-n", "300").returncode == 0
    running = popen("consume", topic, "--service-url", broker.service_url, "-s", "head",
                    "-p", "Earliest", "-n", "0")
    assert running.stdout is not None and running.stderr is not None
    assert json.loads(running.stdout.readline())["payload"] == "m"
    running.stdout.close()  # as `| head -1` does
    assert running.wait(timeout=90) == 141
    err = running.stderr.read()
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_perf_exits_1_when_sends_fail(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("perf", "produce", topic, "--service-url", broker.service_url,
                    "-s", "6000000", "-m", "3")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "MessageTooBig" in done.stderr


def test_ctrl_c_on_consume_prints_the_summary(broker: EmbeddedBroker, topic: str) -> None:
    assert magnetar("produce", topic, "--service-url", broker.service_url, "-m", "a,b,c"
                    ).returncode == 0
    running = popen("consume", topic, "--service-url", broker.service_url, "-s", "int",
                    "-p", "Earliest", "-n", "0")
    assert running.stdout is not None
    assert json.loads(running.stdout.readline())["payload"] == "a"  # it is consuming
    running.send_signal(signal.SIGINT)
    _, err = running.communicate(timeout=90)
    assert running.returncode == 0, err
    assert "messages successfully consumed" in err
    assert "Traceback" not in err
