"""A ledger whose open fails part-way gives back its directory's lock and files, so
the next open of that directory (the topic's next load) succeeds."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

import magnetar.storage.ledger as ledger_module
from magnetar.storage.ledger import ManagedLedger
from magnetar.storage.ledger_config import LedgerConfig


async def test_an_open_that_fails_after_the_lock_releases_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = ManagedLedger.open(tmp_path / "t", LedgerConfig())
    first.append(b"kept")
    await first.close()

    real = ledger_module.CursorStore

    def out_of_descriptors(*args: object, **kwargs: object) -> object:
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(ledger_module, "CursorStore", out_of_descriptors)
    with pytest.raises(OSError):
        ManagedLedger.open(tmp_path / "t", LedgerConfig())
    monkeypatch.setattr(ledger_module, "CursorStore", real)

    again = ManagedLedger.open(tmp_path / "t", LedgerConfig())  # not "already open"
    try:
        assert again.read(0) == b"kept"
    finally:
        await again.close()
