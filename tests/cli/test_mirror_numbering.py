"""How ``magnetar mirror`` numbers and orders what it copies (pure functions)."""

from __future__ import annotations

import pytest

from magnetar.client import MessageId
from magnetar.commands.mirror_pipe import check_order, reached, sequence_id
from magnetar.commands.mirror_topics import MirrorError


def test_sequence_ids_rise_with_the_source_order() -> None:
    ids = [MessageId(7, 0), MessageId(7, 1, 0, -1, 3), MessageId(7, 1, 2, -1, 3),
           MessageId(9, 2), MessageId(9, 3, 0, -1, 1)]
    sequences = [sequence_id(m) for m in ids]
    assert sequences == sorted(set(sequences))
    assert sequences[0] == 0  # above a new producer's -1


def test_a_batch_too_big_to_number_is_refused() -> None:
    with pytest.raises(MirrorError, match="cannot be numbered"):
        sequence_id(MessageId(1, 1, 1 << 20, -1, (1 << 20) + 1))


def test_entry_ids_starting_again_in_a_new_ledger_are_refused() -> None:
    check_order(MessageId(5, 40), MessageId(5, 3))  # a redelivery: fine
    check_order(MessageId(5, 40), MessageId(6, 41))  # magnetar: a new ledger goes on
    with pytest.raises(MirrorError, match="start again in each ledger"):
        check_order(MessageId(5, 40), MessageId(6, 0))  # Apache Pulsar's numbering


def test_the_end_is_the_last_message_of_the_last_entry() -> None:
    end = MessageId(3, 10)
    assert not reached(MessageId(3, 9), end)
    assert reached(MessageId(3, 10), end)
    assert not reached(MessageId(3, 10, 0, -1, 2), end)
    assert reached(MessageId(3, 10, 1, -1, 2), end)
    assert reached(MessageId(4, 0), end)
