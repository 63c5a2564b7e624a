"""What a peer that never completes CONNECT can make the broker hold, with
authentication on (issue 23, item 4): 200 connections each sending most of a 5 MB
frame before CONNECT took a broker from 52 to 1,056 MB. Now such a frame closes its
connection at its size field, frames that fit share one budget, and the broker's RSS
stays within 50 MB of where it was while an authenticated client (with a 60 KB token:
large tokens still fit before CONNECT) keeps working beside them.

The broker is a real ``magnetar serve`` child process, so its RSS is its own."""

from __future__ import annotations

import errno
import socket
import struct
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import jwt
import pulsar
import pytest
from official_client import quiet_logger

from magnetar.protocol.frames import FrameDecoder
from magnetar.protocol.pb import BaseCommand
from magnetar.testing import EmbeddedBroker

from .helpers import Keys

ATTACKERS = 200
DECLARED = 5 * 1024 * 1024  # what each attacker's frame says it is
FITTING = 64 * 1024  # a frame under max_frame_size_before_connect, never finished
MB = 1024 * 1024
DEADLINE = 60.0  # seconds: only bounds a failure


def vm_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.fixture
def broker(keys: Keys, tmp_path: Path) -> Iterator[EmbeddedBroker]:
    # The timeouts are long so that only the new limits can close the attackers.
    with EmbeddedBroker(
        data_dir=tmp_path,
        mode="subprocess",
        authentication_enabled=True,
        token_secret_key=keys.url,
        connect_timeout=300,
        frame_timeout=300,
    ) as b:
        yield b


def send_all_or_closed(socks: list[socket.socket], data: list[bytes]) -> list[bool]:
    """Send each socket its bytes, all of them side by side (non-blocking), until each
    has sent everything or the broker has closed it; True where it was closed."""
    sent = [0] * len(socks)
    closed = [False] * len(socks)
    for sock in socks:
        sock.setblocking(False)
    deadline = time.monotonic() + DEADLINE
    while True:
        busy = False
        for i, sock in enumerate(socks):
            if closed[i] or sent[i] == len(data[i]):
                continue
            busy = True
            try:
                sent[i] += sock.send(data[i][sent[i] : sent[i] + 256 * 1024])
            except BlockingIOError:
                pass
            except OSError as exc:
                assert exc.errno in (errno.EPIPE, errno.ECONNRESET), exc
                closed[i] = True
        if not busy:
            return closed
        if time.monotonic() > deadline:
            # The broker neither read the rest nor closed them: it holds what it read.
            return closed
        time.sleep(0.001)


def closed_by_broker(sock: socket.socket) -> tuple[bool, list[str]]:
    """(whether the broker has closed ``sock``, the ERROR messages it sent first)."""
    sock.setblocking(True)
    sock.settimeout(DEADLINE)
    decoder = FrameDecoder()
    said: list[str] = []
    try:
        while data := sock.recv(65536):
            said += [
                f.command.error.message
                for f in decoder.feed(data)
                if f.command.type == BaseCommand.ERROR
            ]
    except ConnectionResetError:
        pass  # it closed with the attacker's bytes unread: a reset
    except TimeoutError:
        return False, said
    return True, said


def test_200_connections_with_large_frames_before_connect_cost_under_50_mb(
    broker: EmbeddedBroker, keys: Keys
) -> None:
    assert broker.process is not None
    pid = broker.process.pid
    # A bystander whose token is 60 KB (the size of a large OAuth2 or Kerberos token).
    token = jwt.encode({"sub": "alice", "pad": "x" * 45_000}, keys.secret, algorithm="HS256")
    assert 59_000 < len(token) < 61_000
    client = pulsar.Client(
        broker.service_url,
        authentication=pulsar.AuthenticationToken(token),
        logger=quiet_logger(),
        operation_timeout_seconds=30,
    )
    try:
        topic = f"persistent://public/default/bystander-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)

        def round_trip(label: str) -> None:
            producer.send(label.encode())
            msg = consumer.receive(timeout_millis=30_000)
            assert msg.data() == label.encode()
            consumer.acknowledge(msg)

        round_trip("before")
        before = vm_kb(pid, "VmRSS")

        # Wave 1: most of a 5 MB frame each, never a CONNECT.
        large = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(ATTACKERS)]
        frame = struct.pack(">I", DECLARED) + b"\x00" * (DECLARED - 1024)
        closed = send_all_or_closed(large, [frame] * ATTACKERS)
        round_trip("during the large frames")
        after_large = vm_kb(pid, "VmRSS")
        # Wave 2: frames that fit the limit before CONNECT, never finished: they share
        # the budget for strangers (16 MiB by default).
        fitting = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(ATTACKERS)]
        partial = struct.pack(">I", FITTING) + b"\x00" * (FITTING - 8)
        send_all_or_closed(fitting, [partial] * ATTACKERS)
        round_trip("during the fitting frames")
        after = vm_kb(pid, "VmRSS")
        peak = vm_kb(pid, "VmHWM")

        grown = (max(after_large, after, peak) - before) * 1024
        assert grown < 50 * MB, (
            f"RSS {before // 1024} MB before, {after_large // 1024} MB after the large "
            f"frames, {after // 1024} MB after the fitting ones, peak {peak // 1024} MB"
        )
        # Every large frame closed its connection (none waited for a timeout), saying why.
        for sock in large:
            gone, said = closed_by_broker(sock)
            assert gone
            assert all("max_frame_size_before_connect" in message for message in said)
        assert sum(closed) > 0
        for sock in large + fitting:
            sock.close()
        round_trip("after")
    finally:
        client.close()
