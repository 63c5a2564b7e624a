"""Small helpers shared by the integration tests that drive the official client."""

from __future__ import annotations

import pulsar
import pytest

RECEIVE_MS = 5000


def receive_n(consumer: pulsar.Consumer, n: int, ack: bool = True) -> list[pulsar.Message]:
    """Exactly ``n`` messages, each within RECEIVE_MS, acknowledged unless ``ack`` is False."""
    out = []
    for _ in range(n):
        msg = consumer.receive(timeout_millis=RECEIVE_MS)
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)
    return out


def drain(consumer: pulsar.Consumer, idle_ms: int = 500, ack: bool = True) -> list[pulsar.Message]:
    """Receive until nothing arrives for ``idle_ms``."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=idle_ms)
        except pulsar.Timeout:
            return out
        if ack:
            consumer.acknowledge(msg)
        out.append(msg)


def assert_nothing_more(consumer: pulsar.Consumer, timeout_ms: int = 300) -> None:
    with pytest.raises(pulsar.Timeout):
        msg = consumer.receive(timeout_millis=timeout_ms)
        pytest.fail(
            f"unexpected extra message {msg.data()!r} (redelivery {msg.redelivery_count()})"
        )


def mid_key(msg_id: pulsar.MessageId) -> tuple[int, int, int]:
    return (msg_id.ledger_id(), msg_id.entry_id(), msg_id.batch_index())
