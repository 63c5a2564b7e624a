"""Protobuf varints: the one encoder every hand-written frame and metadata uses
(the broker's MESSAGE and receipts in ``fastpath``, the client's SEND, FLOW and
metadata in ``client_codec``). Negative int64 values take ten bytes, as protobuf
writes them."""

from __future__ import annotations


def _slow_varint(value: int) -> bytes:
    if value < 0:
        value &= (1 << 64) - 1
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Small ids, counts and sizes are most of what is encoded; look them up. The table
# stops at 2**12 (200 KB): to 2**16 it held 3 MB, a twentieth of an idle broker.
_SMALL = [_slow_varint(i) for i in range(1 << 12)]


def varint(value: int) -> bytes:
    if 0 <= value < 4096:
        return _SMALL[value]
    if 0 < value < 1 << 28:  # entry ids of a long-lived topic
        if value < 1 << 14:
            return bytes(((value & 0x7F) | 0x80, value >> 7))
        if value < 1 << 21:
            return bytes(((value & 0x7F) | 0x80, ((value >> 7) & 0x7F) | 0x80, value >> 14))
        return bytes(
            (
                (value & 0x7F) | 0x80,
                ((value >> 7) & 0x7F) | 0x80,
                ((value >> 14) & 0x7F) | 0x80,
                value >> 21,
            )
        )
    return _slow_varint(value)
