"""Batched payloads: ``([u32 size][SingleMessageMetadata][payload])*``."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.pb import pb

_U32 = struct.Struct(">I")
_unpack_u32 = _U32.unpack_from
_parse_single = pb.SingleMessageMetadata.FromString


def split_batch(payload: bytes, count: int) -> list[tuple[pb.SingleMessageMetadata, bytes]]:
    """Cut an uncompressed batch payload into its ``count`` messages."""
    if type(payload) is not bytes:
        payload = bytes(payload)  # values are sliced from it: they must be bytes
    out: list[tuple[pb.SingleMessageMetadata, bytes]] = []
    append = out.append
    total = len(payload)
    pos = 0
    # The loop of every batched message a bulk reader decodes: names bound locally,
    # metadata and value sliced from the bytes (cheaper than through a memoryview).
    try:
        for _ in range(count):
            (size,) = _unpack_u32(payload, pos)
            pos += 4
            single = _parse_single(payload[pos : pos + size])
            pos += size
            end = pos + single.payload_size
            if end > total:
                raise MalformedFrame("batched message runs past the end of the batch")
            append((single, payload[pos:end]))
            pos = end
    except struct.error:
        raise MalformedFrame("batch is shorter than its message count says") from None
    except DecodeError as exc:
        raise MalformedFrame(f"single message metadata does not parse: {exc}") from None
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
