"""Fixtures for the storage tests: ledgers on real files under tmp_path."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from magnetar.storage import LedgerConfig, ManagedLedger

LedgerFactory = Callable[..., ManagedLedger]


@pytest.fixture
async def make_ledger(tmp_path: Path) -> AsyncIterator[LedgerFactory]:
    """Open ledgers in tmp_path/ledger (by default); close whatever is left open."""
    opened: list[ManagedLedger] = []

    def factory(directory: Path | None = None, **config: object) -> ManagedLedger:
        # The tests of the write pipeline watch the worker thread; the inline path
        # for small groups has tests of its own that ask for it.
        config.setdefault("inline_sync_max_entries", 0)
        ledger = ManagedLedger.open(directory or tmp_path / "ledger", LedgerConfig(**config))  # type: ignore[arg-type]
        opened.append(ledger)
        return ledger

    yield factory
    for ledger in opened:
        if not ledger.closed:
            await ledger.close()
