"""Which ledger id each stored entry carries in its message id.

As in Pulsar's ManagedLedger, a topic's log is a sequence of ledgers, and each open of
the topic (each broker start) writes into a new ledger id. Entries keep one internal
position sequence; a ledger is the range of positions written during one open. When
a machine crash loses entries that were never fsynced, the positions are written
again, but under a new ledger id, so a message id is never handed out twice: an id of
a lost entry names its old ledger, whose range ends before it.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.storage.metadata import TopicMetadata
    from magnetar.storage.owed_syncs import OwedSyncs


@dataclass
class LedgerIds:
    # (ledger id, first position), ascending in both; the last row is the current
    # ledger, open for writes. A ledger's range runs to the next row's first position.
    rows: list[tuple[int, int]] = field(default_factory=list)

    @property
    def current(self) -> int:
        return self.rows[-1][0]

    @property
    def current_first(self) -> int:
        return self.rows[-1][1]

    def open_next(self, next_position: int, first_position: int, now_s: int) -> int:
        """Start a new ledger at ``next_position``; returns its id.

        Ledgers left empty (everything they held was lost or trimmed) are forgotten;
        their ids are never reused, since a new id is above every id before it.
        """
        new_id = max(self.rows[-1][0] + 1 if self.rows else 1, now_s)
        rows = [*self.rows, (new_id, next_position)]
        kept: list[tuple[int, int]] = []
        for i, (ledger_id, first) in enumerate(rows):
            end = rows[i + 1][1] if i + 1 < len(rows) else None
            if end is not None and (end <= first or end <= first_position):
                continue  # empty, or wholly trimmed away
            kept.append((ledger_id, first))
        self.rows = kept
        return new_id

    def ledger_of(self, position: int) -> int:
        """The ledger id a stored position carries in its message id."""
        rows = self.rows
        if position >= rows[-1][1]:
            return rows[-1][0]
        i = bisect_right(rows, position, key=lambda row: row[1]) - 1
        return rows[max(i, 0)][0]

    def _range(self, ledger_id: int) -> tuple[int, int | None] | None:
        rows = self.rows
        i = bisect_right(rows, ledger_id, key=lambda row: row[0]) - 1
        if i < 0 or rows[i][0] != ledger_id:
            return None
        end = rows[i + 1][1] if i + 1 < len(rows) else None
        return rows[i][1], end

    def exact(self, ledger_id: int, entry_id: int) -> int | None:
        """The position of (ledger id, entry id) if that ledger holds it, else None."""
        current, current_first = self.rows[-1]
        if ledger_id == current:  # the common case: an entry written since the load
            return entry_id if entry_id >= current_first else None
        span = self._range(ledger_id)
        if span is None:
            return None
        first, end = span
        if entry_id < first or (end is not None and entry_id >= end):
            return None
        return entry_id

    def position(self, ledger_id: int, entry_id: int, next_position: int) -> int:
        """The position of (ledger id, entry id), clamped to that ledger's range: an
        entry past a closed ledger's end maps to the position just after its last
        entry, a ledger id after the current one to ``next_position``, one before
        every ledger to -1."""
        rows = self.rows
        if ledger_id > rows[-1][0]:
            return next_position
        if ledger_id < rows[0][0]:
            return -1
        span = self._range(ledger_id)
        if span is None:
            # A forgotten (empty) ledger: it lay just before the next one there is.
            i = bisect_right(rows, ledger_id, key=lambda row: row[0])
            return rows[i][1]
        first, end = span
        if entry_id < first:
            return first
        if end is not None and entry_id >= end:
            return end
        return entry_id


def begin_ledger(
    metadata: TopicMetadata, next_position: int, first_position: int, now_s: int,
    owed: OwedSyncs | None = None,
) -> LedgerIds:
    """Open a new ledger for a topic being loaded and persist it in its metadata
    (fsynced) before anything is written under the new id; or, with ``owed`` (a topic
    created by this load, with nothing in it yet), when ``owed`` is settled, which
    its first sync does before anything is confirmed. (Were the machine to lose the
    metadata of entries it had only written, ids begin at the clock's second: the
    next load's ledger id is above this one's.)"""
    ids = LedgerIds(list(metadata.ledgers))
    if not ids.rows and metadata.ledger_id:
        ids.rows = [(metadata.ledger_id, 0)]  # written before ledgers were tracked
    metadata.ledger_id = ids.open_next(next_position, first_position, now_s)
    metadata.ledgers = list(ids.rows)
    if owed is not None:
        metadata.save_when_settled(owed)
    else:
        metadata.save()
    return ids
