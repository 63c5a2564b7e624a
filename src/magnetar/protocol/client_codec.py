"""Hand-written codecs for the client's hot paths (SEND, FLOW, metadata, MESSAGE bodies).

Building a protobuf object per message costs more than writing the few bytes
directly; these functions produce exactly what ``SerializeToString`` would for
the same fields (fields in number order), which tests check.  Sans-IO: bytes in,
bytes out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from google.protobuf.message import DecodeError

# split_batch is protocol.batch's (one splitter); kept importable from here.
from magnetar.protocol.batch import split_batch as split_batch
from magnetar.protocol.errors import ChecksumMismatch, FrameTooLarge, MalformedFrame
from magnetar.protocol.frames import MAGIC_CRC32C, crc32c
from magnetar.protocol.pb import BaseCommand
from magnetar.protocol.varint import varint

_TWO_U32 = struct.Struct(">II")
_U32 = struct.Struct(">I")
_MAGIC_CRC = struct.Struct(">HI")


def _ld(tag: bytes, data: bytes) -> bytes:
    return tag + varint(len(data)) + data


# Encoded (tag, key, value) triples: an application sends the same few properties
# over and over (a PIP-371 request's timeout, a content type), so each is encoded
# once; the table is emptied when it fills (values that never repeat).
_KV_CACHE: dict[tuple[bytes, str, str], bytes] = {}
_KV_CACHE_MAX = 4096


def _encode_key_value(tag: bytes, key: str, value: str) -> bytes:
    kb = key.encode()
    vb = value.encode()
    inner = b"\x0a" + varint(len(kb)) + kb + b"\x12" + varint(len(vb)) + vb
    encoded = tag + varint(len(inner)) + inner
    if len(_KV_CACHE) >= _KV_CACHE_MAX:
        _KV_CACHE.clear()
    _KV_CACHE[(tag, key, value)] = encoded
    return encoded


def encode_key_values(tag: bytes, properties: Mapping[str, str]) -> bytes:
    cached = _KV_CACHE.get
    parts = []
    for key, value in properties.items():
        encoded = cached((tag, key, value))
        parts.append(encoded if encoded is not None else _encode_key_value(tag, key, value))
    return parts[0] if len(parts) == 1 else b"".join(parts)


def encode_message_metadata(
    producer_name: bytes,
    sequence_id: int,
    publish_time: int,
    *,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    compression: int = 0,
    uncompressed_size: int = 0,
    num_messages_in_batch: int | None = None,
    event_time: int = 0,
    schema_version: bytes | None = None,
    ordering_key: bytes | None = None,
    deliver_at_time: int | None = None,
    highest_sequence_id: int = 0,
    null_value: bool = False,
) -> bytes:
    """A ``MessageMetadata`` (``producer_name`` already UTF-8 encoded)."""
    out = [
        b"\x0a",
        varint(len(producer_name)),
        producer_name,
        b"\x10",
        varint(sequence_id),
        b"\x18",
        varint(publish_time),
    ]
    if properties:
        out.append(encode_key_values(b"\x22", properties))
    if partition_key is not None:
        out.append(_ld(b"\x32", partition_key.encode()))
    if compression:
        out.append(b"\x40" + varint(compression))
        out.append(b"\x48" + varint(uncompressed_size))
    if num_messages_in_batch is not None:
        out.append(b"\x58" + varint(num_messages_in_batch))
    if event_time:
        out.append(b"\x60" + varint(event_time))
    if schema_version is not None:
        out.append(_ld(b"\x82\x01", schema_version))
    if ordering_key is not None:
        out.append(_ld(b"\x92\x01", ordering_key))
    if deliver_at_time is not None:
        out.append(b"\x98\x01" + varint(deliver_at_time))
    if highest_sequence_id:
        out.append(b"\xc0\x01" + varint(highest_sequence_id))
    if null_value:
        out.append(b"\xc8\x01\x01")
    return b"".join(out)


def encode_single_metadata(
    payload_size: int,
    *,
    properties: Mapping[str, str] | None = None,
    partition_key: str | None = None,
    event_time: int = 0,
    ordering_key: bytes | None = None,
    sequence_id: int | None = None,
    null_value: bool = False,
) -> bytes:
    """A ``SingleMessageMetadata`` for one message of a batch."""
    out = []
    if properties:
        out.append(encode_key_values(b"\x0a", properties))
    if partition_key is not None:
        out.append(_ld(b"\x12", partition_key.encode()))
    out.append(b"\x18" + varint(payload_size))
    if event_time:
        out.append(b"\x28" + varint(event_time))
    if ordering_key is not None:
        out.append(_ld(b"\x3a", ordering_key))
    if sequence_id is not None:
        out.append(b"\x40" + varint(sequence_id))
    if null_value:
        out.append(b"\x48\x01")
    return b"".join(out)


def encode_send(
    producer_id: int,
    sequence_id: int,
    num_messages: int,
    highest_sequence_id: int,
    metadata: bytes,
    payload: bytes,
) -> bytes:
    """A whole SEND frame: command, magic, CRC32C, metadata size, metadata, payload."""
    send = b"\x08" + varint(producer_id) + b"\x10" + varint(sequence_id)
    if num_messages != 1:
        send += b"\x18" + varint(num_messages)
    if highest_sequence_id:
        send += b"\x30" + varint(highest_sequence_id)
    cmd = b"\x08\x06\x32" + varint(len(send)) + send
    tail = _U32.pack(len(metadata)) + metadata + payload
    head = _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(tail))
    total = 4 + len(cmd) + 6 + len(tail)
    return b"".join((_TWO_U32.pack(total, len(cmd)), cmd, head, tail))


_U64 = (1 << 64) - 1


def encode_reply_ack(
    consumer_id: int,
    ledger_id: int,
    entry_id: int,
    batch_index: int,
    batch_size: int,
    ack_set: list[int] | None,
    request_id: int,
    requester: bytes,
    is_error: bool,
    body: bytes,
) -> bytes:
    """A whole PIP-371 ACK frame: an individual ack of one message with a request id,
    ``reply_to_client`` = ``requester`` (UTF-8; empty: the broker finds the requester)
    and ``reply_is_error`` when set, the reply ``body`` after the command. The bytes of
    ``BaseCommand{type=ACK, ack=...}.SerializeToString()`` (``batch_index`` -1 and
    ``batch_size`` 0 left out, as ``MessageId.to_pb`` leaves them)."""
    mid = b"\x08" + varint(ledger_id & _U64) + b"\x10" + varint(entry_id & _U64)
    if batch_index >= 0:
        mid += b"\x20" + varint(batch_index)
    if ack_set:
        mid += b"".join([b"\x28" + varint(word) for word in ack_set])
    if batch_size > 0:
        mid += b"\x30" + varint(batch_size)
    ack = b"".join((
        b"\x08", varint(consumer_id), b"\x10\x00\x1a", varint(len(mid)), mid,
        b"\x40", varint(request_id), b"\x4a", varint(len(requester)), requester,
    ))
    if is_error:
        ack += b"\xc0\x3e\x01"  # field 1000, varint 1
    cmd = b"\x08\x0a\x52" + varint(len(ack)) + ack
    return b"".join((_TWO_U32.pack(len(cmd) + 4 + len(body), len(cmd)), cmd, body))


def encode_flow(consumer_id: int, permits: int) -> bytes:
    inner = b"\x08" + varint(consumer_id) + b"\x10" + varint(permits)
    cmd = b"\x08\x0b\x5a" + varint(len(inner)) + inner
    return _TWO_U32.pack(len(cmd) + 4, len(cmd)) + cmd


def _empty_command(type_and_field: bytes) -> bytes:
    return _TWO_U32.pack(len(type_and_field) + 4, len(type_and_field)) + type_and_field


# BaseCommand{type=PING(18), ping={}} and BaseCommand{type=PONG(19), pong={}}
PING_FRAME = _empty_command(b"\x08\x12\x92\x01\x00")
PONG_FRAME = _empty_command(b"\x08\x13\x9a\x01\x00")


def split_entry(body: bytes, verify_checksum: bool = True) -> tuple[bytes, bytes]:
    """``(metadata bytes, payload bytes)`` of a MESSAGE body, checking its CRC32C.

    The same cut as :func:`magnetar.protocol.frames.parse_payload`, without the
    intermediate objects (this runs once per received entry).
    """
    length = len(body)
    pos = 0
    if body.startswith(b"\x0e\x02"):  # broker entry metadata first: skip it
        if length < 6:
            raise MalformedFrame("truncated broker entry metadata")
        pos = 6 + _U32.unpack_from(body, 2)[0]
    if length - pos >= 6:
        magic, expected = _MAGIC_CRC.unpack_from(body, pos)
        if magic == MAGIC_CRC32C:
            pos += 6
            if verify_checksum:
                # Up to a few KiB a copy costs less than a memoryview and its slice.
                section = body[pos:] if length - pos <= 4096 else memoryview(body)[pos:]
                if crc32c(section) != expected:
                    raise ChecksumMismatch("payload checksum does not match its frame")
    elif body.startswith(b"\x0e\x01", pos):
        raise MalformedFrame("payload section too short for its checksum")
    if length - pos < 4:
        raise MalformedFrame("payload section too short for its metadata size")
    size = _U32.unpack_from(body, pos)[0]
    pos += 4
    end = pos + size
    if end > length:
        raise MalformedFrame(f"metadata size {size} runs past the end of the frame")
    return body[pos:end], body[end:]


_parse_base_command = BaseCommand.FromString


class TruncatedBody(bytes):
    """The head of a MESSAGE body over the frame limit (the rest was dropped unread):
    its command and, usually, its metadata, so the consumer can acknowledge the entry
    and give back the permits it was charged instead of receiving it again forever."""

    __slots__ = ()


class ClientFrameDecoder:
    """Cuts frames out of the byte stream, like :class:`~magnetar.protocol.frames.FrameDecoder`.

    Tuned for the client's receive path: it works on the incoming ``bytes`` when
    nothing is buffered (one copy per frame instead of two), buffers a partial
    frame until all of it is there (linear in its size), and leaves the
    required-field check to the code that reads each command (a full
    ``IsInitialized`` walk costs more than the parse).  Yields ``(command, body)``.

    A MESSAGE frame over ``max_frame_size`` (an entry stored before the broker
    judged whole frames, or under a larger limit) keeps the stream: its first
    ``max_frame_size`` bytes are yielded with the body as a :class:`TruncatedBody`
    and the rest is skipped as it arrives. Any other frame over the limit raises
    :class:`FrameTooLarge`.
    """

    __slots__ = ("_need", "_partial", "_skip", "max_frame_size")

    def __init__(self, max_frame_size: int) -> None:
        self._partial = bytearray()
        self._need = 0
        self._skip = 0  # bytes of an oversized frame still to drop
        self.max_frame_size = max_frame_size

    @property
    def buffered(self) -> int:
        return len(self._partial)

    def feed(self, data: bytes) -> list[tuple[BaseCommand, bytes]]:
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return []
            data = data[self._skip :]
            self._skip = 0
        if self._partial:
            self._partial += data
            if len(self._partial) < self._need:
                return []
            buf = bytes(self._partial)
            self._partial = bytearray()
        else:
            buf = data
        frames: list[tuple[BaseCommand, bytes]] = []
        pos = 0
        end = len(buf)
        unpack = _TWO_U32.unpack_from
        limit = self.max_frame_size
        need = 8
        while end - pos >= 4:
            total = _U32.unpack_from(buf, pos)[0]
            if total > limit:
                if end - pos < limit:
                    need = limit  # the head of it, kept
                    break
                frames.append(_oversized(buf, pos, total, limit))
                taken = min(end - pos, total + 4)
                self._skip = total + 4 - taken
                pos += taken
                continue
            if total < 4:
                raise MalformedFrame(f"frame declares {total} bytes, too small for a command")
            frame_end = pos + 4 + total
            if frame_end > end:
                need = 4 + total
                break
            cmd_size = unpack(buf, pos)[1]
            if cmd_size > total - 4 or cmd_size == 0:
                raise MalformedFrame(
                    f"command size {cmd_size} does not fit in a frame of {total} bytes"
                )
            body_start = pos + 8 + cmd_size
            try:
                command = _parse_base_command(buf[pos + 8 : body_start])
            except DecodeError as exc:
                raise MalformedFrame(f"command does not parse: {exc}") from None
            if not command.HasField("type"):
                raise MalformedFrame("command without a type")
            frames.append((command, buf[body_start:frame_end] if frame_end > body_start else b""))
            pos = frame_end
        if pos < end:
            self._partial = bytearray(memoryview(buf)[pos:])
            self._need = need
        return frames


def _oversized(buf: bytes, pos: int, total: int, limit: int) -> tuple[BaseCommand, bytes]:
    """The command and the head of the body of a MESSAGE frame over the limit, from
    its first ``limit`` bytes; FrameTooLarge for any other frame."""
    too_large = FrameTooLarge(f"frame declares {total} bytes, over the limit of {limit} bytes")
    cmd_size = _TWO_U32.unpack_from(buf, pos)[1]
    if cmd_size == 0 or cmd_size > limit - 8:
        raise too_large
    try:
        command = _parse_base_command(buf[pos + 8 : pos + 8 + cmd_size])
    except DecodeError:
        raise too_large from None
    if command.type != BaseCommand.MESSAGE:
        raise too_large
    return command, TruncatedBody(buf[pos + 8 + cmd_size : pos + limit])
