"""Pulsar frame format: cutting frames out of a byte stream and writing them.

A frame is ``[total_size u32][command_size u32][BaseCommand]`` optionally followed
by a body.  For SEND and MESSAGE the body is the payload section
``[0x0e01 u16][crc32c u32][metadata_size u32][MessageMetadata][payload]`` (this
section, from the magic number on, is what the broker stores as an entry).  For
the PIP-371 ACK and REQUEST_RECEIPT the body is the raw reply bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c as _crc32c
from google.protobuf.message import DecodeError

from magnetar.protocol.command_checks import command_problem
from magnetar.protocol.errors import (
    ChecksumMismatch,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    UnknownCommand,
)
from magnetar.protocol.pb import BaseCommand, pb

MAGIC_CRC32C = 0x0E01
MAGIC_BROKER_ENTRY_METADATA = 0x0E02
# Room for the command and metadata on top of the largest message payload,
# the same allowance Pulsar makes.
FRAME_PADDING = 10 * 1024
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

# An entry's bytes before its metadata: magic number, CRC32C, metadata size.
ENTRY_HEADER_SIZE = 10

# A partial frame of this many bytes or more (size field included) is kept as the
# pieces that came of it, and joined once whole (FrameDecoder).
LARGE_FRAME = 16 * 1024

_U32 = struct.Struct(">I")
_TWO_U32 = struct.Struct(">II")
_MAGIC_CRC = struct.Struct(">HI")

crc32c = _crc32c.crc32c


@dataclass(slots=True)
class Frame:
    """One decoded frame: the command and whatever bytes followed it.

    ``unknown_type`` is set (and ``command`` is empty) when the frame is well
    formed but carries a command type this codec does not know; the stream stays
    in sync, so the receiver can answer with an error instead of hanging up.
    """

    command: BaseCommand
    body: bytes = b""
    unknown_type: int | None = None


@dataclass(slots=True)
class PayloadSection:
    """The parts of a SEND/MESSAGE body."""

    metadata: bytes
    payload: bytes
    has_checksum: bool


# The longest MESSAGE command the broker writes before a stored entry, every field at
# its widest varint: type and field tags (6), consumer id (11), message id with
# ledger, entry and partition (2 + 33), redelivery count (6), consumer epoch (11);
# rounded up. A partly acked batch adds its ack_set: one int64 (tag and up to ten
# bytes) per 64 messages.
MESSAGE_COMMAND_MAX = 80
_ACK_SET_WORD_MAX = 11


def max_frame_size(max_message_size: int) -> int:
    """The largest frame either side accepts (the declared size, the four size bytes
    not counted), for a broker whose ``max_message_size`` this is: Pulsar's
    maxMessageSize + MESSAGE_SIZE_FRAME_PADDING, on the broker's decoder and,
    from CONNECTED's max_message_size, on the client's."""
    return max_message_size + FRAME_PADDING


def dispatch_frame_size(entry_size: int, num_messages: int = 1) -> int:
    """The declared size of the MESSAGE frame that carries a stored entry of
    ``entry_size`` bytes (from the magic number on) holding ``num_messages``
    messages, at most: what a consumer's decoder will judge against
    :func:`max_frame_size`."""
    ack_set = _ACK_SET_WORD_MAX * ((max(num_messages, 1) + 63) // 64) if num_messages > 1 else 0
    return 4 + MESSAGE_COMMAND_MAX + ack_set + entry_size


class FrameDecoder:
    """Accumulates bytes and yields whole frames.

    A declared size over ``max_frame_size`` raises :class:`FrameTooLarge` as soon
    as the four size bytes are seen, before any of the frame is buffered. A partial
    frame holds the bytes that arrived, never room for the size it declares: a peer
    that declares 5 MB and sends ten bytes costs ten bytes.

    A large frame (a batched SEND of 100 KB, say) comes in several reads. Its pieces
    are kept as they came (the reads' own bytes) and its body is joined from them
    once, when the last one is in: one copy and one allocation of the body, where
    growing a buffer with each piece and copying the body out of it made three, and
    as many fresh pages to fault in.
    """

    __slots__ = ("_buf", "_need", "_pieces", "_pieces_size", "failure", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING) -> None:
        self._buf = bytearray()
        # A large partial frame: the pieces that came of it (views of the reads), their
        # size, and the frame's full size (size field included).
        self._pieces: list[memoryview] = []
        self._pieces_size = 0
        self._need = 0
        self.max_frame_size = max_frame_size
        # The error that ended the stream after frames that preceded it were returned.
        self.failure: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held of a frame not yet complete."""
        return len(self._buf) + self._pieces_size

    @property
    def partial_size(self) -> int | None:
        """The full size (size field included) of the frame being accumulated, once
        its four size bytes are in; None when nothing or less is buffered."""
        if self._pieces:
            return self._need
        if len(self._buf) < 4:
            return None
        return int(_U32.unpack_from(self._buf, 0)[0]) + 4

    def feed(self, data: bytes) -> list[Frame]:
        """The whole frames that ``data`` completes.

        A stream that cannot be framed raises the :class:`ProtocolError` that says
        why; when good frames came before the bad one in ``data``, they are returned
        first (so their sender gets its answers) and the error is kept in
        :attr:`failure`, and raised by the next call.
        """
        if self.failure is not None:
            raise self.failure
        frames: list[Frame] = []
        try:
            self._cut(data, frames)
        except ProtocolError as exc:
            self._buf.clear()  # nothing after a broken frame can be trusted
            self._pieces = []
            self._pieces_size = 0
            if not frames:
                raise
            self.failure = exc
        return frames

    def _cut(self, data: bytes, frames: list[Frame]) -> None:
        start = 0
        if self._pieces:
            start = self._add_piece(data, frames)
            if start == len(data):
                return
        buf = self._buf
        if not buf and type(data) is bytes:
            # Nothing held: frames are sliced from ``data`` itself (one copy of each
            # body, not three), and only a partial frame at its end is held.
            pos = self._frames_in(data, frames, start)
            rest = len(data) - pos
            if rest:
                if rest >= 8 and _U32.unpack_from(data, pos)[0] + 4 >= LARGE_FRAME:
                    # A view pins the whole read: taken only when the frame is most of
                    # it, so that what is held stays within twice what is counted.
                    head = data if pos <= rest else data[pos:]
                    self._pieces = [memoryview(head)[len(head) - rest :]]
                    self._pieces_size = rest
                    self._need = _U32.unpack_from(data, pos)[0] + 4
                else:
                    buf += memoryview(data)[pos:]
            return
        buf += memoryview(data)[start:] if start else data
        pos = 0
        try:
            pos = self._frames_in(buf, frames)
        finally:
            if pos:
                del buf[:pos]

    def _add_piece(self, data: bytes, frames: list[Frame]) -> int:
        """Take ``data`` as the next piece of the large partial frame; once that is
        whole, append it to ``frames``. The offset in ``data`` after the frame (all
        of ``data`` while the frame is not whole)."""
        if type(data) is not bytes:
            data = bytes(data)  # a view would stop the caller from resizing its buffer
        pieces = self._pieces
        need = self._need - self._pieces_size  # of this frame, still to come
        if len(data) < need:
            pieces.append(memoryview(data))
            self._pieces_size += len(data)
            return len(data)
        pieces.append(memoryview(data)[:need])
        self._pieces = []
        self._pieces_size = 0
        head = pieces[0]  # at least the frame's two sizes
        (total, cmd_size) = _TWO_U32.unpack_from(head, 0)
        if cmd_size > total - 4 or cmd_size == 0:
            raise MalformedFrame(
                f"command size {cmd_size} does not fit in a frame of {total} bytes"
            )
        body_start = 8 + cmd_size
        if body_start <= len(head):
            raw = head[8:body_start].tobytes()
            pieces[0] = head[body_start:]
            body = b"".join(pieces)
        else:  # the command itself spans pieces (a peer that sends a byte at a time)
            whole = b"".join(pieces)
            raw, body = whole[8:body_start], whole[body_start:]
        try:
            frames.append(Frame(parse_command(raw), body))
        except UnknownCommand as exc:
            frames.append(Frame(BaseCommand(), b"", exc.command_type))
        return need

    def _frames_in(self, src: bytes | bytearray, frames: list[Frame], start: int = 0) -> int:
        """Append the whole frames of ``src`` from ``start`` on; the offset after them."""
        pos = start
        end = len(src)
        limit = self.max_frame_size
        view: memoryview | None = None
        try:
            while end - pos >= 4:
                (total,) = _U32.unpack_from(src, pos)
                if total > limit:
                    raise FrameTooLarge(
                        f"frame declares {total} bytes, over the limit of "
                        f"{limit} bytes"
                    )
                if total < 4:
                    raise MalformedFrame(
                        f"frame declares {total} bytes, too small to hold a command"
                    )
                if end - pos - 4 < total:
                    break
                (cmd_size,) = _U32.unpack_from(src, pos + 4)
                if cmd_size > total - 4 or cmd_size == 0:
                    raise MalformedFrame(
                        f"command size {cmd_size} does not fit in a frame of {total} bytes"
                    )
                cmd_start = pos + 8
                body_start = cmd_start + cmd_size
                frame_end = pos + 4 + total
                if type(src) is bytes:
                    raw = src[cmd_start:body_start]
                    body = src[body_start:frame_end] if frame_end > body_start else b""
                else:  # a bytearray: one copy through a view, not a bytearray and a bytes
                    if view is None:
                        view = memoryview(src)
                    raw = view[cmd_start:body_start].tobytes()
                    body = view[body_start:frame_end].tobytes() if frame_end > body_start else b""
                try:
                    frames.append(Frame(parse_command(raw), body))
                except UnknownCommand as exc:
                    frames.append(Frame(BaseCommand(), b"", exc.command_type))
                pos = frame_end
        finally:
            if view is not None:
                view.release()  # before the caller resizes the buffer
        return pos


def parse_command(data: bytes) -> BaseCommand:
    command = BaseCommand()
    try:
        command.MergeFromString(data)
    except DecodeError as exc:
        raise MalformedFrame(f"command does not parse: {exc}") from None
    if not command.HasField("type"):
        raw_type = _raw_type(data)
        if raw_type is None:
            raise MalformedFrame("command has no type")
        raise UnknownCommand(raw_type)
    if not command.IsInitialized():
        missing = ", ".join(command.FindInitializationErrors())  # type: ignore[attr-defined]
        raise MalformedFrame(
            f"command {pb.BaseCommand.Type.Name(command.type)} lacks required fields: {missing}"
        )
    problem = command_problem(command)
    if problem is not None:
        raise MalformedFrame(f"command {pb.BaseCommand.Type.Name(command.type)} {problem}")
    return command


def _raw_type(data: bytes) -> int | None:
    """Read field 1 (the command type varint) from bytes whose type did not parse."""
    if len(data) < 2 or data[0] != 0x08:
        return None
    value = shift = 0
    for byte in data[1:11]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value
    return None


def parse_payload(body: bytes | memoryview, verify_checksum: bool = True) -> PayloadSection:
    """Split a SEND/MESSAGE body into metadata and payload, checking the CRC32C."""
    metadata, payload, has_checksum = view_payload(body, verify_checksum)
    return PayloadSection(metadata, bytes(payload), has_checksum)


def view_payload(
    body: bytes | memoryview, verify_checksum: bool = True
) -> tuple[bytes, memoryview, bool]:
    """:func:`parse_payload`'s cut without a copy of the payload: the metadata bytes,
    a view of the payload in ``body`` (it runs to the end of ``body``), and whether a
    CRC32C was there (and held)."""
    view = memoryview(body)
    pos = 0
    if len(view) >= 2 and view[0] == 0x0E and view[1] == 0x02:
        # Broker entry metadata precedes the checksummed section; skip it.
        if len(view) < 6:
            raise MalformedFrame("truncated broker entry metadata")
        (size,) = _U32.unpack_from(view, 2)
        pos = 6 + size
    has_checksum = False
    if len(view) - pos >= 6 and view[pos] == 0x0E and view[pos + 1] == 0x01:
        _, expected = _MAGIC_CRC.unpack_from(view, pos)
        pos += 6
        has_checksum = True
        if verify_checksum and crc32c(view[pos:]) != expected:
            raise ChecksumMismatch("payload checksum does not match its frame")
    if len(view) - pos < 4:
        raise MalformedFrame("payload section too short for its metadata size")
    (md_size,) = _U32.unpack_from(view, pos)
    pos += 4
    if md_size > len(view) - pos:
        raise MalformedFrame(f"metadata size {md_size} runs past the end of the frame")
    return bytes(view[pos : pos + md_size]), view[pos + md_size :], has_checksum


def parse_metadata(section: PayloadSection | bytes) -> pb.MessageMetadata:
    """The MessageMetadata of a payload section (or its metadata bytes)."""
    metadata = pb.MessageMetadata()
    try:
        metadata.MergeFromString(section if isinstance(section, bytes) else section.metadata)
    except DecodeError as exc:
        raise MalformedFrame(f"message metadata does not parse: {exc}") from None
    return metadata


def build_entry(metadata: bytes, payload: bytes | memoryview) -> bytes:
    """The checksummed payload section: magic, CRC32C, metadata size, metadata, payload."""
    tail = _U32.pack(len(metadata)) + metadata + payload
    return _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c(tail)) + tail


def encode_command(command: BaseCommand) -> bytes:
    data = command.SerializeToString()
    return _TWO_U32.pack(len(data) + 4, len(data)) + data


def encode_command_with_body(command: BaseCommand, body: bytes | memoryview) -> bytes:
    """A command followed by raw bytes (a stored entry, or a PIP-371 reply body)."""
    data = command.SerializeToString()
    return b"".join((_TWO_U32.pack(len(data) + 4 + len(body), len(data)), data, body))


def encode_payload_command(command: BaseCommand, metadata: bytes, payload: bytes) -> bytes:
    return encode_command_with_body(command, build_entry(metadata, payload))
