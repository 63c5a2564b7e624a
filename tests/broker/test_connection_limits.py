"""Connections that hold the broker's resources on a peer's word: never sending
CONNECT, trickling a frame a byte at a time, or simply too many of them. Each is
closed (or refused) with a reason, and a well-behaved client beside them keeps its
connection and keeps working.

Timeouts are set small (0.3 s) so that the tests run quickly; deadlines are generous
and only bound a failure, nothing asserts that the broker is fast."""

from __future__ import annotations

import asyncio
import logging
import select
import socket
import struct
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from magnetar.protocol.frames import Frame, FrameDecoder, encode_command
from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer

DEADLINE = 20.0  # seconds: only bounds a failure
R = TypeVar("R")


def on_loop(broker: EmbeddedBroker, fn: Callable[[], R]) -> R:
    """Run ``fn`` on the broker's event loop (its state is the loop's alone)."""
    assert broker.service is not None

    async def run() -> R:
        return fn()

    return asyncio.run_coroutine_threadsafe(run(), broker.service.loop).result(10)


def connection_ids(broker: EmbeddedBroker) -> set[int]:
    assert broker.service is not None
    service = broker.service
    return on_loop(broker, lambda: {cnx.id for cnx in service.connections})


def connect_frame() -> bytes:
    return encode_command(
        BaseCommand(
            type=BaseCommand.CONNECT,
            connect=pb.CommandConnect(client_version="raw-test", protocol_version=21),
        )
    )


def ping_frame() -> bytes:
    return encode_command(BaseCommand(type=BaseCommand.PING, ping=pb.CommandPing()))


def read_until_closed(sock: socket.socket, deadline: float = DEADLINE) -> list[Frame]:
    """Every frame the broker sends until it closes the socket; fails if it has not
    closed it by ``deadline`` seconds from now."""
    decoder = FrameDecoder()
    frames: list[Frame] = []
    sock.settimeout(deadline)
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return frames
        except TimeoutError:
            pytest.fail(f"the broker did not close the connection within {deadline}s")
        if not data:
            return frames
        frames.extend(decoder.feed(data))


def errors(frames: list[Frame]) -> list[str]:
    return [f.command.error.message for f in frames if f.command.type == BaseCommand.ERROR]


def broker_spoke(sock: socket.socket) -> bool:
    """The broker has sent something (its ERROR before it hangs up) or closed the
    socket: there is something to read. Does not wait."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def trickle(sock: socket.socket, data: bytes, gap: float) -> None:
    """Send ``data`` a byte every ``gap`` seconds (starting over at its end) until
    the broker speaks or hangs up; fails if it has not within DEADLINE."""
    deadline = time.monotonic() + DEADLINE
    i = 0
    while not broker_spoke(sock):
        assert time.monotonic() < deadline, "the trickler was never closed"
        try:
            sock.sendall(data[i % len(data) : i % len(data) + 1])
        except (BrokenPipeError, ConnectionResetError):
            return
        i += 1
        time.sleep(gap)


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def warnings() -> Iterator[Warnings]:
    handler = Warnings()
    logger = logging.getLogger("magnetar.broker.connection")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


# --------------------------------------------------------------- connect_timeout


def test_a_connection_that_never_sends_connect_is_closed(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any], warnings: Warnings
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, connect_timeout=0.3) as broker:
        round_trip = official(broker)
        well_behaved = connection_ids(broker)

        silent = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        # A trickler: a CONNECT frame, one byte at a time, never finished.
        trickler = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        trickle(trickler, connect_frame()[:-1], 0.05)

        assert any("no CONNECT within 0.3s" in e for e in errors(read_until_closed(silent)))
        assert any("no CONNECT" in e for e in errors(read_until_closed(trickler)))
        # The official client's connection is the same one, and it works (it would
        # reconnect silently, so its connections are checked by id).
        assert well_behaved <= connection_ids(broker)
        round_trip("after")
        assert sum("no CONNECT within" in line for line in warnings.lines) == 2


# ----------------------------------------------------------------- frame_timeout


def test_a_trickled_frame_is_closed_after_frame_timeout_from_its_first_byte(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any], warnings: Warnings
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, frame_timeout=0.3) as broker:
        round_trip = official(broker)
        well_behaved = connection_ids(broker)
        peer = RawPeer(broker.port)  # CONNECT done: only the frame timer applies
        # A frame that declares 1000 bytes, then a byte every 50 ms: each byte is
        # activity, none of it restarts the frame's clock.
        peer.sock.sendall(struct.pack(">I", 1000))
        trickle(peer.sock, b"\x00", 0.05)
        frames = read_until_closed(peer.sock)
        assert any("frame of 1004 bytes was not complete" in e for e in errors(frames))
        assert well_behaved <= connection_ids(broker)
        round_trip("after")
        assert sum("was not complete" in line for line in warnings.lines) == 1


def test_slow_frames_that_each_complete_in_time_are_not_cut(tmp_path: Any) -> None:
    """The timer is per frame: a connection sending frames slowly for longer than
    frame_timeout in all is fine as long as each frame completes within it."""
    with EmbeddedBroker(data_dir=tmp_path, frame_timeout=1.5) as broker:
        peer = RawPeer(broker.port)
        whole = ping_frame()
        for _ in range(30):  # about 3 s in all, 0.1 s per frame
            peer.sock.sendall(whole[:5])
            time.sleep(0.1)
            peer.sock.sendall(whole[5:])
            peer.expect(BaseCommand.PONG)


def test_partial_frames_hold_the_bytes_that_came_not_the_size_they_declare(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any]
) -> None:
    """The report: 40 connections each declaring a 5 MB frame and trickling held
    200 MB. The broker holds what arrived, and drops them at frame_timeout."""
    declared = 5 * 1024 * 1024
    sent = 100
    with EmbeddedBroker(data_dir=tmp_path, frame_timeout=0.5) as broker:
        round_trip = official(broker)
        assert broker.service is not None
        service = broker.service
        peers = [RawPeer(broker.port) for _ in range(40)]
        for peer in peers:
            peer.sock.sendall(struct.pack(">I", declared) + b"\x00" * sent)
        ids = {cnx_id for cnx_id in connection_ids(broker)}

        def partials() -> list[tuple[int, int | None]]:
            return [
                (cnx.decoder.buffered, cnx.decoder.partial_size)
                for cnx in service.connections
                if cnx.decoder.buffered
            ]

        deadline = time.monotonic() + DEADLINE
        held = on_loop(broker, partials)
        while len(held) < 40 and time.monotonic() < deadline:
            time.sleep(0.02)
            held = on_loop(broker, partials)
        # Either the broker has them all, or frame_timeout already dropped some.
        for buffered, size in held:
            assert buffered == 4 + sent
            assert size == declared + 4
        for peer in peers:
            assert any("was not complete" in e for e in errors(read_until_closed(peer.sock)))
        assert ids - connection_ids(broker)  # the 40 are gone
        round_trip("after")


def test_frame_decoder_allocates_by_arrival_not_by_declared_size() -> None:
    tracemalloc.start()
    try:
        decoders = [FrameDecoder() for _ in range(40)]
        before = tracemalloc.take_snapshot()
        for decoder in decoders:
            assert decoder.feed(struct.pack(">I", 5 * 1024 * 1024) + b"x" * 10) == []
        grown = sum(
            stat.size_diff for stat in tracemalloc.take_snapshot().compare_to(before, "filename")
        )
    finally:
        tracemalloc.stop()
    assert all(decoder.buffered == 14 for decoder in decoders)
    assert grown < 256 * 1024  # 40 x 5 MB would be 200 MB


# ----------------------------------------------------------- connection limits


def try_connect(port: int, source: str = "127.0.0.1") -> tuple[socket.socket, str | None]:
    """Open a connection and send CONNECT: (socket, None) if it is CONNECTED, else
    (socket, the broker's error message) once the broker has closed it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(connect_frame())
    decoder = FrameDecoder()
    frames: list[Frame] = []
    while not frames:
        data = sock.recv(65536)
        if not data:
            return sock, "closed without a word"
        frames = decoder.feed(data)
    if frames[0].command.type == BaseCommand.CONNECTED:
        return sock, None
    said = errors(frames)
    assert said, f"unexpected {frames[0].command.type}"
    read_until_closed(sock)
    return sock, said[0]


def assert_works(sock: socket.socket) -> None:
    sock.sendall(ping_frame())
    decoder = FrameDecoder()
    sock.settimeout(10)
    while True:
        data = sock.recv(65536)
        assert data, "the connection was closed"
        if any(f.command.type == BaseCommand.PONG for f in decoder.feed(data)):
            return


def test_past_max_connections_a_new_connection_is_refused(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any], warnings: Warnings
) -> None:
    limit = 6
    with EmbeddedBroker(data_dir=tmp_path, max_connections=limit) as broker:
        round_trip = official(broker)
        taken = len(connection_ids(broker))
        assert taken < limit
        accepted = []
        for _ in range(limit - taken):
            sock, refusal = try_connect(broker.port)
            assert refusal is None
            accepted.append(sock)
        sock, refusal = try_connect(broker.port)
        assert refusal is not None and "too many connections" in refusal
        assert "max_connections 6" in refusal
        assert any("refusing connection" in line for line in warnings.lines)
        # Everyone admitted keeps working.
        for held in accepted:
            assert_works(held)
        round_trip("at the limit")
        # A slot that frees is taken again (once the broker has seen the close).
        accepted.pop().close()
        deadline = time.monotonic() + DEADLINE
        while True:
            sock, refusal = try_connect(broker.port)
            if refusal is None:
                break
            assert time.monotonic() < deadline, refusal
            time.sleep(0.05)
        assert_works(sock)


def test_past_max_connections_per_ip_that_address_is_refused_others_are_not(
    tmp_path: Any,
) -> None:
    with EmbeddedBroker(data_dir=tmp_path, max_connections_per_ip=2) as broker:
        first, refusal = try_connect(broker.port)
        assert refusal is None
        second, refusal = try_connect(broker.port)
        assert refusal is None
        _, refusal = try_connect(broker.port)
        assert refusal is not None
        assert "too many connections from 127.0.0.1" in refusal
        assert "max_connections_per_ip 2" in refusal
        # Another address (Linux routes all of 127/8 to loopback) is welcome.
        other, refusal = try_connect(broker.port, source="127.0.0.2")
        assert refusal is None
        for sock in (first, second, other):
            assert_works(sock)


# ------------------------------------------------------------- before CONNECT


def test_a_large_frame_before_connect_closes_the_connection_at_its_size_field(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any], warnings: Warnings
) -> None:
    """Before CONNECT a frame may declare at most max_frame_size_before_connect bytes:
    the four size bytes alone close the connection; after CONNECT the same frame is
    an ordinary one."""
    size = 100_000
    with EmbeddedBroker(
        data_dir=tmp_path, connect_timeout=60, frame_timeout=60,
        max_frame_size_before_connect=20_000,
    ) as broker:
        round_trip = official(broker)
        stranger = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        stranger.sendall(struct.pack(">I", size))
        said = errors(read_until_closed(stranger))
        assert any(
            f"frame declares {size} bytes, over the limit of 20000 bytes "
            "(max_frame_size_before_connect)" in message
            for message in said
        ), said
        assert sum("frame too large before CONNECT" in line for line in warnings.lines) == 1
        peer = RawPeer(broker.port)
        name = peer.producer(f"persistent://public/default/big-{time.monotonic_ns()}")
        peer.publish(1, name, 0, b"x" * size)  # answered with a receipt
        round_trip("after")


def test_partial_frames_before_connect_share_one_budget(
    tmp_path: Any, official: Callable[[EmbeddedBroker], Any], warnings: Warnings
) -> None:
    """Connections that have not completed CONNECT hold partial frames out of one
    budget, max_unauthenticated_buffer_bytes: the read that takes the total past it
    closes its connection; the others keep theirs, and a CONNECT still gets through."""
    part = 30_000
    with EmbeddedBroker(
        data_dir=tmp_path, connect_timeout=60, frame_timeout=60,
        max_unauthenticated_buffer_bytes=100_000,
    ) as broker:
        round_trip = official(broker)
        assert broker.service is not None
        budget = broker.service.unauthenticated_buffers
        frame = struct.pack(">I", 60_000) + b"\x00" * (part - 4)
        held = []
        for expected in (part, 2 * part, 3 * part):
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
            sock.sendall(frame)
            held.append(sock)
            deadline = time.monotonic() + DEADLINE
            while on_loop(broker, lambda: budget.bytes) < expected:
                assert time.monotonic() < deadline, "the broker never read the frame"
                time.sleep(0.01)
        over = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        over.sendall(frame)
        said = errors(read_until_closed(over))
        assert any("over max_unauthenticated_buffer_bytes (100000)" in m for m in said), said
        assert on_loop(broker, lambda: (budget.bytes, budget.refused)) == (3 * part, 1)
        assert any("max_unauthenticated_buffer_bytes" in line for line in warnings.lines)
        RawPeer(broker.port)  # a whole CONNECT holds nothing: it gets CONNECTED
        round_trip("at the budget")
        for sock in held:
            assert not broker_spoke(sock)  # still open, nothing said
            sock.close()
        deadline = time.monotonic() + DEADLINE
        while on_loop(broker, lambda: budget.bytes):
            assert time.monotonic() < deadline, "closed connections still count"
            time.sleep(0.01)
