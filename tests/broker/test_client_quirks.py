"""Which clients are told REACHED_END_OF_TOPIC."""

from __future__ import annotations

from magnetar.broker.session.client_quirks import understands_end_of_topic


def test_cpp_clients_up_to_4_2_are_not_told() -> None:
    assert not understands_end_of_topic("Pulsar-CPP-v4.2.0", 20)
    assert not understands_end_of_topic("Pulsar-CPP-v3.7.1", 20)
    assert understands_end_of_topic("Pulsar-CPP-v4.3.0", 20)
    assert understands_end_of_topic("Pulsar-CPP-v5.0.0", 20)


def test_other_clients_are_told_from_protocol_9() -> None:
    assert understands_end_of_topic("Pulsar-Java-v4.0.0", 19)
    assert understands_end_of_topic("magnetar-0.1.0", 21)
    assert not understands_end_of_topic("Pulsar-Java-v1.0", 8)
