"""The topics on disk and their stored bytes, for the metrics of topics not loaded.

A scrape must cover every topic the broker stores, not only those touched since it
started, but walking the data directory per scrape would cost a scrape at thousands of
topics a lot of system calls. The walk runs on a worker thread (it reads only the file
system, never broker state) and its answer is kept for ``max_age`` seconds.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from magnetar.storage.segment import SUFFIX
from magnetar.storage.store import Store


def _ledger_bytes(store: Store, topic: str) -> int:
    """The bytes of a topic's segment files (a closed ledger's files hold no reserve)."""
    total = 0
    try:
        with os.scandir(store.topic_dir(topic) / "ledger") as entries:
            for entry in entries:
                if entry.name.endswith(SUFFIX):
                    total += entry.stat().st_size
    except (FileNotFoundError, NotADirectoryError):
        pass  # deleted meanwhile, or not a ledger
    return total


class DiskTopics:
    """Every topic's stored bytes, from a walk at most ``max_age`` seconds old."""

    def __init__(self, store: Callable[[], Store], max_age: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store  # a getter: the broker makes its store after its metrics
        self.max_age = max_age
        self.clock = clock
        self._lock = threading.Lock()
        self._taken: float | None = None
        self._sizes: dict[str, int] = {}

    def sizes(self) -> dict[str, int]:
        """Topic name to stored bytes; call on a worker thread (it may walk the disk)."""
        with self._lock:
            now = self.clock()
            if self._taken is None or now - self._taken >= self.max_age:
                store = self.store()
                self._sizes = {t: _ledger_bytes(store, t) for t in store.list_topics()}
                self._taken = now
            return self._sizes

    def cached(self) -> dict[str, int]:
        """The last walk's answer, without walking (for the event loop)."""
        return self._sizes

    def forget(self) -> None:
        """Walk again on the next call (tests, or after topics were deleted)."""
        with self._lock:
            self._taken = None
