"""Storage and event-loop metrics on /metrics: where fsyncs ran, how long they take,
and how much the loop polled instead of sleeping."""

from __future__ import annotations

import re
import time
import urllib.request

import pulsar
from official_client import quiet_logger

from magnetar.testing import EmbeddedBroker


def scrape(broker: EmbeddedBroker) -> str:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as response:
        return response.read().decode()


def sample(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(key) == value for key, value in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels} in the metrics")


def test_fsyncs_per_topic_and_their_mean_duration(topic: str) -> None:
    # However slow this machine's disk, let small groups qualify for the loop.
    with EmbeddedBroker(admin=True, inline_sync_max_seconds=10.0) as broker:
        client = pulsar.Client(
            broker.service_url, logger=quiet_logger()
        )
        try:
            producer = client.create_producer(topic)
            for index in range(6):
                producer.send(b"m%d" % index)  # one at a time: each is a small group
        finally:
            client.close()
        text = scrape(broker)
    on_loop = sample(text, "magnetar_storage_fsyncs_total", topic=topic, thread="loop")
    on_worker = sample(text, "magnetar_storage_fsyncs_total", topic=topic, thread="worker")
    assert on_loop + on_worker >= 6  # each send waited for its own fsync
    # A lone small group is synced on the loop, but for the new topic's first: that
    # one settles the topic's directory fsyncs too, on a worker.
    assert on_loop >= 5
    assert sample(text, "magnetar_storage_fsync_seconds") > 0


def send(service_url: str, topic: str, count: int) -> None:
    client = pulsar.Client(service_url, logger=quiet_logger())
    try:
        producer = client.create_producer(topic)
        for _ in range(count):
            producer.send(b"x")
    finally:
        client.close()


def test_a_standalone_broker_polls_after_input_and_a_thread_one_does_not(
    broker: EmbeddedBroker, topic: str
) -> None:
    # Thread mode: a zero window, so input never schedules a single polling round.
    send(broker.service_url, topic, 3)
    assert sample(scrape(broker), "magnetar_idle_poll_rounds_total") == 0
    # A standalone broker polls after input. A round counts only if the loop comes
    # back to it before the window closes; with the default 200 us a loaded machine
    # may not, so this broker gets a window no scheduling delay outlasts, and more
    # input (each a new window) until a round is seen.
    with EmbeddedBroker(mode="subprocess", admin=True, idle_poll_us=2_000_000) as standalone:
        deadline = time.monotonic() + 60
        rounds = 0.0
        while rounds == 0 and time.monotonic() < deadline:
            send(standalone.service_url, topic, 3)
            rounds = sample(scrape(standalone), "magnetar_idle_poll_rounds_total")
        assert rounds > 0
