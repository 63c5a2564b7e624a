"""A tiny scripted stand-in for a broker, for tests that need a broker to misbehave
(or to show exactly which frames the client sends)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand

T = BaseCommand.Type
Handler = Callable[[BaseCommand, asyncio.Transport], None]


class ScriptedServer(asyncio.Protocol):
    """Answers CONNECT, then hands every other command to ``handler``."""

    def __init__(
        self,
        handler: Handler,
        log: list[BaseCommand],
        frames: list[tuple[BaseCommand, bytes]] | None = None,
    ) -> None:
        self.handler = handler
        self.log = log
        self.frames = frames
        self.decoder = FrameDecoder()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        for frame in self.decoder.feed(data):
            cmd = frame.command
            self.log.append(cmd)
            if self.frames is not None:
                self.frames.append((cmd, frame.body))
            if cmd.type == T.CONNECT:
                reply = BaseCommand(type=T.CONNECTED)
                reply.connected.server_version = "scripted"
                reply.connected.protocol_version = 21
                self.transport.write(encode_command(reply))
            else:
                self.handler(cmd, self.transport)


async def serve(
    handler: Handler, frames: list[tuple[BaseCommand, bytes]] | None = None
) -> tuple[asyncio.Server, str, list[BaseCommand]]:
    """Start a scripted server; returns it, its service URL and the log of commands
    (``frames``, if given, also gets every command with the bytes after it)."""
    log: list[BaseCommand] = []
    server = await asyncio.get_running_loop().create_server(
        lambda: ScriptedServer(handler, log, frames), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    return server, f"pulsar://127.0.0.1:{port}", log


def lookup_answer(cmd: BaseCommand, url: str, kind: int, authoritative: bool) -> bytes:
    reply = BaseCommand(type=T.LOOKUP_RESPONSE)
    resp = reply.lookupTopicResponse
    resp.request_id = cmd.lookupTopic.request_id
    resp.brokerServiceUrl = url
    resp.response = kind  # type: ignore[assignment]
    resp.authoritative = authoritative
    return encode_command(reply)
