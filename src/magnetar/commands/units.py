"""Sizes and durations as pulsar-admin writes them: ``10M``, ``16G`` (bytes, binary
multiples, a bare number is bytes) and ``100m``, ``3h``, ``2d``, ``5w`` (a bare
number is seconds), with ``-1`` for unlimited where Pulsar allows it."""

from __future__ import annotations

import argparse

_SIZES = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def _number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what} {text!r} is not a number") from None


def size_bytes(text: str) -> int:
    """``4096``, ``10k``, ``10M``, ``16G``, ``3T`` as bytes; ``-1`` stays -1."""
    text = text.strip()
    unit = text[-1:].lower()
    if unit in _SIZES:
        return _number(text[:-1], "size") * _SIZES[unit]
    return _number(text, "size")


def seconds(text: str) -> int:
    """``60``, ``60s``, ``100m``, ``3h``, ``2d``, ``5w``, ``1y`` as seconds; ``-1`` stays -1."""
    text = text.strip()
    unit = text[-1:].lower()
    if unit in _SECONDS:
        return _number(text[:-1], "time") * _SECONDS[unit]
    return _number(text, "time")


def has_unit(text: str) -> bool:
    return text.strip()[-1:].lower() in _SECONDS
