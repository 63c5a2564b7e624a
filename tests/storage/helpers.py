"""Helpers shared by the storage tests."""

from __future__ import annotations

from pathlib import Path


def payload(entry_id: int, size: int = 0) -> bytes:
    """Recognisable, variable-sized content for an entry id."""
    base = f"entry-{entry_id}:".encode()
    if size:
        return (base * (size // len(base) + 1))[:size]
    return base * (1 + entry_id % 7)


def segment_files(ledger_dir: Path) -> list[Path]:
    return sorted((ledger_dir / "ledger").glob("*.seg"))
