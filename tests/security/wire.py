"""A blocking protocol peer that authenticates with a token, for the authorization
tests that need exact frames; and what an answer says (its request and error)."""

from __future__ import annotations

import socket
import time

from magnetar.protocol.frames import Frame, FrameDecoder, encode_command, encode_command_with_body
from magnetar.protocol.pb import BaseCommand, pb

T = BaseCommand.Type

# Answers that carry their request id (and maybe an error) in their own body.
_ANSWERS = {
    T.SUCCESS: ("success", None),
    T.ERROR: ("error", "error"),
    T.PRODUCER_SUCCESS: ("producer_success", None),
    T.LOOKUP_RESPONSE: ("lookupTopicResponse", "error"),
    T.PARTITIONED_METADATA_RESPONSE: ("partitionMetadataResponse", "error"),
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: ("getTopicsOfNamespaceResponse", None),
    T.GET_SCHEMA_RESPONSE: ("getSchemaResponse", "error_code"),
    T.GET_OR_CREATE_SCHEMA_RESPONSE: ("getOrCreateSchemaResponse", "error_code"),
    T.CONSUMER_STATS_RESPONSE: ("consumerStatsResponse", "error_code"),
    T.GET_LAST_MESSAGE_ID_RESPONSE: ("getLastMessageIdResponse", None),
    T.ACK_RESPONSE: ("ackResponse", "error"),
}


def answer_of(frame: Frame) -> tuple[int, int | None] | None:
    """(request id, error code or None) of an answer to a request; None for a frame
    that answers none."""
    spec = _ANSWERS.get(frame.command.type)
    if spec is None:
        return None
    body = getattr(frame.command, spec[0])
    error = spec[1]
    code = getattr(body, error) if error is not None and body.HasField(error) else None
    return int(body.request_id), code


class TokenPeer:
    """One connection, authenticated as the role of ``token``."""

    def __init__(self, port: int, token: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.decoder = FrameDecoder()
        self.backlog: list[Frame] = []
        self.send(
            BaseCommand(
                type=T.CONNECT,
                connect=pb.CommandConnect(
                    client_version="authz-walk",
                    protocol_version=21,
                    auth_method_name="token",
                    auth_data=token.encode(),
                    feature_flags=pb.FeatureFlags(supports_request_reply=True),
                ),
            )
        )
        first = self.next_frame()
        if first.command.type != T.CONNECTED:
            raise ConnectionError(f"not connected: {first.command}")

    def send(self, command: BaseCommand, body: bytes | None = None) -> None:
        data = encode_command(command) if body is None else encode_command_with_body(command, body)
        self.sock.sendall(data)

    def next_frame(self, timeout: float = 10.0) -> Frame:
        self.sock.settimeout(timeout)
        while not self.backlog:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.backlog.extend(self.decoder.feed(data))
        return self.backlog.pop(0)

    def request(self, command: BaseCommand, request_id: int) -> Frame:
        """Send ``command`` and return the answer to ``request_id``."""
        self.send(command)
        while True:
            frame = self.next_frame()
            answer = answer_of(frame)
            if answer is not None and answer[0] == request_id:
                return frame

    def exchange(
        self, frames: list[bytes], wanted: set[int], timeout: float = 10.0
    ) -> tuple[list[Frame], bool]:
        """Send ``frames`` and a PING; read until the PONG has come and every request
        id of ``wanted`` is answered, or the broker closes the connection. Returns the
        frames read (PINGs answered, the PONG left out) and whether it closed."""
        self.sock.sendall(b"".join(frames) + encode_command(BaseCommand(type=T.PING,
                                                                         ping=pb.CommandPing())))
        frames_read: list[Frame] = []
        ponged = False
        deadline = time.monotonic() + timeout
        while not ponged or wanted - {a[0] for f in frames_read if (a := answer_of(f))}:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                frame = self.next_frame(left)
            except (ConnectionError, OSError):
                return frames_read, True
            kind = frame.command.type
            if kind == T.PONG:
                ponged = True
            elif kind == T.PING:
                self.send(BaseCommand(type=T.PONG, pong=pb.CommandPong()))
            else:
                frames_read.append(frame)
        return frames_read, False

    def close(self) -> None:
        self.sock.close()
