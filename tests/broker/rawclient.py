"""A minimal blocking protocol peer for tests that need exact control of frames."""

from __future__ import annotations

import socket

from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    encode_command,
    encode_command_with_body,
    encode_payload_command,
)
from magnetar.protocol.pb import BaseCommand, pb


class RawPeer:
    def __init__(self, port: int, request_reply: bool = True) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.decoder = FrameDecoder()
        self.backlog: list[Frame] = []
        flags = pb.FeatureFlags(supports_request_reply=request_reply)
        self.send(
            BaseCommand(
                type=BaseCommand.CONNECT,
                connect=pb.CommandConnect(
                    client_version="raw", protocol_version=21, feature_flags=flags
                ),
            )
        )
        self.connected = self.expect(BaseCommand.CONNECTED).command.connected

    def send(self, command: BaseCommand, body: bytes | None = None) -> None:
        data = encode_command(command) if body is None else encode_command_with_body(command, body)
        self.sock.sendall(data)

    def next_frame(self, timeout: float = 5.0) -> Frame:
        self.sock.settimeout(timeout)
        while not self.backlog:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("broker closed the connection")
            self.backlog.extend(self.decoder.feed(data))
        return self.backlog.pop(0)

    def expect(self, kind: int, timeout: float = 5.0) -> Frame:
        """The next frame of ``kind``, skipping PINGs (answered) and other noise."""
        while True:
            frame = self.next_frame(timeout)
            if frame.command.type == kind:
                return frame
            if frame.command.type == BaseCommand.PING:
                self.send(BaseCommand(type=BaseCommand.PONG, pong=pb.CommandPong()))

    def nothing_of(self, kind: int, wait: float = 0.5) -> bool:
        try:
            self.expect(kind, timeout=wait)
        except TimeoutError:
            return True
        return False

    def producer(self, topic: str, producer_id: int = 1, name: str | None = None) -> str:
        cmd = pb.CommandProducer(topic=topic, producer_id=producer_id, request_id=producer_id)
        if name:
            cmd.producer_name = name
        self.send(BaseCommand(type=BaseCommand.PRODUCER, producer=cmd))
        return self.expect(BaseCommand.PRODUCER_SUCCESS).command.producer_success.producer_name

    def publish(self, producer_id: int, name: str, seq: int, payload: bytes) -> pb.MessageIdData:
        send = BaseCommand(
            type=BaseCommand.SEND, send=pb.CommandSend(producer_id=producer_id, sequence_id=seq)
        )
        md = pb.MessageMetadata(producer_name=name, sequence_id=seq, publish_time=1)
        self.sock.sendall(encode_payload_command(send, md.SerializeToString(), payload))
        return self.expect(BaseCommand.SEND_RECEIPT).command.send_receipt.message_id

    def subscribe(self, topic: str, sub: str, consumer_id: int = 1, permits: int = 100) -> None:
        self.send(
            BaseCommand(
                type=BaseCommand.SUBSCRIBE,
                subscribe=pb.CommandSubscribe(
                    topic=topic,
                    subscription=sub,
                    subType=pb.CommandSubscribe.Shared,
                    consumer_id=consumer_id,
                    request_id=1000 + consumer_id,
                    initialPosition=pb.CommandSubscribe.Earliest,
                ),
            )
        )
        self.expect(BaseCommand.SUCCESS)
        self.send(
            BaseCommand(
                type=BaseCommand.FLOW,
                flow=pb.CommandFlow(consumer_id=consumer_id, messagePermits=permits),
            )
        )

    def close(self) -> None:
        self.sock.close()
