"""A batch whose messages all have one shape, checked a byte column at a time.

``check_batch`` (batch.py) walks a batch message by message: a protobuf parse of each
``SingleMessageMetadata``, about 0.2 us a message, which was half of the broker's CPU
on a batched publish of small messages. Most batches are regular: the official
clients write each message's metadata with the same fields at the same widths (its
``payload_size`` and its ``sequence_id``), and many producers send messages of one
size. Such a batch is ``count`` repetitions of one stride, ``[u32 size][metadata]
[payload]``, and the bytes at one offset of every message form a column that a bytes
slice with a step reads at C speed.

:func:`uniform_batch` proves that a batch is such a repetition and that every message
of it parses as the first one does: the first message's metadata is parsed, and its
wire structure (tags, lengths, the width of each varint) is then required of every
message, column by column. Only the values of varint and fixed-width fields may
differ from the first message, which changes no parse (proto2 takes any value for
such a field; an enum value it does not know goes to the unknown fields), and
``payload_size`` may not differ at all. What it cannot prove it leaves to the walk:
it never accepts a batch that the walk would refuse, so the two reject the same
inputs.
"""

from __future__ import annotations

import struct

from google.protobuf.message import DecodeError

from magnetar.protocol.pb import pb

_unpack_u32 = struct.Struct(">I").unpack_from
_parse_single = pb.SingleMessageMetadata.FromString

# What each byte of the first message's size field and metadata may be in the others.
SAME = 0  # the first message's byte
MORE = 1  # any byte with the continuation bit (a varint byte before its last)
LAST = 2  # any byte without it (a varint's last byte)
FREE = 3  # anything (the value of a fixed32 or fixed64 field)

_PAYLOAD_SIZE_FIELD = 3  # SingleMessageMetadata.payload_size
# Deleting these from a column leaves nothing if every byte of it had (or lacked) the
# continuation bit.
_HIGH = bytes(range(0x80, 0x100))
_LOW = bytes(range(0x80))
# Beyond these a column check costs more than the walk it saves.
MIN_MESSAGES = 8
MAX_COLUMNS = 64


def uniform_batch(payload: bytes | memoryview, count: int, start: int = 0) -> bool:
    """True if ``payload[start:]`` is ``count`` batched messages of one shape, each of
    whose metadata parses with the same ``payload_size``; False if it is not, or not
    provably (the caller then walks it). Fastest on bytes: a column of a view is
    copied an element at a time."""
    length = len(payload) - start
    if count < MIN_MESSAGES or length < 4:
        return False
    (size,) = _unpack_u32(payload, start)
    if 4 + size > MAX_COLUMNS or 4 + size > length:
        return False
    metadata = bytes(payload[start + 4 : start + 4 + size])
    try:
        first = _parse_single(metadata)
    except DecodeError:
        return False
    if not first.HasField("payload_size") or first.payload_size < 0:
        return False
    stride = 4 + size + first.payload_size
    if stride * count != length:
        return False
    kinds = metadata_kinds(metadata)
    if kinds is None:
        return False
    head = bytes(payload[start : start + 4])
    for column in range(4 + size):
        kind = kinds[column - 4] if column >= 4 else SAME
        if kind == FREE:
            continue
        # This byte of each message: count bytes, as the batch is exactly count strides
        # long (bytes() of bytes is no copy).
        cells = bytes(payload[start + column :: stride])
        if kind == SAME:
            byte = head[column : column + 1] if column < 4 else metadata[column - 4 : column - 3]
            if cells.count(byte) != count:
                return False
        elif cells.translate(None, _HIGH if kind == MORE else _LOW):
            return False
    return True


def metadata_kinds(metadata: bytes) -> bytes | None:
    """What each byte of ``metadata`` (a SingleMessageMetadata that parses) may be in
    another message of the same shape (SAME, MORE, LAST or FREE, a byte each); None
    for a structure this does not reason about (groups, over-long varints)."""
    kinds = bytearray(len(metadata))  # SAME throughout, unless a value says otherwise
    end = len(metadata)
    pos = 0
    while pos < end:
        tag, pos = _varint(metadata, pos)
        if tag < 0:
            return None
        wire_type = tag & 7
        if wire_type == 0:
            start = pos
            _, pos = _varint(metadata, pos)
            if pos < 0:
                return None
            # payload_size stays SAME (it sets the stride); so does a 10-byte varint,
            # whose last byte is bounded.
            if tag >> 3 != _PAYLOAD_SIZE_FIELD and pos - start < 10:
                kinds[start : pos - 1] = bytes((MORE,)) * (pos - 1 - start)
                kinds[pos - 1] = LAST
        elif wire_type == 1 or wire_type == 5:
            width = 8 if wire_type == 1 else 4
            if pos + width > end:
                return None
            kinds[pos : pos + width] = bytes((FREE,)) * width
            pos += width
        elif wire_type == 2:
            length, pos = _varint(metadata, pos)
            if pos < 0 or length > end - pos:
                return None
            pos += length  # the length and the content stay SAME
        else:
            return None
    return bytes(kinds)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` and the offset after it; (-1, -1) if it is cut short or
    longer than ten bytes."""
    value = shift = 0
    end = min(len(data), pos + 10)
    while pos < end:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7
    return -1, -1
