"""The position of a reader (non-durable subscription): kept in memory only."""

from __future__ import annotations

from collections.abc import Iterable


class NonDurableCursor:
    def __init__(self, mark_delete: int) -> None:
        self.mark_delete = mark_delete
        self._acked: set[int] = set()

    def ack(self, entry_ids: Iterable[int]) -> None:
        acked = self._acked
        for entry_id in entry_ids:
            if entry_id > self.mark_delete:
                acked.add(entry_id)
        while self.mark_delete + 1 in acked:
            self.mark_delete += 1
            acked.discard(self.mark_delete)

    def ack_cumulative(self, entry_id: int) -> None:
        if entry_id > self.mark_delete:
            self.mark_delete = entry_id
            self._acked = {e for e in self._acked if e > entry_id}
            self.ack(())

    def is_acked(self, entry_id: int) -> bool:
        return entry_id <= self.mark_delete or entry_id in self._acked

    def reset(self, mark_delete: int) -> None:
        self.mark_delete = mark_delete
        self._acked.clear()

    def flush(self) -> None:
        """Nothing to persist: a non-durable cursor lives as long as its reader."""

    def acked_count_above_mark_delete(self) -> int:
        return len(self._acked)
