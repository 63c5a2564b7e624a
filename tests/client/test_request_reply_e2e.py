"""PIP-371 request-reply end to end: real brokers, magnetar's client (asyncio and
sync facade) on both ends, and the official pulsar-client where it has a part.

Every wait has a timeout of its own, so a broken build fails fast instead of
hanging until pytest-timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pulsar
import pytest

from magnetar.client import (
    Client,
    Consumer,
    MessageTooBig,
    NotAllowed,
    Producer,
    RequestTimeout,
)
from magnetar.client.errors import AlreadyClosed
from magnetar.client.request_reply import REQUEST_TIMEOUT_PROPERTY, PendingRequests, Request
from magnetar.client.sync import Client as SyncClient
from magnetar.protocol.message_id import MessageId
from magnetar.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(30)

WAIT = 10.0  # the longest any single step may take before the test fails


def _topic(prefix: str = "rr-e2e") -> str:
    return f"persistent://public/default/{prefix}-{uuid.uuid4().hex[:10]}"


def _calc(value: bytes) -> tuple[bytes, bool]:
    """The service under test: ``"a op b"`` -> the result, or an error reply."""
    try:
        left, op, right = value.decode().split()
        a, b = int(left), int(right)
        result = {"+": a + b, "-": a - b, "*": a * b}[op] if op != "/" else a // b
    except (ValueError, KeyError, ZeroDivisionError) as exc:
        return f"bad request {value!r}: {exc!r}".encode(), True
    return str(result).encode(), False


Handler = Callable[[Request], Awaitable[None]]


async def _answer(req: Request) -> None:
    if not req.is_request:
        await req.acknowledge()
        return
    body, is_error = _calc(req.value)
    await req.reply(body, is_error=is_error)


@contextlib.asynccontextmanager
async def serving(consumer: Consumer, handler: Handler = _answer) -> AsyncIterator[None]:
    """Run a request-handler loop on ``consumer`` for the duration of the block."""

    async def loop() -> None:
        async for req in consumer.requests():
            await handler(req)

    task = asyncio.ensure_future(loop())
    try:
        yield
    finally:
        task.cancel()  # (a handler that failed re-raises its error here)
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task, WAIT)


def _pending(producer: Producer, partition: int = 0) -> PendingRequests:
    requests = producer._partitions[partition]._requests
    assert requests is not None
    return requests


def _replies_dropped(broker: EmbeddedBroker, reason: str) -> float:
    assert broker.service is not None
    value = broker.service.metrics.registry.get_sample_value(
        "magnetar_rpc_replies_dropped_total", {"reason": reason}
    )
    return value or 0.0


def _replies_forwarded(broker: EmbeddedBroker) -> float:
    assert broker.service is not None
    value = broker.service.metrics.registry.get_sample_value("magnetar_rpc_replies_forwarded_total")
    return value or 0.0


def _attached(broker: EmbeddedBroker, topic: str, producer_name: str) -> bool:
    """Whether the broker has the producer ``producer_name`` on ``topic`` right now."""
    service = broker.service
    found = service is not None and service.topics.get(topic)
    return bool(found) and producer_name in found.producers  # type: ignore[union-attr]


async def _eventually(check: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def _nothing_left(client: Client, topic: str, subscription: str) -> None:
    """A fresh consumer of ``subscription`` gets nothing: every message was acked."""
    again = await client.subscribe(topic, subscription, subscription_type="shared")
    try:
        with pytest.raises(asyncio.TimeoutError):
            msg = await again.receive(0.5)
            pytest.fail(f"redelivered: {msg.value!r} {msg.message_id}")
    finally:
        await again.close()


# ---------------------------------------------------------------- the basics


async def test_async_requests_and_error_replies(mclient: Client) -> None:
    topic = _topic()
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    async with serving(consumer):
        ok = await producer.request("6 * 7", timeout=WAIT)
        assert (ok.value, ok.is_error) == (b"42", False)
        assert ok.request_message_id.partition == -1 and ok.request_message_id.batch_index == -1
        bad = await producer.request(b"6 x 7", timeout=WAIT)
        assert bad.is_error and bad.value.startswith(b"bad request")
        zero = await producer.request(b"1 / 0", timeout=WAIT)
        assert zero.is_error and b"ZeroDivisionError" in zero.value
        # Concurrent requests each get their own answer.
        results = await asyncio.wait_for(
            asyncio.gather(*(producer.request_async(f"{i} + 1", timeout=WAIT) for i in range(20))),
            WAIT,
        )
        assert [r.value for r in results] == [str(i + 1).encode() for i in range(20)]
        assert len({r.request_message_id for r in results}) == 20
    assert len(_pending(producer)) == 0
    await _nothing_left(mclient, topic, "calc")


def test_sync_requests_error_replies_and_timeout(broker: EmbeddedBroker) -> None:
    topic = _topic("rr-sync")
    with (
        SyncClient(broker.service_url, operation_timeout=WAIT) as server_client,
        SyncClient(broker.service_url, operation_timeout=WAIT) as client,
    ):
        consumer = server_client.subscribe(topic, "sync-calc", subscription_type="shared")
        served: list[bytes] = []

        def serve() -> None:
            for req in consumer.requests(skip_expired=True):
                served.append(req.value)
                body, is_error = _calc(req.value)
                req.reply(body, is_error=is_error)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        producer = client.create_producer(topic)
        try:
            ok = producer.request(b"2 + 3", timeout=WAIT)
            assert (ok.value, ok.is_error) == (b"5", False)
            bad = producer.request(b"two + three", timeout=WAIT)
            assert bad.is_error and bad.value.startswith(b"bad request")
        finally:
            consumer.close()  # ends the server loop (receive raises AlreadyClosed)
            thread.join(WAIT)
        assert not thread.is_alive()
        assert served == [b"2 + 3", b"two + three"]
        # Nobody serves any more: the blocking call gives up in about its timeout.
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            producer.request(b"1 + 1", timeout=0.3)
        assert 0.25 <= time.monotonic() - started < 2.0


def test_sync_request_timeout_is_a_request_timeout(broker: EmbeddedBroker) -> None:
    with SyncClient(broker.service_url, operation_timeout=WAIT) as client:
        producer = client.create_producer(_topic("rr-sync-timeout"))
        started = time.monotonic()
        with pytest.raises(RequestTimeout, match=r"no reply within 0\.3s"):
            producer.request(b"1 + 1", timeout=0.3)
        assert time.monotonic() - started < 2.0


# ---------------------------------------------------------------- timeouts


def _scrape(broker: EmbeddedBroker) -> dict[str, float]:
    """The broker's /metrics over HTTP, as {sample with labels: value}."""
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=WAIT) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


async def test_round_trips_are_counted_in_metrics(broker: EmbeddedBroker, mclient: Client) -> None:
    topic = _topic()
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic)

    async def after_a_while(req: Request) -> None:
        if req.value == b"slow":
            await asyncio.sleep(0.3)
        await _answer(req)

    before = _scrape(broker)
    bucket = 'magnetar_rpc_round_trip_seconds_bucket{le="%s"}'
    async with serving(consumer, after_a_while):
        assert (await producer.request(b"2 + 2", timeout=WAIT)).value == b"4"
        assert (await producer.request(b"slow", timeout=WAIT)).is_error
    after = _scrape(broker)

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert grew("magnetar_rpc_replies_forwarded_total") == 2
    assert grew("magnetar_rpc_round_trip_seconds_count") == 2
    assert grew(bucket % "+Inf") == 2
    # The quick one took well under a quarter of a second, the slow one 0.3 s or more
    # (the publish time has millisecond resolution; the slack covers it).
    assert grew(bucket % "0.25") == 1
    assert grew(bucket % "30.0") == 2
    assert 0.29 <= grew("magnetar_rpc_round_trip_seconds_sum") < 0.29 + 0.25 + 2 * WAIT


async def test_timeout_without_any_consumer(mclient: Client) -> None:
    topic = _topic("rr-nobody")  # no subscription at all
    producer = await mclient.create_producer(topic)
    started = time.monotonic()
    with pytest.raises(RequestTimeout) as info:
        await asyncio.wait_for(producer.request(b"1 + 1", timeout=0.4), WAIT)
    elapsed = time.monotonic() - started
    assert isinstance(info.value, TimeoutError)
    assert 0.35 <= elapsed < 1.5, elapsed
    assert "0.4" in str(info.value)
    requests = _pending(producer)
    assert len(requests) == 0  # the pending entry is gone
    # Many at once: all time out together, all entries gone, producer still usable.
    started = time.monotonic()
    outcomes = await asyncio.wait_for(
        asyncio.gather(
            *(producer.request_async(b"%d" % i, timeout=0.3) for i in range(50)),
            return_exceptions=True,
        ),
        WAIT,
    )
    assert all(isinstance(o, RequestTimeout) for o in outcomes)
    assert time.monotonic() - started < 1.5
    assert len(requests) == 0
    assert isinstance(await asyncio.wait_for(producer.send(b"plain"), WAIT), MessageId)


async def test_slow_consumer_late_reply_is_dropped(broker: EmbeddedBroker, mclient: Client) -> None:
    topic = _topic("rr-slow")
    consumer = await mclient.subscribe(topic, "slow", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    late_reply_sent = asyncio.Event()

    async def slow_then_fast(req: Request) -> None:
        if req.value == b"slow":
            await asyncio.sleep(0.6)  # longer than the requester waits
            await req.reply(b"too late")
            late_reply_sent.set()
        else:
            await _answer(req)

    forwarded = _replies_forwarded(broker)
    async with serving(consumer, slow_then_fast):
        started = time.monotonic()
        with pytest.raises(RequestTimeout):
            await asyncio.wait_for(producer.request(b"slow", timeout=0.3), WAIT)
        assert 0.25 <= time.monotonic() - started < 1.0
        requests = _pending(producer)
        assert len(requests) == 0
        await asyncio.wait_for(late_reply_sent.wait(), WAIT)
        # The broker still forwards it (the producer is there); the client drops it.
        await _eventually(lambda: requests.late_replies == 1)
        assert _replies_forwarded(broker) == forwarded + 1
        # Nothing broke: the next request is answered.
        after = await producer.request(b"20 - 8", timeout=WAIT)
        assert (after.value, after.is_error) == (b"12", False)
        assert requests.late_replies == 1 and len(requests) == 0
    # The late reply's ack was applied like any other.
    await _nothing_left(mclient, topic, "slow")


async def test_reply_after_the_requester_closed(broker: EmbeddedBroker, mclient: Client) -> None:
    topic = _topic("rr-gone")
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    pending = producer.request_async(b"1 + 1", timeout=WAIT)
    msg = await consumer.receive(WAIT)
    await producer.close()
    with pytest.raises(AlreadyClosed):
        await asyncio.wait_for(pending, WAIT)
    gone = _replies_dropped(broker, "producer_gone")
    await consumer.acknowledge(msg, reply=b"2")  # nobody to send it to: dropped
    await _eventually(lambda: _replies_dropped(broker, "producer_gone") == gone + 1)
    # ... but the ack itself is applied, and the consumer keeps working.
    other = await mclient.create_producer(topic)
    async with serving(consumer):
        assert (await other.request(b"2 + 2", timeout=WAIT)).value == b"4"
    await _nothing_left(mclient, topic, "calc")


# ---------------------------------------------------------------- several consumers


async def test_two_shared_consumers_share_the_load(broker: EmbeddedBroker) -> None:
    topic = _topic("rr-shared")
    n = 60
    async with (
        Client(broker.service_url, operation_timeout=WAIT) as requester,
        Client(broker.service_url, operation_timeout=WAIT) as worker_a,
        Client(broker.service_url, operation_timeout=WAIT) as worker_b,
    ):
        served: dict[str, list[MessageId]] = {"a": [], "b": []}

        def worker(name: str) -> Handler:
            async def handle(req: Request) -> None:
                served[name].append(req.message_id)
                await asyncio.sleep(0.002)  # some work, so both get a share
                await req.reply(name.encode() + b":" + req.value)

            return handle

        # A small receiver queue so that one consumer cannot take everything.
        consumer_a = await worker_a.subscribe(
            topic, "workers", subscription_type="shared", receiver_queue_size=5
        )
        consumer_b = await worker_b.subscribe(
            topic, "workers", subscription_type="shared", receiver_queue_size=5
        )
        producer = await requester.create_producer(topic)
        async with serving(consumer_a, worker("a")), serving(consumer_b, worker("b")):
            results = await asyncio.wait_for(
                asyncio.gather(
                    *(producer.request_async(b"q%d" % i, timeout=WAIT) for i in range(n))
                ),
                WAIT,
            )
        by = {"a": 0, "b": 0}
        for i, result in enumerate(results):
            who, _, question = result.value.partition(b":")
            assert question == b"q%d" % i
            by[who.decode()] += 1
        assert by["a"] > 0 and by["b"] > 0, by
        assert by["a"] + by["b"] == n
        # Every request was handled exactly once, by one of the two.
        handled = served["a"] + served["b"]
        assert len(handled) == n and len(set(handled)) == n
        assert {r.request_message_id for r in results} == set(handled)
        assert _pending(producer).late_replies == 0


async def test_requests_and_plain_sends_mix(mclient: Client) -> None:
    topic = _topic("rr-mix")
    consumer = await mclient.subscribe(topic, "mix", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    seen: list[tuple[bytes, bool]] = []

    async def handler(req: Request) -> None:
        seen.append((req.value, req.is_request))
        await _answer(req)  # plain messages are acked without a reply

    async with serving(consumer, handler):
        sends = []
        requests = []
        for i in range(10):
            sends.append(producer.send_async(b"plain %d" % i))
            requests.append(producer.request_async(b"%d * 2" % i, timeout=WAIT))
        results = await asyncio.wait_for(asyncio.gather(*requests), WAIT)
        ids = await asyncio.wait_for(asyncio.gather(*sends), WAIT)
        assert [r.value for r in results] == [b"%d" % (i * 2) for i in range(10)]
        assert all(isinstance(mid, MessageId) for mid in ids)
        await _eventually(lambda: len(seen) == 20)
    plain = [v for v, is_request in seen if not is_request]
    asked = [v for v, is_request in seen if is_request]
    assert plain == [b"plain %d" % i for i in range(10)]
    assert asked == [b"%d * 2" % i for i in range(10)]
    await consumer.close()  # flushes the grouped acks of the plain messages
    await _nothing_left(mclient, topic, "mix")


# ---------------------------------------------------------------- partitions, batching


async def test_partitioned_request_topic() -> None:
    with EmbeddedBroker(default_partitions=4) as broker:
        topic = _topic("rr-part")
        async with Client(broker.service_url, operation_timeout=WAIT) as client:
            consumer = await client.subscribe(topic, "calc", subscription_type="shared")
            producer = await client.create_producer(topic)
            assert producer.num_partitions == 4
            async with serving(consumer):
                results = await asyncio.wait_for(
                    asyncio.gather(
                        *(producer.request_async(f"{i} * {i}", timeout=WAIT) for i in range(16))
                    ),
                    WAIT,
                )
                # A keyed request goes to its key's partition and comes back from it.
                keyed = [
                    await producer.request(b"1 + 1", key=f"k{i}", timeout=WAIT) for i in range(4)
                ]
            assert [r.value for r in results] == [str(i * i).encode() for i in range(16)]
            assert {r.request_message_id.partition for r in results} == {0, 1, 2, 3}
            assert all(r.value == b"2" for r in keyed)
            for index in range(4):
                assert len(_pending(producer, index)) == 0
            assert _replies_dropped(broker, "producer_gone") == 0


async def test_batched_requests(mclient: Client) -> None:
    topic = _topic("rr-batch")
    n = 300
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(
        topic, batching=True, batching_max_messages=50, batching_max_delay=0.005
    )
    seen: dict[bytes, MessageId] = {}

    async def handler(req: Request) -> None:
        seen[req.value] = req.message_id
        await _answer(req)

    async with serving(consumer, handler):
        results = await asyncio.wait_for(
            asyncio.gather(*(producer.request_async(f"{i} + 0", timeout=WAIT) for i in range(n))),
            WAIT,
        )
    assert [r.value for r in results] == [str(i).encode() for i in range(n)]
    for i, result in enumerate(results):
        rid = result.request_message_id
        assert rid.batch_index >= 0  # the receipt names the message inside its batch
        got = seen[f"{i} + 0".encode()]
        assert (rid.ledger_id, rid.entry_id, rid.batch_index) == (
            got.ledger_id,
            got.entry_id,
            got.batch_index,
        )
    entries = {(r.request_message_id.ledger_id, r.request_message_id.entry_id) for r in results}
    assert len(entries) < n  # really batched
    assert max(r.request_message_id.batch_index for r in results) > 0
    requests = _pending(producer)
    assert len(requests) == 0 and requests.late_replies == 0
    await _nothing_left(mclient, topic, "calc")


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_replies_in_reverse_order_reach_their_own_requests(
    mclient: Client, batching: bool
) -> None:
    topic = _topic("rr-reverse")
    n = 20
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic, batching=batching, batching_max_delay=0.01)
    futures = [producer.request_async(f"{i} + 100", timeout=WAIT) for i in range(n)]
    msgs = [await consumer.receive(WAIT) for _ in range(n)]
    for msg in reversed(msgs):  # the last request is answered first
        body, _ = _calc(msg.value)
        await consumer.acknowledge(msg, reply=body)
    results = await asyncio.wait_for(asyncio.gather(*futures), WAIT)
    assert [r.value for r in results] == [str(i + 100).encode() for i in range(n)]
    def position(mid: MessageId) -> tuple[int, int, int]:
        return mid.ledger_id, mid.entry_id, mid.batch_index

    assert [position(r.request_message_id) for r in results] == [
        position(m.message_id) for m in msgs]
    assert _pending(producer).late_replies == 0
    await _nothing_left(mclient, topic, "calc")


async def test_the_broker_names_each_reply_by_its_request_sequence_id(mclient: Client) -> None:
    topic = _topic("rr-seq")
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    single = await mclient.create_producer(topic)
    batched = await mclient.create_producer(topic, batching=True, batching_max_delay=0.01)
    async with serving(consumer):
        assert (await single.request(b"1 + 1", timeout=WAIT)).value == b"2"
        results = await asyncio.wait_for(
            asyncio.gather(*(batched.request_async(f"{i} * 2", timeout=WAIT) for i in range(5))),
            WAIT,
        )
    assert [r.value for r in results] == [str(i * 2).encode() for i in range(5)]
    assert _pending(single).matched_by_sequence_id == 1
    assert _pending(batched).matched_by_sequence_id == 5


# ---------------------------------------------------------------- replying by id, refusals


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
async def test_reply_by_message_id(mclient: Client, batching: bool) -> None:
    topic = _topic("rr-by-id")
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic, batching=batching, batching_max_delay=0.01)
    asked = [producer.request_async(q, timeout=WAIT) for q in (b"1 + 1", b"1 / 0", b"2 * 3")]
    ids = [(await consumer.receive(WAIT)).message_id for _ in asked]
    # Only the ids are kept (e.g. handed to other code): the broker finds the requester.
    await consumer.acknowledge(ids[2], reply=b"6")
    await consumer.acknowledge(ids[1], reply="division by zero", is_error=True)
    await consumer.acknowledge(ids[0], reply=b"2")
    results = await asyncio.wait_for(asyncio.gather(*asked), WAIT)
    assert [(r.value, r.is_error) for r in results] == [
        (b"2", False), (b"division by zero", True), (b"6", False)]
    await _nothing_left(mclient, topic, "calc")


async def test_reply_by_message_id_on_a_partitioned_topic() -> None:
    with EmbeddedBroker(default_partitions=3) as broker:
        topic = _topic("rr-by-id-part")
        async with Client(broker.service_url, operation_timeout=WAIT) as client:
            consumer = await client.subscribe(topic, "calc", subscription_type="shared")
            producer = await client.create_producer(topic)
            asked = [producer.request_async(f"{i} + 0", timeout=WAIT) for i in range(6)]
            for _ in asked:
                msg = await consumer.receive(WAIT)
                await consumer.acknowledge(msg.message_id, reply=b"=" + msg.value)
            results = await asyncio.wait_for(asyncio.gather(*asked), WAIT)
            assert [r.value for r in results] == [f"={i} + 0".encode() for i in range(6)]
            assert {r.request_message_id.partition for r in results} == {0, 1, 2}


def test_sync_reply_by_message_id(broker: EmbeddedBroker) -> None:
    topic = _topic("rr-sync-by-id")
    with SyncClient(broker.service_url, operation_timeout=WAIT) as client:
        consumer = client.subscribe(topic, "calc", subscription_type="shared")
        producer = client.create_producer(topic)
        answered: list[BaseException] = []

        def serve() -> None:
            try:
                msg = consumer.receive(WAIT)
                consumer.acknowledge(msg.message_id, reply=b"by id")
            except BaseException as exc:  # reported by the assertion below
                answered.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        result = producer.request(b"q", timeout=WAIT)
        thread.join(WAIT)
        assert answered == [] and result.value == b"by id"


async def test_an_oversized_reply_raises_and_the_request_comes_again(tmp_path: Path) -> None:
    topic = _topic("rr-too-big")
    limit = 64 * 1024
    with EmbeddedBroker(data_dir=tmp_path / "data", max_message_size=limit) as broker:
        async with Client(broker.service_url, operation_timeout=WAIT) as client:
            consumer = await client.subscribe(topic, "calc", subscription_type="shared")
            producer = await client.create_producer(topic)
            waiting = producer.request_async(b"2 + 2", timeout=WAIT)
            handler = consumer.requests()
            req = await handler.__anext__()
            with pytest.raises(MessageTooBig, match="exceeds the broker's limit"):
                await req.reply(b"x" * (limit + 1))
            with pytest.raises(MessageTooBig):
                await consumer.acknowledge(req.message.message_id, reply=b"x" * (limit + 1))
            await handler.aclose()
            assert _replies_forwarded(broker) == 0  # nothing reached the broker
            assert consumer.is_connected()
            # Still unacknowledged: a new consumer of the subscription gets it again.
            await consumer.close()
            again = await client.subscribe(topic, "calc", subscription_type="shared")
            msg = await again.receive(WAIT)
            assert msg.value == b"2 + 2"
            await again.acknowledge(msg, reply=b"4")
            assert (await asyncio.wait_for(waiting, WAIT)).value == b"4"


async def test_a_reply_the_broker_refuses_raises_its_error(mclient: Client) -> None:
    topic = _topic("rr-refused")
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    await producer.send(b"plain")
    msg = await consumer.receive(WAIT)
    beyond = MessageId(msg.message_id.ledger_id, msg.message_id.entry_id + 1000)
    with pytest.raises(NotAllowed, match="past the end"):
        await (await consumer.acknowledge(beyond, reply=b"to a request nobody sent yet"))
    await consumer.acknowledge(msg)


# ---------------------------------------------------------------- reconnects


async def test_requests_across_a_broker_restart(tmp_path: Path) -> None:
    topic = _topic("rr-restart")
    with EmbeddedBroker(data_dir=tmp_path / "data", sync_policy="always") as broker:
        async with (
            Client(
                broker.service_url, operation_timeout=WAIT, initial_backoff=0.05, max_backoff=0.5
            ) as requester,
            Client(
                broker.service_url, operation_timeout=WAIT, initial_backoff=0.05, max_backoff=0.5
            ) as worker,
        ):
            consumer = await worker.subscribe(topic, "calc", subscription_type="shared")
            producer = await requester.create_producer(topic)
            name = producer.producer_name
            gate = asyncio.Event()
            gate.set()

            async def gated(req: Request) -> None:
                await gate.wait()
                # A request held across a restart is dispatched again: the broker takes
                # the answer of whichever copy is out with the worker when it comes,
                # and refuses the other (not out with it, or answered already): the
                # refusal comes on the reply's receipt, which this loop leaves alone.
                await _answer(req)

            async with serving(consumer, gated):
                before = await producer.request(b"1 + 2", timeout=WAIT)
                assert before.value == b"3"

                await asyncio.to_thread(broker.restart)
                after = await asyncio.wait_for(producer.request(b"3 + 4", timeout=WAIT), WAIT)
                assert after.value == b"7"
                assert producer.is_connected() and producer.producer_name == name

                # A request stored before a restart is answered after it: the reply
                # finds the producer again by its name.
                gate.clear()
                waiting = producer.request_async(b"5 + 6", timeout=WAIT)
                await _eventually(lambda: len(_pending(producer)._by_key) == 1)
                await asyncio.to_thread(broker.restart)
                # (Only once the requester is back: see the test below for the race.)
                await _eventually(lambda: _attached(broker, topic, name))
                gate.set()
                result = await asyncio.wait_for(waiting, WAIT)
                assert result.value == b"11"
                assert (await producer.request(b"7 * 8", timeout=WAIT)).value == b"56"

                # A request made while the broker is down goes out on reconnect.
                await asyncio.to_thread(broker.stop)
                outage = producer.request_async(b"8 - 1", timeout=WAIT)
                await asyncio.sleep(0.2)
                await asyncio.to_thread(broker.start)
                assert (await asyncio.wait_for(outage, WAIT)).value == b"7"


async def test_reply_while_the_requester_reconnects_is_not_lost(tmp_path: Path) -> None:
    topic = _topic("rr-race")
    with EmbeddedBroker(data_dir=tmp_path / "data") as broker:
        # The worker comes back at once, the requester only after a second.
        async with (
            Client(
                broker.service_url, operation_timeout=WAIT, initial_backoff=1.0, max_backoff=1.0
            ) as requester,
            Client(
                broker.service_url, operation_timeout=WAIT, initial_backoff=0.05, max_backoff=0.5
            ) as worker,
        ):
            consumer = await worker.subscribe(topic, "calc", subscription_type="shared")
            producer = await requester.create_producer(topic)
            waiting = producer.request_async(b"5 + 6", timeout=3.0)
            msg = await consumer.receive(WAIT)
            await asyncio.to_thread(broker.restart)
            # Before the requester is back. The request, unacknowledged, is dispatched
            # again to the worker: the reply to the copy it had is taken if that comes
            # after the new dispatch, else it is refused and the new copy is answered.
            try:
                await (await consumer.acknowledge(msg, reply=b"11"))
            except NotAllowed:
                again = await consumer.receive(WAIT)
                assert again.message_id == msg.message_id
                await consumer.acknowledge(again, reply=b"11")
            assert not _attached(broker, topic, producer.producer_name)
            result = await asyncio.wait_for(waiting, WAIT)
            assert result.value == b"11"


# ---------------------------------------------------------------- the official client


async def test_official_consumer_ack_without_reply(
    broker: EmbeddedBroker,
    mclient: Client,
    client_factory: Callable[..., pulsar.Client],
) -> None:
    topic = _topic("rr-official")
    official = client_factory(broker.service_url)
    off_consumer = await asyncio.to_thread(
        official.subscribe, topic, "official", consumer_type=pulsar.ConsumerType.Shared
    )
    producer = await mclient.create_producer(topic)
    forwarded = _replies_forwarded(broker)

    pending = producer.request_async(b"2 + 2", timeout=1.0)
    msg = await asyncio.to_thread(off_consumer.receive, int(WAIT * 1000))
    assert msg.data() == b"2 + 2"
    assert msg.properties()[REQUEST_TIMEOUT_PROPERTY] == "1000"
    await asyncio.to_thread(off_consumer.acknowledge, msg)  # an ordinary ack: no reply
    started = time.monotonic()
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(pending, WAIT)
    assert time.monotonic() - started < 1.5
    assert len(_pending(producer)) == 0
    assert _replies_forwarded(broker) == forwarded  # nothing to forward

    # The ack was applied: the subscription has nothing to redeliver.
    await asyncio.to_thread(off_consumer.close)
    again = await asyncio.to_thread(
        official.subscribe, topic, "official", consumer_type=pulsar.ConsumerType.Shared
    )
    with pytest.raises(pulsar.Timeout):
        await asyncio.to_thread(again.receive, 500)
    await asyncio.to_thread(again.close)

    # The broker and the clients keep working: a magnetar worker answers the next
    # request of the same producer, and the official client produces and consumes.
    consumer = await mclient.subscribe(topic, "calc", subscription_type="shared")
    async with serving(consumer):
        assert (await producer.request(b"3 + 3", timeout=WAIT)).value == b"6"
    off_producer = await asyncio.to_thread(official.create_producer, topic)
    await asyncio.to_thread(off_producer.send, b"from the official client")
    third = await asyncio.to_thread(
        official.subscribe, topic, "official", consumer_type=pulsar.ConsumerType.Shared
    )
    values = []
    for _ in range(2):  # the second request and the official client's message
        got = await asyncio.to_thread(third.receive, int(WAIT * 1000))
        values.append(got.data())
        await asyncio.to_thread(third.acknowledge, got)
    assert values == [b"3 + 3", b"from the official client"]
    await asyncio.to_thread(third.close)
