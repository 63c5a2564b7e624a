"""``magnetar perf`` as a subprocess: tiny runs, counts checked, no timing asserted."""

from __future__ import annotations

import re

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

from .helpers import magnetar


def histogram_total(out: str) -> int:
    return sum(int(n) for n in re.findall(r"ms\s*│\s*(\d+)\s*│", out))


def test_perf_produce_then_consume(broker: EmbeddedBroker, client: pulsar.Client,
                                   topic: str) -> None:
    checker = client.subscribe(topic, "check")
    done = magnetar("perf", "produce", topic, "--service-url", broker.service_url,
                    "-n", "60", "-s", "64", "-i", "0.05", "--batching")
    assert done.returncode == 0, done.stderr
    assert "Aggregated produce:" in done.stdout
    assert "60 messages in" in done.stdout
    assert histogram_total(done.stdout) == 60
    assert re.search(r"p99 \d+\.\d+", done.stdout)
    for _ in range(60):
        assert len(checker.receive(timeout_millis=10_000).data()) == 64
    done = magnetar("perf", "consume", topic, "--service-url", broker.service_url,
                    "-n", "60", "--earliest", "-ss", "perf-c")
    assert done.returncode == 0, done.stderr
    assert "60 messages in" in done.stdout
    assert histogram_total(done.stdout) == 60


def test_perf_request_with_its_own_responder(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("perf", "request", topic, "--service-url", broker.service_url,
                    "-n", "25", "-s", "16", "-o", "5")
    assert done.returncode == 0, done.stderr
    assert "Aggregated request:" in done.stdout
    assert "25 messages in" in done.stdout
    assert histogram_total(done.stdout) == 25


def test_perf_time_limit(broker: EmbeddedBroker, topic: str) -> None:
    done = magnetar("perf", "produce", topic, "--service-url", broker.service_url,
                    "--time", "0.5", "--rate", "20", "-i", "0.2", "-s", "8")
    assert done.returncode == 0, done.stderr
    match = re.search(r"(\d+) messages in", done.stdout)
    # Paced at 20/s from the start and stopped by the time (slow connects may send none).
    assert match and int(match.group(1)) <= 20


@pytest.mark.parametrize("mode", ["produce", "consume", "request"])
def test_help(mode: str) -> None:
    done = magnetar("perf", mode, "--help")
    assert done.returncode == 0
    assert f"usage: magnetar perf {mode}" in done.stdout


def test_bad_arguments_are_exit_2() -> None:
    assert magnetar("perf", "produce", "t", "-n", "-1").returncode == 2
    assert magnetar("perf", "nosuch", "t").returncode == 2
