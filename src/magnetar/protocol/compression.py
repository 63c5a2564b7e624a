"""Payload codecs, byte-compatible with the Java and C++ clients.

LZ4 is the raw block format without a size prefix and SNAPPY the raw block
format (the uncompressed size travels in ``MessageMetadata.uncompressed_size``);
ZLIB is a zlib stream and ZSTD a zstd frame.
"""

from __future__ import annotations

import zlib

import lz4.block
import zstandard

from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.pb import pb

NONE = pb.NONE
LZ4 = pb.LZ4
ZLIB = pb.ZLIB
ZSTD = pb.ZSTD
SNAPPY = pb.SNAPPY

_NAMES = {"none": NONE, "lz4": LZ4, "zlib": ZLIB, "zstd": ZSTD, "snappy": SNAPPY}
_zstd_c = zstandard.ZstdCompressor(level=3)
_zstd_d = zstandard.ZstdDecompressor()


def compression_type(name: str | int | None) -> int:
    if name is None:
        return NONE
    if isinstance(name, int):
        return name
    try:
        return _NAMES[name.lower()]
    except KeyError:
        raise ValueError(
            f"unknown compression {name!r}; expected one of {sorted(_NAMES)}"
        ) from None


def compress(kind: int, data: bytes) -> bytes:
    if kind == NONE:
        return data
    if kind == LZ4:
        return bytes(lz4.block.compress(data, store_size=False))
    if kind == ZLIB:
        return zlib.compress(data)
    if kind == ZSTD:
        return _zstd_c.compress(data)
    if kind == SNAPPY:
        import snappy  # on first use: 1.5 MB that most brokers never need

        return bytes(snappy.compress(data))
    raise ValueError(f"unsupported compression type {kind}")


def decompress(kind: int, data: bytes, uncompressed_size: int) -> bytes:
    try:
        if kind == NONE:
            return data
        if kind == LZ4:
            return bytes(lz4.block.decompress(data, uncompressed_size=uncompressed_size))
        if kind == ZLIB:
            return zlib.decompress(data)
        if kind == ZSTD:
            return _zstd_d.decompress(data, max_output_size=max(uncompressed_size, 1))
        if kind == SNAPPY:
            import snappy

            return bytes(snappy.decompress(data))
    except Exception as exc:  # each codec raises its own error type
        raise MalformedFrame(f"cannot decompress payload ({kind}): {exc}") from None
    raise MalformedFrame(f"unsupported compression type {kind}")
