"""Batched payloads: ``([u32 size][SingleMessageMetadata][payload])*``."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.pb import pb

_U32 = struct.Struct(">I")


def split_batch(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Cut an uncompressed batch payload into its ``count`` messages."""
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    view = memoryview(payload)
    pos = 0
    for _ in range(count):
        if len(view) - pos < 4:
            raise MalformedFrame("batch is shorter than its message count says")
        (size,) = _U32.unpack_from(view, pos)
        pos += 4
        single = pb.SingleMessageMetadata()
        try:
            single.MergeFromString(bytes(view[pos : pos + size]))
        except DecodeError as exc:
            raise MalformedFrame(f"single message metadata does not parse: {exc}") from None
        pos += size
        end = pos + single.payload_size
        if end > len(view):
            raise MalformedFrame("batched message runs past the end of the batch")
        out.append((single, bytes(view[pos:end])))
        pos = end
    return out


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    parts: list[bytes] = []
    for single, payload in messages:
        single.payload_size = len(payload)
        data = single.SerializeToString()
        parts.append(_U32.pack(len(data)))
        parts.append(data)
        parts.append(payload)
    return b"".join(parts)
