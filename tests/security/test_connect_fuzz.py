"""CONNECT's authentication fields, fuzzed: garbage, huge, empty, wrong method names,
a legacy enum, non-UTF-8 bytes where a string belongs, AUTH_RESPONSE out of turn. Each
gets an ERROR (AuthenticationError or a protocol error) and a closed connection, never
a crash: a good client is served before, between and after."""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator

import pytest

from magnetar.client import AuthenticationToken, Client
from magnetar.protocol.frames import FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .helpers import Keys

T = BaseCommand.Type


@pytest.fixture(scope="module")
def broker(keys: Keys, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    htpasswd = tmp_path_factory.mktemp("fuzz") / "htpasswd"
    htpasswd.write_text("u:$2y$05$abcdefghijklmnopqrstuu5Vn7rP2RzcDTr0hmz5v3xkYn7bB7hC\n")
    with EmbeddedBroker(
        authentication_enabled=True,
        authentication_providers="token,basic",
        token_secret_key=keys.url,
        basic_auth_file=str(htpasswd),
    ) as b:
        yield b


def exchange(port: int, frame: bytes, then: bytes = b"") -> list[BaseCommand]:
    """Send ``frame`` (and ``then``), read until the broker closes; the commands read."""
    decoder = FrameDecoder()
    commands: list[BaseCommand] = []
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frame + then)
        while True:
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                break
            if not data:
                break
            commands.extend(f.command for f in decoder.feed(data))
    return commands


def connect_frame(**fields: object) -> bytes:
    connect = pb.CommandConnect(client_version="fuzz", protocol_version=21)
    for name, value in fields.items():
        setattr(connect, name, value)
    return encode_command(BaseCommand(type=T.CONNECT, connect=connect))


rng = random.Random(17)
CASES = {
    "token, empty data": {"auth_method_name": "token", "auth_data": b""},
    "token, garbage bytes": {"auth_method_name": "token", "auth_data": rng.randbytes(300)},
    "token, three dots": {"auth_method_name": "token", "auth_data": b"..."},
    "token, huge": {"auth_method_name": "token", "auth_data": b"a" * 2_000_000},
    "token, just under the cap": {"auth_method_name": "token", "auth_data": b"e" * 65_000},
    "token, alg none": {
        "auth_method_name": "token",
        "auth_data": b"eyJhbGciOiJub25lIn0.eyJzdWIiOiJhZG1pbiJ9.",
    },
    "basic, no colon": {"auth_method_name": "basic", "auth_data": b"justuser"},
    "basic, binary": {"auth_method_name": "basic", "auth_data": b"\xff\xfe:\x00\x01"},
    "basic, unknown user": {"auth_method_name": "basic", "auth_data": b"x:y"},
    "basic, empty": {"auth_method_name": "basic", "auth_data": b""},
    "unknown method": {"auth_method_name": "kerberos", "auth_data": b"x"},
    "empty method": {"auth_method_name": "", "auth_data": b"x"},
    "huge method name": {"auth_method_name": "m" * 100_000},
    "nothing": {},
    "legacy enum": {"auth_method": pb.AuthMethodYcaV1},
    "tls over plain TCP": {"auth_method_name": "tls"},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_connect_auth_gets_an_error_and_a_close(
    broker: EmbeddedBroker, keys: Keys, case: str
) -> None:
    commands = exchange(broker.port, connect_frame(**CASES[case]))
    kinds = [c.type for c in commands]
    assert T.CONNECTED not in kinds
    errors = [c.error for c in commands if c.type == T.ERROR]
    if len(connect_frame(**CASES[case])) > 68 * 1024:
        # Refused at its size field, unread (max_frame_size_before_connect).
        assert errors and errors[0].error == pb.NotAllowedError
        assert "max_frame_size_before_connect" in errors[0].message
        return
    assert errors and errors[0].error == pb.AuthenticationError
    assert errors[0].message.startswith("Failed to authenticate")


def test_commands_before_connected_and_stray_auth_response(broker: EmbeddedBroker) -> None:
    # A lookup pipelined behind a bad CONNECT is never answered.
    lookup = encode_command(BaseCommand(
        type=T.LOOKUP, lookupTopic=pb.CommandLookupTopic(topic="t", request_id=1)))
    commands = exchange(broker.port, connect_frame(auth_method_name="token", auth_data=b"x"),
                        lookup)
    assert T.LOOKUP_RESPONSE not in [c.type for c in commands]
    # AUTH_RESPONSE before any CONNECT is a protocol error.
    response = encode_command(BaseCommand(
        type=T.AUTH_RESPONSE,
        authResponse=pb.CommandAuthResponse(
            response=pb.AuthData(auth_method_name="token", auth_data=b"\x00" * 1000)),
    ))
    commands = exchange(broker.port, response)
    assert [c.type for c in commands] == [T.ERROR]


def test_non_utf8_in_a_string_field(broker: EmbeddedBroker) -> None:
    # auth_method_name (field 5) holding bytes that are not UTF-8: a malformed frame.
    good = pb.CommandConnect(client_version="fuzz", protocol_version=21)
    body = good.SerializeToString() + b"\x2a\x02\xff\xfe"
    command = BaseCommand(type=T.CONNECT)
    raw = command.SerializeToString() + b"\x12" + bytes([len(body)]) + body  # field 2
    frame = (len(raw) + 4).to_bytes(4, "big") + len(raw).to_bytes(4, "big") + raw
    commands = exchange(broker.port, frame)
    assert [c.type for c in commands] == [T.ERROR]  # the codec refuses the frame
    assert "not UTF-8" in commands[0].error.message


async def test_good_clients_are_served_throughout(broker: EmbeddedBroker, keys: Keys) -> None:
    for case in sorted(CASES)[:5]:
        exchange(broker.port, connect_frame(**CASES[case]))
        async with Client(broker.service_url, auth=AuthenticationToken(keys.token("ok"))) as c:
            await (await c.create_producer(f"fuzz-{case.split(',')[0]}")).send(b"alive")
