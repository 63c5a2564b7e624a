"""Batched payloads: ``([u32 size][SingleMessageMetadata][payload])*``: the one place
that cuts a batch into its messages (whole, :func:`split_batch`, or one at a time,
:func:`next_batched`), checks one (:func:`check_batch`) and builds one."""

from __future__ import annotations

import struct
from collections.abc import Iterable

from google.protobuf.message import DecodeError

from magnetar.protocol.batch_shape import uniform_batch
from magnetar.protocol.errors import MalformedFrame
from magnetar.protocol.pb import pb

_U32 = struct.Struct(">I")
_unpack_u32 = _U32.unpack_from
_parse_single = pb.SingleMessageMetadata.FromString
# The fewest bytes one batched message takes: its size field and a
# SingleMessageMetadata holding only payload_size (required) = 0.
MIN_BATCHED_MESSAGE_SIZE = 6


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
            if pos + size > total:
                raise MalformedFrame("single message metadata runs past the end of the batch")
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


def next_batched(buf: bytes | memoryview, pos: int) -> tuple[pb.SingleMessageMetadata, int, int]:
    """The batched message at ``pos`` of ``buf``, for a reader taking one at a time: its
    metadata and where its value starts and ends (the next message starts there). The
    cut of :func:`split_batch`, with the same errors."""
    try:
        (size,) = _unpack_u32(buf, pos)
        pos += 4
        if pos + size > len(buf):
            raise MalformedFrame("single message metadata runs past the end of the batch")
        single = _parse_single(bytes(buf[pos : pos + size]))
    except struct.error:
        raise MalformedFrame("batch is shorter than its message count says") from None
    except DecodeError as exc:
        raise MalformedFrame(f"single message metadata does not parse: {exc}") from None
    pos += size
    end = pos + single.payload_size
    if end > len(buf):
        raise MalformedFrame("batched message runs past the end of the batch")
    return single, pos, end


def check_batch(payload: bytes | memoryview, count: int, start: int = 0) -> None:
    """Raise :class:`MalformedFrame` unless ``payload[start:]`` is exactly ``count``
    batched messages: the broker's check of a SEND's ``num_messages_in_batch`` (a
    consumer splits the entry by that count). The walk of :func:`split_batch`, stricter
    and keeping nothing (about 0.2 us a message); a batch whose messages all have one
    shape is proven a byte column at a time instead (batch_shape.py), which refuses
    nothing the walk would take. ``start`` lets a caller pass the whole entry, whose
    bytes are sliced faster than a view of its payload."""
    size = len(payload) - start
    if count * MIN_BATCHED_MESSAGE_SIZE > size:
        raise MalformedFrame(
            f"a batch of {count} messages needs at least {count * MIN_BATCHED_MESSAGE_SIZE} "
            f"bytes; the payload has {size}"
        )
    if uniform_batch(payload, count, start):
        return
    end = _walk(payload, count, start)
    if end != len(payload):
        raise MalformedFrame(
            f"the payload holds more than its {count} batched messages "
            f"({len(payload) - end} bytes follow them)"
        )


def _walk(payload: bytes | memoryview, count: int, start: int = 0) -> int:
    """Walk ``count`` batched messages from ``start`` (one metadata object reused,
    nothing kept); the offset where the last one ends."""
    # The broker's loop over every batched message it receives: names bound locally,
    # each metadata sliced from bytes (a memoryview slice costs more than the copy of
    # its few bytes): 0.19 against 0.30 us a message through a memoryview.
    if type(payload) is not bytes:
        payload = bytes(payload)
    end = len(payload)
    pos = start
    single = pb.SingleMessageMetadata()
    parse = single.ParseFromString
    has = single.HasField
    try:
        for _ in range(count):
            (size,) = _unpack_u32(payload, pos)
            pos += 4
            if size > end - pos:
                raise MalformedFrame("single message metadata runs past the end of the batch")
            parse(payload[pos : pos + size])
            if not has("payload_size"):
                raise MalformedFrame("a batched message's metadata lacks its payload_size")
            pos += size
            length = single.payload_size
            if length < 0 or length > end - pos:
                raise MalformedFrame("batched message runs past the end of the batch")
            pos += length
    except struct.error:
        raise MalformedFrame("batch is shorter than its message count says") from None
    except DecodeError as exc:
        raise MalformedFrame(f"single message metadata does not parse: {exc}") from None
    return pos


def build_batch(messages: Iterable[tuple[pb.SingleMessageMetadata, bytes]]) -> bytes:
    parts: list[bytes] = []
    for single, payload in messages:
        single.payload_size = len(payload)
        data = single.SerializeToString()
        parts.append(_U32.pack(len(data)))
        parts.append(data)
        parts.append(payload)
    return b"".join(parts)
