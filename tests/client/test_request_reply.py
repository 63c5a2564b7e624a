"""PIP-371 request-reply with magnetar's client on both ends (and the broker between)."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest

from magnetar.client import Client, RequestTimeout
from magnetar.client.errors import AlreadyClosed
from magnetar.client.request_reply import (
    REQUEST_TIMEOUT_PROPERTY,
    PendingRequests,
    ReplyResult,
    Request,
)
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb


async def _serve(consumer, answer=lambda v: b"re:" + v, stop_after: int | None = None):  # type: ignore[no-untyped-def]
    served = 0
    async for req in consumer.requests():
        await req.reply(answer(req.value))
        served += 1
        if stop_after is not None and served >= stop_after:
            return


async def test_request_gets_the_reply(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "server", subscription_type="shared")
    server = asyncio.ensure_future(_serve(consumer))
    producer = await mclient.create_producer(topic)
    try:
        result = await producer.request(b"question", timeout=5)
        assert isinstance(result, ReplyResult)
        assert result.value == b"re:question" and not result.is_error
        assert result.request_message_id.entry_id >= 0
    finally:
        server.cancel()


async def test_many_concurrent_requests_batched(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "server", subscription_type="shared")
    server = asyncio.ensure_future(_serve(consumer))
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=0.02)
    try:
        futures = [producer.request_async(b"q%d" % i, timeout=10) for i in range(50)]
        results = await asyncio.gather(*futures)
        assert [r.value for r in results] == [b"re:q%d" % i for i in range(50)]
        assert any(r.request_message_id.batch_index > 0 for r in results)
    finally:
        server.cancel()
    # Every request was acked with its reply: nothing comes back to a new consumer.
    await consumer.close()
    again = await mclient.subscribe(topic, "server", subscription_type="shared")
    with pytest.raises(asyncio.TimeoutError):
        await again.receive(0.3)


async def test_error_reply_and_request_properties(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "server", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    pending = producer.request_async("bad input", timeout=5, key="k", properties={"op": "x"})
    msg = await consumer.receive(5)
    assert msg.key == "k" and msg.properties["op"] == "x"
    assert msg.properties[REQUEST_TIMEOUT_PROPERTY] == "5000"
    await consumer.acknowledge(msg, reply="invalid", is_error=True)
    result = await pending
    assert result.is_error and result.value == b"invalid"


async def test_a_request_takes_the_fields_of_a_send(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "server", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    replied: list[asyncio.Future[ReplyResult]] = []
    pending = producer.request_async(
        b"q", timeout=10, key="k", ordering_key="ok", properties={"op": "x"},
        event_time=1_700_000_000_000, callback=replied.append,
    )
    msg = await consumer.receive(5)
    assert (msg.key, msg.ordering_key, msg.event_time) == ("k", b"ok", 1_700_000_000_000)
    assert msg.properties == {"op": "x", REQUEST_TIMEOUT_PROPERTY: "10000"}
    await consumer.acknowledge(msg, reply=b"a")
    assert (await pending).value == b"a"
    await asyncio.sleep(0)
    assert replied == [pending]  # the callback ran with the future
    # Delayed requests (delayed delivery: shared subscriptions) come after a plain
    # message sent after them.
    delayed = producer.request_async(b"later", timeout=10, deliver_after=1.0)
    at = producer.request_async(b"at", timeout=10, deliver_at=int((time.time() + 1.5) * 1000))
    await producer.send(b"plain")
    assert (await consumer.receive(5)).value == b"plain"
    for _ in range(2):
        msg = await consumer.receive(5)
        await consumer.acknowledge(msg, reply=b"re:" + msg.value)
    assert [(await delayed).value, (await at).value] == [b"re:later", b"re:at"]


async def test_a_request_delivered_after_its_timeout_is_refused(mclient: Client,
                                                                topic: str) -> None:
    producer = await mclient.create_producer(topic)
    with pytest.raises(ValueError, match="cannot be answered in time"):
        producer.request_async(b"q", timeout=1.0, deliver_after=1.0)
    with pytest.raises(ValueError, match="cannot be answered in time"):
        await producer.request(b"q", timeout=1.0, deliver_at=int((time.time() + 5) * 1000))
    assert producer._partitions[0].pending_count == 0  # nothing was sent


async def test_request_timeout_and_late_reply_is_ignored(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "slow", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    started = time.monotonic()
    with pytest.raises(RequestTimeout):
        await producer.request(b"too slow", timeout=0.3)
    assert 0.25 <= time.monotonic() - started < 3
    requests = producer._partitions[0]._requests
    assert requests is not None and len(requests) == 0  # the pending entry is gone
    msg = await consumer.receive(5)
    await consumer.acknowledge(msg, reply=b"sorry, late")
    await asyncio.sleep(0.2)
    assert requests.late_replies == 1
    # The producer still works for new requests.
    server = asyncio.ensure_future(_serve(consumer))
    try:
        assert (await producer.request(b"again", timeout=5)).value == b"re:again"
    finally:
        server.cancel()


async def test_request_helper_sees_expiry(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "h", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    pending = producer.request_async(b"r", timeout=1.0)
    clock = [time.time()]
    agen = consumer.requests(clock=lambda: clock[0])
    req = await agen.__anext__()
    assert isinstance(req, Request) and req.is_request
    assert req.timeout_ms == 1000 and req.requester == producer.producer_name
    assert not req.is_expired()
    clock[0] += 5  # the requester has given up by now
    assert req.is_expired()
    clock[0] -= 5
    await req.reply(b"in time")
    assert (await pending).value == b"in time"
    await producer.send(b"plain message")
    plain = await agen.__anext__()
    assert not plain.is_request and not plain.is_expired()
    await plain.acknowledge()
    await agen.aclose()


async def test_skip_expired_requests(mclient: Client, topic: str) -> None:
    producer = await mclient.create_producer(topic)
    consumer = await mclient.subscribe(topic, "h", subscription_type="shared",
                                       initial_position="earliest")
    stale = producer.request_async(b"stale", timeout=0.2)
    with pytest.raises(RequestTimeout):
        await stale
    fresh = producer.request_async(b"fresh", timeout=5)
    async for req in consumer.requests(skip_expired=True):
        assert req.value == b"fresh"
        await req.reply(b"ok")
        break
    assert (await fresh).value == b"ok"


async def test_producer_close_fails_pending_requests(mclient: Client, topic: str) -> None:
    await mclient.subscribe(topic, "nobody-answers", subscription_type="shared")
    producer = await mclient.create_producer(topic)
    pending = producer.request_async(b"q", timeout=30)
    await asyncio.sleep(0.1)
    await producer.close()
    with pytest.raises(AlreadyClosed, match="waiting for their replies"):
        await pending


async def test_requests_and_sends_mix_on_one_topic(mclient: Client, topic: str) -> None:
    consumer = await mclient.subscribe(topic, "mix", subscription_type="shared")
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=0.01)
    sends = [producer.send_async(b"plain-%d" % i) for i in range(5)]
    request = producer.request_async(b"ask", timeout=5)
    seen = []
    for _ in range(6):
        msg = await consumer.receive(5)
        seen.append(msg.value)
        if REQUEST_TIMEOUT_PROPERTY in msg.properties:
            await consumer.acknowledge(msg, reply=b"answer")
        else:
            await consumer.acknowledge(msg)
    await asyncio.gather(*sends)
    assert (await request).value == b"answer"
    assert sorted(seen) == sorted([b"plain-%d" % i for i in range(5)] + [b"ask"])


async def test_partial_batch_reply_keeps_the_rest_of_the_batch(mclient: Client,
                                                               topic: str) -> None:
    producer = await mclient.create_producer(topic, batching=True, batching_max_delay=0.05)
    consumer = await mclient.subscribe(topic, "pb", subscription_type="shared")
    futures = [producer.request_async(b"r%d" % i, timeout=10) for i in range(3)]
    msgs = [await consumer.receive(5) for _ in range(3)]
    assert len({(m.message_id.ledger_id, m.message_id.entry_id) for m in msgs}) == 1
    await consumer.acknowledge(msgs[1], reply=b"one")
    assert (await futures[1]).value == b"one"
    await consumer.close()  # the other two are unacked: the broker must keep the entry
    again = await mclient.subscribe(topic, "pb", subscription_type="shared")
    redelivered = []
    with contextlib.suppress(asyncio.TimeoutError):
        while True:
            redelivered.append(await again.receive(0.5))
    # Our client skips the already-answered message of a redelivered batch it knew;
    # a new consumer sees the entry again, and must at least get the two unanswered ones.
    assert {b"r0", b"r2"} <= {m.value for m in redelivered}
    for m in redelivered:
        if m.value != b"r1":
            await again.acknowledge(m, reply=b"later-" + m.value)
    assert (await futures[0]).value == b"later-r0"
    assert (await futures[2]).value == b"later-r2"


# ---------------------------------------------------------------- unit: correlation


def _receipt(mid: MessageId, is_error: bool = False) -> pb.CommandRequestReceipt:
    return pb.CommandRequestReceipt(reply_to_producer_id=1, request_message_id=mid.to_pb(),
                                    is_error=is_error)


async def test_receipt_before_send_receipt_is_matched() -> None:
    requests = PendingRequests("t")
    first = requests.new(5)
    second = requests.new(5)
    mid1 = MessageId(7, 1, 0, -1, 2)
    mid2 = MessageId(7, 1, 1, -1, 2)
    requests.on_receipt(_receipt(mid2), b"two")  # overtakes the send receipt
    requests.sent(first, mid1)
    requests.sent(second, mid2)
    assert second.future.done() and second.future.result().value == b"two"
    requests.on_receipt(_receipt(mid1, True), b"one")
    assert first.future.result() == ReplyResult(mid1, b"one", True)
    requests.on_receipt(_receipt(mid1), b"duplicate")
    assert requests.late_replies == 1 and len(requests) == 0


async def test_unclaimed_early_receipts_are_dropped() -> None:
    requests = PendingRequests("t")
    request = requests.new(5)
    requests.on_receipt(_receipt(MessageId(1, 9)), b"not ours")
    requests.sent(request, MessageId(1, 2))
    assert not request.future.done()
    assert requests.late_replies == 1
    requests.fail_all(AlreadyClosed("bye"))
    with pytest.raises(AlreadyClosed):
        await request.future


async def test_timeout_before_send_receipt_then_late_reply() -> None:
    requests = PendingRequests("t")
    request = requests.new(0.01)
    await asyncio.sleep(0.05)
    with pytest.raises(RequestTimeout):
        await request.future
    requests.sent(request, MessageId(3, 3))
    requests.on_receipt(_receipt(MessageId(3, 3)), b"late")
    assert requests.late_replies == 1 and len(requests) == 0


async def test_requests_on_a_partitioned_topic(broker, mclient: Client) -> None:  # type: ignore[no-untyped-def]
    import uuid

    name = f"persistent://public/default/rr-part-{uuid.uuid4().hex[:8]}"
    broker.create_partitioned_topic(name, 3)
    consumer = await mclient.subscribe(name, "server", subscription_type="shared")
    server = asyncio.ensure_future(_serve(consumer))
    producer = await mclient.create_producer(name)
    try:
        results = await asyncio.gather(*(producer.request_async(b"p%d" % i, timeout=5)
                                         for i in range(9)))
        assert [r.value for r in results] == [b"re:p%d" % i for i in range(9)]
        assert {r.request_message_id.partition for r in results} == {0, 1, 2}
    finally:
        server.cancel()


def test_sync_request_reply(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    import threading

    from magnetar.client.sync import Client as SyncClient

    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(topic, "sync-server", subscription_type="shared")

        def serve() -> None:
            for request in consumer.requests():
                request.reply(request.value.upper())
                return

        thread = threading.Thread(target=serve)
        thread.start()
        producer = client.create_producer(topic)
        result = producer.request(b"shout", timeout=5)
        thread.join(5)
        assert result.value == b"SHOUT" and not result.is_error


async def test_a_lone_resent_request_takes_the_reply_to_its_first_copy() -> None:
    """Without request_sequence_id: the one request of a resend may take a reply to
    an id stored after the last receipt; a request sent once never does."""
    requests = PendingRequests("t")
    request = requests.new(5.0)
    first_copy = pb.CommandRequestReceipt(
        reply_to_producer_id=1, request_message_id=pb.MessageIdData(ledgerId=7, entryId=3)
    )
    requests.on_receipt(first_copy, b"answer")  # before any send receipt: kept aside
    assert not request.future.done()
    requests.sent(request, MessageId(7, 4), first_copy_after=(7, 2))  # the second copy: 4
    result = await request.future
    assert result.value == b"answer" and result.request_message_id.entry_id == 3

    other = requests.new(5.0)
    requests.on_receipt(
        pb.CommandRequestReceipt(
            reply_to_producer_id=1, request_message_id=pb.MessageIdData(ledgerId=7, entryId=5)
        ),
        b"not yours",
    )
    requests.sent(other, MessageId(7, 6))  # sent once: a reply to another id is not its own
    assert not other.future.done()

    older = requests.new(5.0)
    requests.on_receipt(
        pb.CommandRequestReceipt(
            reply_to_producer_id=1, request_message_id=pb.MessageIdData(ledgerId=7, entryId=8)
        ),
        b"before the last receipt",
    )
    requests.sent(older, MessageId(7, 9), first_copy_after=(7, 8))  # 7:8 is not a first copy
    assert not older.future.done()
    requests.fail_all(RuntimeError("done"))
    for pending in (other, older):
        with pytest.raises(RuntimeError):
            await pending.future


def _numbered(sequence_id: int, entry: int, is_error: bool = False) -> pb.CommandRequestReceipt:
    return pb.CommandRequestReceipt(
        reply_to_producer_id=1, request_message_id=pb.MessageIdData(ledgerId=7, entryId=entry),
        request_sequence_id=sequence_id, is_error=is_error,
    )


async def test_receipts_with_request_sequence_id_match_by_it() -> None:
    requests = PendingRequests("t", partition=2)
    first, second, third = requests.new(5.0), requests.new(5.0), requests.new(0.01)
    for sequence_id, request in enumerate((first, second, third)):
        requests.numbered(request, sequence_id)
    # Replies to the first copies of resent requests, in swapped order, before any
    # send receipt: the sequence id says whose each one is.
    requests.on_receipt(_numbered(1, 4), b"two")
    requests.on_receipt(_numbered(0, 3, True), b"one")
    assert first.future.result() == ReplyResult(MessageId(7, 3, -1, 2), b"one", True)
    assert second.future.result() == ReplyResult(MessageId(7, 4, -1, 2), b"two", False)
    assert requests.matched_by_sequence_id == 2
    assert len(requests) == 1  # answered before their send receipts: no longer waiting
    # Their send receipts (the second copies) come later and change nothing.
    requests.sent(first, MessageId(7, 5))
    requests.sent(second, MessageId(7, 6))
    requests.on_receipt(_numbered(0, 5), b"second reply to the first")  # a duplicate
    assert requests.late_replies == 1
    with pytest.raises(RequestTimeout):
        await third.future
    requests.on_receipt(_numbered(2, 7), b"too late")
    requests.on_receipt(_numbered(99, 8), b"nobody's")
    assert requests.late_replies == 3
    requests.sent(third, MessageId(7, 7))
    assert len(requests) == 0
