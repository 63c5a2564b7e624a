"""fsutil: writes that the kernel cuts short are finished, at the right offsets."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from magnetar.storage import fsutil


def test_pwritev_all_finishes_a_short_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pwritev
    calls: list[int] = []

    def short_pwritev(fd: int, buffers: Sequence[bytes], offset: int) -> int:
        calls.append(offset)
        if len(calls) == 1:  # the first call writes 1.5 of the 3 parts
            cut = [buffers[0], bytes(buffers[1])[:2]]
            return real(fd, cut, offset)
        return real(fd, buffers, offset)

    monkeypatch.setattr(os, "pwritev", short_pwritev)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"HEAD")
        fsutil.pwritev_all(fd, [b"abcd", b"efgh", b"ijkl"], 4)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"HEADabcdefghijkl"
    assert calls[0] == 4


def test_pwritev_all_splits_more_parts_than_iov_max(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fsutil, "_IOV_MAX", 3)
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    parts = [bytes([65 + i]) * 3 for i in range(8)]
    try:
        fsutil.pwritev_all(fd, parts, 0)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"".join(parts)


def test_preallocate_reserves_zeros(tmp_path: Path) -> None:
    path = tmp_path / "f"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    try:
        os.write(fd, b"data")
        assert fsutil.preallocate(fd, 4, 4096)
    finally:
        os.close(fd)
    assert path.read_bytes() == b"data" + bytes(4092)
