"""Message ids order and serialise like Pulsar's; Murmur3 matches the reference values."""

from __future__ import annotations

import pulsar

from magnetar.protocol.message_id import EARLIEST, LATEST, MessageId
from magnetar.protocol.murmur3 import key_hash, murmur3_32


def test_ordering_by_ledger_entry_batch() -> None:
    ids = [MessageId(2, 0), MessageId(1, 5, 1), MessageId(1, 5, 0), MessageId(1, 4)]
    assert sorted(ids) == [MessageId(1, 4), MessageId(1, 5, 0), MessageId(1, 5, 1), MessageId(2, 0)]
    assert EARLIEST < MessageId(0, 0) < LATEST


def test_serialisation_is_compatible_with_the_official_client() -> None:
    ours = MessageId(1795307393, 42, 3, 2)
    theirs = pulsar.MessageId.deserialize(ours.serialize())
    assert (theirs.ledger_id(), theirs.entry_id(), theirs.batch_index(), theirs.partition()) == (
        1795307393,
        42,
        3,
        2,
    )
    back = MessageId.deserialize(pulsar.MessageId(2, 7, 9, 1).serialize())
    assert (back.ledger_id, back.entry_id, back.batch_index, back.partition) == (7, 9, 1, 2)


def test_earliest_and_latest_from_the_official_client() -> None:
    assert MessageId.deserialize(pulsar.MessageId.earliest.serialize()).is_earliest
    assert MessageId.deserialize(pulsar.MessageId.latest.serialize()).is_latest


def test_murmur3_reference_values() -> None:
    assert murmur3_32(b"") == 0
    assert murmur3_32(b"hello") == 0x248BFA47
    assert murmur3_32(b"hello, world") == 0x149BBB7F
    assert key_hash("hello") == 0x248BFA47 & 0x7FFFFFFF
