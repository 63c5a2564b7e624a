"""LedgerIds: a new ledger per open, positions mapped to message ids and back."""

from __future__ import annotations

from magnetar.storage.ledger_ids import LedgerIds


def test_each_open_takes_a_higher_id_and_ranges_follow() -> None:
    ids = LedgerIds()
    first = ids.open_next(next_position=0, first_position=0, now_s=1000)
    for position in range(5):  # written during the first open
        assert ids.ledger_of(position) == first
    second = ids.open_next(next_position=5, first_position=0, now_s=1000)  # clock unchanged
    assert second > first
    assert ids.rows == [(first, 0), (second, 5)]
    assert [ids.ledger_of(p) for p in (0, 4, 5, 9)] == [first, first, second, second]
    assert ids.exact(first, 4) == 4 and ids.exact(first, 5) is None
    assert ids.exact(second, 5) == 5 and ids.exact(second, 4) is None
    assert ids.exact(first - 1, 0) is None


def test_lost_positions_are_written_again_under_a_new_id() -> None:
    ids = LedgerIds()
    first = ids.open_next(0, 0, 1000)
    # Entries 0..9 were handed out, a power loss kept only 0..4: the next open starts at 5.
    second = ids.open_next(5, 0, 1001)
    assert ids.exact(first, 7) is None  # the lost entry's id names nothing stored
    assert ids.exact(second, 7) == 7  # the new entry at that position has another id
    # Clamped positions: past a closed ledger's end is just after its last entry.
    assert ids.position(first, 7, next_position=8) == 5
    assert ids.position(second, 7, next_position=8) == 7
    assert ids.position(second + 1, 0, next_position=8) == 8
    assert ids.position(first - 1, 0, next_position=8) == -1


def test_empty_and_trimmed_ledgers_are_forgotten_but_their_ids_not_reused() -> None:
    ids = LedgerIds()
    a = ids.open_next(0, 0, 1000)
    b = ids.open_next(3, 0, 1000)  # a holds 0..2
    c = ids.open_next(3, 0, 1000)  # b lost everything it held: forgotten
    assert [row[0] for row in ids.rows] == [a, c]
    assert ids.position(b, 3, next_position=3) == 3  # where b lay: just before c
    d = ids.open_next(10, 5, 1000)  # 0..4 trimmed: a is gone
    assert [row[0] for row in ids.rows] == [c, d]
    assert d > c > b > a
