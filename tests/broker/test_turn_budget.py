"""One read of many frames is handled over several event loop turns, not one long
callback: with a turn budget of zero, 2,000 SENDs written at once are handled 32 per
turn, all stored and receipted in order, and another client is served meanwhile."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from magnetar.broker.session import connection
from magnetar.protocol.frames import FrameDecoder
from magnetar.protocol.pb import BaseCommand
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer
from .test_backpressure import on_loop, send_frame

DEADLINE = 60.0  # seconds: only bounds a failure


def test_a_read_of_thousands_of_sends_is_split_across_turns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, official: Callable[[EmbeddedBroker], Any]
) -> None:
    monkeypatch.setattr(connection, "TURN_BUDGET_SECONDS", 0.0)  # every 32 frames: a new turn
    count = 2000
    topic = f"persistent://public/default/turns-{uuid.uuid4().hex[:10]}"
    with EmbeddedBroker(data_dir=tmp_path) as broker:
        round_trip = official(broker)
        service = broker.service
        assert service is not None
        peer = RawPeer(broker.port)
        name = peer.producer(topic)
        address = f"127.0.0.1:{peer.sock.getsockname()[1]}"
        (cnx,) = on_loop(
            broker, lambda: [c for c in service.connections if c.remote_address == address]
        )
        pauses_before = cnx.read_pauses
        peer.sock.sendall(b"".join(send_frame(name, seq, b"m%d" % seq) for seq in range(count)))
        round_trip("while the SENDs are handled")

        receipts: list[int] = []
        decoder = FrameDecoder()
        peer.sock.settimeout(5)
        deadline = time.monotonic() + DEADLINE
        while len(receipts) < count:
            assert time.monotonic() < deadline, f"{len(receipts)} of {count} receipts"
            try:
                data = peer.sock.recv(1 << 20)
            except TimeoutError:
                continue
            assert data, "the broker closed the connection"
            for frame in [*peer.backlog, *decoder.feed(data)]:
                assert frame.command.type == BaseCommand.SEND_RECEIPT, frame.command
                receipts.append(frame.command.send_receipt.sequence_id)
            peer.backlog = []
        assert receipts == list(range(count))
        # Split: far more pauses than one per read (the peer's writes arrive in reads
        # of up to 256 KiB, a few dozen here).
        assert cnx.read_pauses - pauses_before >= count // 32 // 2
        entries = on_loop(broker, lambda: service.topics[topic].ledger.entry_count())
        assert entries == count
        peer.close()
