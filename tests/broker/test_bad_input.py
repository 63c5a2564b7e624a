"""Raw sockets sending bad input: the offender gets an error or is closed, everyone
else keeps working, stored data is untouched."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

import pulsar
import pytest

from magnetar.protocol.frames import FrameDecoder, encode_command, encode_payload_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer


def raw_connect(broker: EmbeddedBroker) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    return sock


def handshake(sock: socket.socket) -> None:
    sock.sendall(
        encode_command(
            BaseCommand(
                type=BaseCommand.CONNECT,
                connect=pb.CommandConnect(client_version="raw-test", protocol_version=21),
            )
        )
    )
    frames = read_frames(sock, 1)
    assert frames[0].command.type == BaseCommand.CONNECTED


def read_frames(sock: socket.socket, count: int) -> list:
    decoder = FrameDecoder()
    frames: list = []
    while len(frames) < count:
        data = sock.recv(65536)
        if not data:
            break
        frames.extend(decoder.feed(data))
    return frames


def read_until_closed(sock: socket.socket) -> list:
    decoder = FrameDecoder()
    frames: list = []
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        frames.extend(decoder.feed(data))
    return frames


@pytest.fixture
def stored_topic(broker: EmbeddedBroker, client: pulsar.Client, topic: str) -> list[bytes]:
    """A topic with messages already stored, to check nothing is harmed."""
    producer = client.create_producer(topic)
    sent = [f"kept-{i}".encode() for i in range(20)]
    for value in sent:
        producer.send(value)
    producer.close()
    return sent


def assert_topic_intact(client: pulsar.Client, topic: str, expected: list[bytes]) -> None:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = [reader.read_next(5000).data() for _ in expected]
    assert got == expected
    reader.close()
    producer = client.create_producer(topic)
    producer.send(b"after")
    producer.close()


def errors(frames: list) -> list[str]:
    return [f.command.error.message for f in frames if f.command.type == BaseCommand.ERROR]


def test_garbage_bytes_close_the_connection_only(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, stored_topic: list[bytes]
) -> None:
    sock = raw_connect(broker)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 4)
    frames = read_until_closed(sock)
    assert errors(frames), "the broker should say why it hangs up"
    assert "frame" in errors(frames)[0]
    assert_topic_intact(client, topic, stored_topic)


def test_huge_declared_size_is_refused_without_buffering(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, stored_topic: list[bytes]
) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    sock.sendall(struct.pack(">I", 2_000_000_000))
    frames = read_until_closed(sock)
    assert any("too large" in e for e in errors(frames))
    assert_topic_intact(client, topic, stored_topic)


def test_truncated_frame_then_disconnect(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, stored_topic: list[bytes]
) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    whole = encode_command(BaseCommand(type=BaseCommand.PING, ping=pb.CommandPing()))
    sock.sendall(whole[:-1])
    sock.close()
    assert_topic_intact(client, topic, stored_topic)


def test_command_before_connect_is_refused(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, stored_topic: list[bytes]
) -> None:
    sock = raw_connect(broker)
    sock.sendall(
        encode_command(
            BaseCommand(
                type=BaseCommand.LOOKUP,
                lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=1),
            )
        )
    )
    frames = read_until_closed(sock)
    assert any("before CONNECT" in e for e in errors(frames))
    assert_topic_intact(client, topic, stored_topic)


def test_unknown_command_gets_an_error_and_the_connection_lives(
    broker: EmbeddedBroker, topic: str
) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    raw = b"\x08\x32\x92\x03\x02\x08\x01"  # NEW_TXN (50): not implemented by magnetar
    sock.sendall(struct.pack(">II", 4 + len(raw), len(raw)) + raw)
    sock.sendall(encode_command(BaseCommand(type=BaseCommand.PING, ping=pb.CommandPing())))
    frames = read_frames(sock, 2)
    assert "unsupported command type 50" in errors(frames)[0]
    assert frames[1].command.type == BaseCommand.PONG
    sock.close()


def test_unknown_producer_and_consumer_ids_get_errors(broker: EmbeddedBroker) -> None:
    sock = raw_connect(broker)
    handshake(sock)
    send = BaseCommand(type=BaseCommand.SEND, send=pb.CommandSend(producer_id=99, sequence_id=1))
    md = pb.MessageMetadata(producer_name="x", sequence_id=1, publish_time=1)
    sock.sendall(encode_payload_command(send, md.SerializeToString(), b"v"))
    seek = BaseCommand(
        type=BaseCommand.SEEK,
        seek=pb.CommandSeek(consumer_id=77, request_id=5, message_publish_time=0),
    )
    sock.sendall(encode_command(seek))
    frames = read_frames(sock, 2)
    assert frames[0].command.type == BaseCommand.SEND_ERROR
    assert "producer id 99" in frames[0].command.send_error.message
    assert frames[1].command.type == BaseCommand.ERROR
    assert frames[1].command.error.request_id == 5
    assert frames[1].command.error.error == pb.ConsumerNotFound
    sock.close()


def test_wrong_topic_names_get_invalid_topic_name(
    broker: EmbeddedBroker, client: pulsar.Client
) -> None:
    for bad in ("ftp://public/default/x", "persistent://public/x", "a/b"):
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(bad)
    producer = client.create_producer("a-good-one")
    producer.send(b"ok")


def test_oversized_message_gets_a_clear_send_error(
    client_factory: Callable[..., pulsar.Client], tmp_path
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, max_message_size=64 * 1024) as small:
        client = client_factory(small.service_url)
        producer = client.create_producer("big")
        producer.send(b"x" * 1000)
        with pytest.raises(pulsar.MessageTooBig):
            producer.send(b"x" * (200 * 1024))
        producer.send(b"still fine")
        sock = raw_connect(small)
        handshake(sock)
        register = BaseCommand(
            type=BaseCommand.PRODUCER,
            producer=pb.CommandProducer(topic="big-raw", producer_id=1, request_id=1),
        )
        sock.sendall(encode_command(register))
        assert read_frames(sock, 1)[0].command.type == BaseCommand.PRODUCER_SUCCESS
        send = BaseCommand(type=BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=0))
        md = pb.MessageMetadata(producer_name="x", sequence_id=0, publish_time=1)
        sock.sendall(encode_payload_command(send, md.SerializeToString(), b"y" * (65 * 1024)))
        reply = read_frames(sock, 1)[0].command
        assert reply.type == BaseCommand.SEND_ERROR
        assert "exceeds the maximum message size" in reply.send_error.message
        sock.close()


def test_frames_before_garbage_in_the_same_write_are_answered(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, stored_topic: list[bytes]
) -> None:
    peer = RawPeer(broker.port)
    lookup = BaseCommand(
        type=BaseCommand.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic=topic, request_id=7)
    )
    peer.sock.sendall(encode_command(lookup) + b"GET / HTTP/1.1\r\n\r\n")
    frames = read_until_closed(peer.sock)
    kinds = [f.command.type for f in frames]
    assert kinds == [BaseCommand.LOOKUP_RESPONSE, BaseCommand.ERROR], kinds
    assert frames[0].command.lookupTopicResponse.request_id == 7
    assert "frame" in errors(frames)[0]
    assert_topic_intact(client, topic, stored_topic)
