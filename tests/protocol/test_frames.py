"""The frame codec on bytes alone: no sockets."""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from magnetar.protocol import ChecksumMismatch, FrameDecoder, FrameTooLarge, MalformedFrame
from magnetar.protocol.frames import (
    build_entry,
    encode_command,
    encode_command_with_body,
    encode_payload_command,
    parse_metadata,
    parse_payload,
)
from magnetar.protocol.pb import BaseCommand, pb


def ping() -> BaseCommand:
    return BaseCommand(type=BaseCommand.PING, ping=pb.CommandPing())


def send_frame(payload: bytes = b"hello") -> bytes:
    cmd = BaseCommand(type=BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=7))
    md = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=1234)
    return encode_payload_command(cmd, md.SerializeToString(), payload)


def test_simple_command_round_trip() -> None:
    frames = FrameDecoder().feed(encode_command(ping()))
    assert len(frames) == 1
    assert frames[0].command.type == BaseCommand.PING
    assert frames[0].body == b""


def test_frames_cut_from_a_stream_fed_byte_by_byte() -> None:
    data = encode_command(ping()) + send_frame() + encode_command(ping())
    decoder = FrameDecoder()
    frames = []
    for i in range(len(data)):
        frames.extend(decoder.feed(data[i : i + 1]))
    assert [f.command.type for f in frames] == [
        BaseCommand.PING,
        BaseCommand.SEND,
        BaseCommand.PING,
    ]
    assert decoder.buffered == 0


def test_payload_section_parses_and_checks_crc() -> None:
    frame = FrameDecoder().feed(send_frame(b"payload!"))[0]
    section = parse_payload(frame.body)
    assert section.payload == b"payload!"
    assert section.has_checksum
    metadata = parse_metadata(section)
    assert metadata.producer_name == "p"
    assert metadata.sequence_id == 7


def test_corrupted_payload_fails_checksum() -> None:
    body = bytearray(FrameDecoder().feed(send_frame(b"payload!"))[0].body)
    body[-1] ^= 0xFF
    with pytest.raises(ChecksumMismatch):
        parse_payload(bytes(body))


def test_declared_size_over_limit_is_rejected_before_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLarge, match="over the limit"):
        decoder.feed(struct.pack(">I", 10_000_000))
    assert decoder.buffered == 0  # a broken stream is dropped, not kept


def test_frames_before_a_broken_one_come_out_and_the_error_follows() -> None:
    decoder = FrameDecoder()
    good = send_frame(b"first") + send_frame(b"second")
    frames = decoder.feed(good + struct.pack(">II", 6, 50) + b"\x00\x00" + send_frame(b"after"))
    assert [f.body.endswith(b"first") for f in frames] == [True, False]
    assert frames[1].body.endswith(b"second")
    assert isinstance(decoder.failure, MalformedFrame)
    with pytest.raises(MalformedFrame):
        decoder.feed(send_frame(b"later"))


def test_command_size_larger_than_frame_is_malformed() -> None:
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(struct.pack(">II", 6, 50) + b"\x00\x00")


def test_garbage_command_bytes_are_malformed() -> None:
    junk = b"\xff\xff\xff\xff"
    with pytest.raises(MalformedFrame):
        FrameDecoder().feed(struct.pack(">II", 4 + len(junk), len(junk)) + junk)


def test_unknown_command_type_is_reported_not_fatal() -> None:
    # type 50 (NEW_TXN) is a real Pulsar command magnetar does not implement
    raw = b"\x08\x32"
    data = struct.pack(">II", 4 + len(raw), len(raw)) + raw + encode_command(ping())
    frames = FrameDecoder().feed(data)
    assert frames[0].unknown_type == 50
    assert frames[1].command.type == BaseCommand.PING


def test_missing_required_field_is_malformed() -> None:
    cmd = BaseCommand(type=BaseCommand.SEND)
    cmd.send.SetInParent()  # producer_id and sequence_id missing
    raw = cmd.SerializePartialToString()
    with pytest.raises(MalformedFrame, match="required"):
        FrameDecoder().feed(struct.pack(">II", 4 + len(raw), len(raw)) + raw)


def test_command_with_raw_body_keeps_the_body() -> None:
    ack = BaseCommand(
        type=BaseCommand.ACK,
        ack=pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, reply_to_client="p"),
    )
    frame = FrameDecoder().feed(encode_command_with_body(ack, b"the reply"))[0]
    assert frame.command.ack.reply_to_client == "p"
    assert frame.body == b"the reply"


def test_build_entry_matches_payload_command_body() -> None:
    md = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1).SerializeToString()
    entry = build_entry(md, b"x")
    assert entry[:2] == b"\x0e\x01"
    assert parse_payload(entry).payload == b"x"


# ---------------------------------------------------------------- large frames in pieces


def _cuts(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` in pieces of ``sizes`` (repeated), as reads would bring it."""
    pieces, pos, i = [], 0, 0
    while pos < len(data):
        pieces.append(data[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return pieces


@pytest.mark.parametrize(
    "sizes",
    [[65536], [65536, 44540], [7, 65536], [3], [9, 100_000], [20_000, 1, 2, 70_000], [300_000]],
)
def test_large_frames_in_pieces_come_out_whole_and_in_order(sizes: list[int]) -> None:
    big = [send_frame(bytes([i]) * (40_000 + 30_000 * i)) for i in range(4)]
    stream = big[0] + encode_command(ping()) + big[1] + big[2] + send_frame(b"small") + big[3]
    decoder = FrameDecoder()
    frames = []
    for piece in _cuts(stream, sizes):
        frames += decoder.feed(piece)
        # What it holds is what came of the frame it has not finished, never more.
        assert decoder.buffered < 4 + max(len(b) for b in big)
    assert [f.command.type for f in frames] == [BaseCommand.SEND, BaseCommand.PING] + [
        BaseCommand.SEND
    ] * 4
    sends = [f for f in frames if f.command.type == BaseCommand.SEND]
    expected = [big[0], big[1], big[2], send_frame(b"small"), big[3]]
    for frame, whole in zip(sends, expected, strict=True):
        assert type(frame.body) is bytes
        assert frame.body == FrameDecoder().feed(whole)[0].body
        assert parse_payload(frame.body).has_checksum  # the CRC still holds
    assert decoder.buffered == 0 and decoder.partial_size is None


def test_a_large_partial_frame_reports_its_size_and_what_came() -> None:
    frame = send_frame(b"z" * 100_000)
    decoder = FrameDecoder()
    assert decoder.feed(encode_command(ping()) + frame[:30_000])[0].command.type == BaseCommand.PING
    assert decoder.partial_size == len(frame)
    assert decoder.buffered == 30_000
    assert decoder.feed(frame[30_000:50_000]) == []
    assert decoder.buffered == 50_000
    (whole,) = decoder.feed(frame[50_000:])
    assert parse_payload(whole.body).payload == b"z" * 100_000
    assert decoder.buffered == 0 and decoder.partial_size is None


def test_a_large_frame_whose_command_size_does_not_fit_is_malformed_when_whole() -> None:
    decoder = FrameDecoder()
    bad = struct.pack(">II", 50_000, 60_000) + b"\x00" * (50_000 - 4)
    assert decoder.feed(bad[:20_000]) == []
    with pytest.raises(MalformedFrame, match="does not fit"):
        decoder.feed(bad[20_000:])
    assert decoder.buffered == 0  # a broken stream is dropped, not kept


def test_a_large_frame_is_joined_once_not_copied_as_it_grows() -> None:
    # The pieces of a 1 MB frame are held as they came and its body is made once at the
    # end: the decoder's own allocations peak at about the body. (Growing a buffer with
    # each piece and then copying the body out of it peaked at twice that and more.)
    frame = send_frame(b"q" * 1_000_000)
    pieces = _cuts(frame, [65536])
    decoder = FrameDecoder()
    tracemalloc.start()
    try:
        frames = []
        for piece in pieces:
            frames += decoder.feed(piece)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(frames) == 1 and len(frames[0].body) > 1_000_000
    assert peak < 1.3 * len(frame)


def test_a_large_partial_frame_pins_at_most_twice_what_it_counts() -> None:
    # Its first piece at the end of a large read is copied rather than viewed (a view
    # would hold the whole read), and bytearray pieces are copied (a view would stop
    # their owner from resizing them).
    frame = send_frame(b"v" * 60_000)
    read = send_frame(b"w" * 200_000) + frame[:20_000]
    decoder = FrameDecoder()
    assert len(decoder.feed(read)) == 1
    assert decoder.buffered == 20_000
    del read
    reused = bytearray(frame[20_000:40_000])
    assert decoder.feed(reused) == []
    reused.clear()  # no BufferError: the decoder holds no view of it
    (whole,) = decoder.feed(frame[40_000:])
    assert parse_payload(whole.body).payload == b"v" * 60_000
