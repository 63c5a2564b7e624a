"""Entries of sealed segments read on a worker thread, ahead of the reader that needs
them, so that a consumer far behind the entry cache does not make the event loop wait
for the disk.

A ledger keeps one ``ReadAhead``: the run of entries its last read-ahead brought in
(at most the byte budget it was asked for) and the read in flight, if any. The
ledger's reads look here before the disk; a new run replaces the previous one, so the
memory held is one run per ledger. A read that failed on the worker is not retried
ahead: the reader then reads in place (on the loop) and meets the error there, where
it is handled as before.
"""

from __future__ import annotations

import asyncio


class ReadAhead:
    __slots__ = ("_entries", "_failed_start", "first", "loading", "runs")

    def __init__(self) -> None:
        self._entries: list[bytes] = []
        self.first = 0  # the id of _entries[0]
        self.loading: asyncio.Future[list[bytes]] | None = None
        self._failed_start = -1
        self.runs = 0  # runs read on a worker thread since the ledger opened

    def get(self, entry_id: int) -> bytes | None:
        index = entry_id - self.first
        if 0 <= index < len(self._entries):
            return self._entries[index]
        return None

    def holds(self, entry_id: int) -> bool:
        return 0 <= entry_id - self.first < len(self._entries)

    def failed_at(self, entry_id: int) -> bool:
        return entry_id == self._failed_start

    def store(self, first: int, entries: list[bytes]) -> None:
        self.first, self._entries = first, entries
        self.runs += 1

    def failed(self, start: int) -> None:
        self._failed_start = start

    def drop_before(self, entry_id: int) -> None:
        """Entries below ``entry_id`` were trimmed: forget them."""
        if self.first < entry_id:
            drop = min(entry_id - self.first, len(self._entries))
            self._entries = self._entries[drop:]
            self.first += drop

    def clear(self) -> None:
        self._entries = []
