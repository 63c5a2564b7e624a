"""Redelivery counts survive kill -9 of the broker (a real subprocess) and its restart,
so a poison message's count is not reset by a crash loop and a dead-letter policy still
catches it. Checked with the official client on Shared and Key_Shared subscriptions."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import EmbeddedBroker

CT = pulsar.ConsumerType
RECEIVE_MS = 10_000


def persisted_count(data_dir: Path, subscription: str, entry_id: int | None = None) -> int:
    """The highest (or ``entry_id``'s) redelivery count in the subscription's cursor file."""
    best = 0
    for path in data_dir.rglob(f"cursors/{subscription}.json"):
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):  # mid-replace
            continue
        for entry, count in doc.get("redelivery_counts", []):
            if entry_id is None or entry == entry_id:
                best = max(best, count)
    return best


def wait_until_persisted(data_dir: Path, subscription: str, count: int) -> None:
    """Wait (no assertion on time) until the cursor file holds ``count``."""
    deadline = time.monotonic() + 20
    while persisted_count(data_dir, subscription) < count:
        assert time.monotonic() < deadline, f"count {count} never reached the cursor file"
        time.sleep(0.05)


def subprocess_broker(data_dir: Path) -> EmbeddedBroker:
    return EmbeddedBroker(data_dir=data_dir, mode="subprocess", cursor_flush_interval=0.1)


@pytest.mark.parametrize("sub_type", [CT.Shared, CT.KeyShared], ids=str)
def test_counts_survive_kill_9_and_a_dead_letter_policy_still_catches_the_message(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client], sub_type: pulsar.ConsumerType
) -> None:
    topic = "persistent://public/default/poison"
    broker = subprocess_broker(tmp_path)
    broker.start()
    try:
        client = client_factory(broker.service_url, operation_timeout_seconds=5)
        consumer = client.subscribe(
            topic, "work", consumer_type=sub_type, negative_ack_redelivery_delay_ms=100
        )
        producer = client.create_producer(topic)
        producer.send(b"poison", partition_key="k")
        producer.send(b"fine", partition_key="k2")
        seen = []
        while len(seen) < 4:
            msg = consumer.receive(RECEIVE_MS)
            if msg.data() == b"fine":
                consumer.acknowledge(msg)
                continue
            seen.append(msg.redelivery_count())
            if len(seen) < 4:
                consumer.negative_acknowledge(msg)
        assert seen == [0, 1, 2, 3]
        wait_until_persisted(tmp_path, "work", 3)
        broker.kill()
        with contextlib.suppress(pulsar.PulsarException):  # NotConnected: broker gone
            client.close()

        broker.start()  # same port, same data directory
        again = client_factory(broker.service_url, operation_timeout_seconds=5)
        dlq = "persistent://public/default/poison-work-DLQ"
        dead_letters = again.subscribe(dlq, "audit")
        consumer = again.subscribe(
            topic,
            "work",
            consumer_type=sub_type,
            negative_ack_redelivery_delay_ms=100,
            dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                max_redeliver_count=3, dead_letter_topic=dlq
            ),
        )
        msg = consumer.receive(RECEIVE_MS)
        assert (msg.data(), msg.redelivery_count()) == (b"poison", 3)  # not reset to 0
        # Its count is at the policy's maximum: one more failure sends it to the DLQ.
        consumer.negative_acknowledge(msg)
        dead = dead_letters.receive(RECEIVE_MS)
        assert dead.data() == b"poison"
        with pytest.raises(pulsar.Timeout):
            extra = consumer.receive(1500)
            pytest.fail(f"{extra.data()!r} came again (count {extra.redelivery_count()})")
    finally:
        broker.close()


def test_a_crash_loop_does_not_reset_the_count(
    tmp_path: Path, client_factory: Callable[..., pulsar.Client]
) -> None:
    """Each round a consumer takes the poison message and goes away without acking it,
    then the broker is killed -9 and restarted: the count keeps growing."""
    topic = "persistent://public/default/crash-loop"
    broker = subprocess_broker(tmp_path)
    broker.start()
    try:
        setup = client_factory(broker.service_url, operation_timeout_seconds=5)
        setup.subscribe(topic, "work", consumer_type=CT.Shared).close()
        setup.create_producer(topic).send(b"poison")
        setup.close()
        counts = []
        for round_ in range(3):
            client = client_factory(broker.service_url, operation_timeout_seconds=5)
            consumer = client.subscribe(topic, "work", consumer_type=CT.Shared)
            msg = consumer.receive(RECEIVE_MS)
            counts.append(msg.redelivery_count())
            client.close()  # gone without an ack: the broker counts a redelivery
            wait_until_persisted(tmp_path, "work", round_ + 1)
            broker.kill()
            broker.start()
        assert counts == [0, 1, 2]
    finally:
        broker.close()
