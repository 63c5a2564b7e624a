"""PIP-371 at its edges, with magnetar's client and a real broker: a request resent after
its receipt was lost is stored (and run) once; a reply held for an absent requester
waits for the request's own timeout, and is not lost when the broker stops meanwhile
(SIGTERM or kill -9): the request was left unacknowledged, so it comes again; the
responder loop ``consumer.serve``."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from cutting_proxy import CuttingProxy

from magnetar.client import Client, RequestTimeout
from magnetar.client.request_reply import Request
from magnetar.testing import EmbeddedBroker

WAIT = 10.0


def _topic(prefix: str) -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


async def _eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def _publishers(broker: EmbeddedBroker, topic: str) -> list[str]:
    path = topic.replace("persistent://", "")
    with urllib.request.urlopen(
        f"{broker.admin_url}/admin/v2/persistent/{path}/stats", timeout=5
    ) as response:
        stats = json.loads(response.read())
    return [p["producerName"] for p in stats["publishers"]]


async def test_a_request_resent_after_a_lost_receipt_is_stored_once(
    broker: EmbeddedBroker,
) -> None:
    topic = _topic("rr-resend")
    proxy = CuttingProxy(broker.port)
    try:
        async with (
            Client(proxy.url, operation_timeout=WAIT, initial_backoff=0.05, max_backoff=0.2)
            as asker,
            Client(broker.service_url, operation_timeout=WAIT) as worker,
        ):
            consumer = await worker.subscribe(topic, "calc", subscription_type="shared")
            producer = await asker.create_producer(topic)
            proxy.drop_downstream = True  # the request's receipt will be lost
            pending = producer.request_async(b"charge the card", timeout=WAIT)
            msg = await consumer.receive(WAIT)  # stored: the broker got it
            # Cut before the receipt may pass again: a pump thread slow to read it would
            # otherwise forward it once the dropping stops.
            proxy.cut()  # the client reconnects and sends the request again
            proxy.drop_downstream = False
            assert broker.service is not None
            resends = broker.service.requests.resends
            await _eventually(lambda: broker.service.requests.resends > resends)  # type: ignore[union-attr]
            await (await consumer.acknowledge(msg, reply=b"charged"))
            assert (await asyncio.wait_for(pending, WAIT)).value == b"charged"
            # Sent after the resend, so stored after it: the next message the worker
            # gets is this one, not a second copy of the request.
            await producer.send(b"marker")
            nxt = await consumer.receive(WAIT)
            assert nxt.value == b"marker", "the resent request was stored again"
    finally:
        proxy.close()


async def test_a_held_reply_waits_for_the_requests_own_timeout(tmp_path: Path) -> None:
    """The hold was a fixed 10 s: a requester whose request had a 30 s timeout lost its
    reply after 12 s away. The broker's clock is moved on instead of sleeping."""
    topic = _topic("rr-hold")
    with EmbeddedBroker(data_dir=tmp_path, cursor_flush_interval=0.05) as broker:
        service = broker.service
        assert service is not None
        shift = [0.0]
        service.clock = lambda: time.time() + shift[0]
        proxy = CuttingProxy(broker.port)
        try:
            async with (
                Client(proxy.url, operation_timeout=WAIT, initial_backoff=0.05,
                       max_backoff=0.2) as asker,
                Client(broker.service_url, operation_timeout=WAIT) as worker,
            ):
                consumer = await worker.subscribe(topic, "calc", subscription_type="shared")
                producer = await asker.create_producer(topic)
                name = producer.producer_name
                pending = producer.request_async(b"question", timeout=30.0)
                msg = await consumer.receive(WAIT)
                proxy.refuse = True
                proxy.cut()
                await _eventually(lambda: name not in service.topics[topic].producers)
                await (await consumer.acknowledge(msg, reply=b"answer"))  # held
                assert service.replies.held_replies() == 1
                shift[0] = 15.0  # past the old fixed hold, within the request's timeout
                await asyncio.sleep(0.3)  # the broker's expiry pass runs meanwhile
                assert service.replies.held_replies() == 1
                proxy.refuse = False
                assert (await asyncio.wait_for(pending, WAIT)).value == b"answer"

                # Past its timeout a held reply is dropped, and the request acknowledged.
                shift[0] = 0.0
                pending = producer.request_async(b"question 2", timeout=2.0)
                msg = await consumer.receive(WAIT)
                proxy.refuse = True
                proxy.cut()
                await _eventually(lambda: name not in service.topics[topic].producers)
                await (await consumer.acknowledge(msg, reply=b"answer 2"))
                assert service.replies.held_replies() == 1
                shift[0] += 3.0
                await _eventually(lambda: service.replies.held_replies() == 0)
                proxy.refuse = False
                with pytest.raises(RequestTimeout):
                    await asyncio.wait_for(pending, WAIT)
                await consumer.close()
                again = await worker.subscribe(topic, "calc", subscription_type="shared")
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(again.receive(), 0.5)
        finally:
            proxy.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
async def test_a_held_reply_survives_a_broker_stop(tmp_path: Path, sig: int) -> None:
    topic = _topic("rr-stop")
    broker = EmbeddedBroker(
        data_dir=tmp_path, mode="subprocess", admin=True, cursor_flush_interval=0.05
    )
    proxy: CuttingProxy | None = None
    with broker:
        proxy = CuttingProxy(broker.port)
        try:
            async with (
                Client(proxy.url, operation_timeout=WAIT, initial_backoff=0.05,
                       max_backoff=0.2) as asker,
                Client(broker.service_url, operation_timeout=WAIT, initial_backoff=0.05,
                       max_backoff=0.2) as worker,
            ):
                consumer = await worker.subscribe(topic, "calc", subscription_type="shared")
                producer = await asker.create_producer(topic)
                name = producer.producer_name
                pending = producer.request_async(b"question", timeout=60.0)
                msg = await consumer.receive(WAIT)
                proxy.refuse = True
                proxy.cut()
                await _eventually(lambda: name not in _publishers(broker, topic))
                await (await consumer.acknowledge(msg, reply=b"answer"))  # held by the broker
                # Past several cursor flushes: an ack applied now would be on disk.
                await asyncio.sleep(0.3)
                assert broker.process is not None
                broker.process.send_signal(sig)
                broker.process.wait(30)
                broker.process = None
                broker.start()
                again = await consumer.receive(WAIT)  # unacknowledged: it comes again
                assert again.value == b"question"
                await (await consumer.acknowledge(again, reply=b"answer after the restart"))
                proxy.refuse = False
                result = await asyncio.wait_for(pending, WAIT)
                assert result.value == b"answer after the restart"
        finally:
            proxy.close()


async def test_serve_answers_with_what_the_handler_returns(mclient: Client) -> None:
    """``consumer.serve(handler, concurrency=N)``: N handlers at once, pipelined replies;
    a handler that raises answers with an error reply, one that returns None acks."""
    topic = _topic("rr-serve")
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    running = 0
    most = 0

    async def handler(request: Request) -> bytes | None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.05)
            if request.value == b"fail":
                raise ValueError("cannot")
            if request.value == b"ignore":
                return None
            return request.value.upper()
        finally:
            running -= 1

    server = asyncio.ensure_future(consumer.serve(handler, concurrency=4))
    try:
        asked = [producer.request_async(f"q{i}".encode(), timeout=WAIT) for i in range(12)]
        results = await asyncio.wait_for(asyncio.gather(*asked), WAIT)
        assert sorted(r.value for r in results) == sorted(f"Q{i}".encode() for i in range(12))
        assert 1 < most <= 4
        failed = await producer.request(b"fail", timeout=WAIT)
        assert failed.is_error and failed.value == b"ValueError: cannot"
        with pytest.raises(RequestTimeout):
            await producer.request(b"ignore", timeout=0.5)
        assert consumer.refused_replies == 0
    finally:
        await consumer.close()
        await asyncio.wait_for(server, WAIT)  # returns once the consumer is closed
