"""The frame codec on bytes alone: no sockets."""

from __future__ import annotations

import struct

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
