"""PIP-371 on the wire, broker side, with exact frames (DESIGN.md, "PIP-371 on the wire")."""

from __future__ import annotations

import re
import time
import urllib.request

from magnetar.protocol.pb import BaseCommand, pb
from magnetar.testing import EmbeddedBroker

from .rawclient import RawPeer


def ack_with_reply(
    mid: pb.MessageIdData, requester: str, body: bytes, is_error: bool = False, request_id: int = 0
) -> tuple[BaseCommand, bytes]:
    ack = pb.CommandAck(consumer_id=1, ack_type=pb.CommandAck.Individual, message_id=[mid])
    ack.reply_to_client = requester
    if is_error:
        ack.reply_is_error = True
    if request_id:
        ack.request_id = request_id
    return BaseCommand(type=BaseCommand.ACK, ack=ack), body


def dropped(broker: EmbeddedBroker, reason: str) -> float:
    with urllib.request.urlopen(f"{broker.admin_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    match = re.search(rf'magnetar_rpc_replies_dropped_total{{reason="{reason}"}} (\S+)', text)
    return float(match.group(1)) if match else 0.0


def test_connected_announces_request_reply(broker: EmbeddedBroker) -> None:
    peer = RawPeer(broker.port)
    assert peer.connected.feature_flags.supports_request_reply
    peer.close()


def test_reply_goes_to_the_requesting_producer_before_the_ack_applies(
    broker: EmbeddedBroker, topic: str
) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic, producer_id=7)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    request_id = requester.publish(7, name, 0, b"question")
    message = responder.expect(BaseCommand.MESSAGE).command.message
    command, body = ack_with_reply(message.message_id, name, b"answer", request_id=55)
    responder.send(command, body)
    receipt_frame = requester.expect(BaseCommand.REQUEST_RECEIPT)
    receipt = receipt_frame.command.requestReceipt
    assert receipt.reply_to_producer_id == 7
    assert receipt.request_message_id.entryId == request_id.entryId
    assert receipt.request_message_id.ledgerId == request_id.ledgerId
    assert not receipt.is_error
    assert receipt_frame.body == b"answer"
    assert responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse.request_id == 55
    # the ack was applied: nothing is redelivered when the consumer reconnects
    responder.close()
    again = RawPeer(broker.port)
    again.subscribe(topic, "rpc")
    assert again.nothing_of(BaseCommand.MESSAGE)
    requester.close()
    again.close()


def test_error_replies_carry_the_flag(broker: EmbeddedBroker, topic: str) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    requester.publish(1, name, 0, b"q")
    message = responder.expect(BaseCommand.MESSAGE).command.message
    responder.send(*ack_with_reply(message.message_id, name, b"it broke", is_error=True))
    frame = requester.expect(BaseCommand.REQUEST_RECEIPT)
    assert frame.command.requestReceipt.is_error
    assert frame.body == b"it broke"


def test_second_reply_and_reply_to_gone_producer_are_dropped_and_counted(
    broker: EmbeddedBroker, topic: str
) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    requester.publish(1, name, 0, b"q1")
    requester.publish(1, name, 1, b"q2")
    first = responder.expect(BaseCommand.MESSAGE).command.message
    second = responder.expect(BaseCommand.MESSAGE).command.message
    duplicates_before = dropped(broker, "duplicate")
    responder.send(*ack_with_reply(first.message_id, name, b"a1"))
    responder.send(*ack_with_reply(first.message_id, name, b"a1 again"))
    assert requester.expect(BaseCommand.REQUEST_RECEIPT).body == b"a1"
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
    assert dropped(broker, "duplicate") == duplicates_before + 1
    # The second reply is refused on ACK_RESPONSE although its ack had no request id:
    # for its consumer, naming the message it answered.
    refusal = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert not refusal.HasField("request_id") and refusal.consumer_id == 1
    assert refusal.error == pb.NotAllowedError
    assert f"{first.message_id.ledgerId}:{first.message_id.entryId}:" in refusal.message
    gone_before = dropped(broker, "producer_gone")
    requester.send(
        BaseCommand(
            type=BaseCommand.CLOSE_PRODUCER,
            close_producer=pb.CommandCloseProducer(producer_id=1, request_id=77),
        )
    )
    requester.expect(BaseCommand.SUCCESS)
    requester.close()
    assert broker.service is not None
    deadline = time.monotonic() + 5
    while broker.service.topics[topic].producers and time.monotonic() < deadline:
        time.sleep(0.01)
    responder.send(*ack_with_reply(second.message_id, name, b"too late", request_id=9))
    assert responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse.request_id == 9
    assert dropped(broker, "producer_gone") == gone_before + 1


def test_no_receipt_for_a_producer_that_did_not_announce_support(
    broker: EmbeddedBroker, topic: str
) -> None:
    requester = RawPeer(broker.port, request_reply=False)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    requester.publish(1, name, 0, b"q")
    message = responder.expect(BaseCommand.MESSAGE).command.message
    before = dropped(broker, "not_supported")
    responder.send(*ack_with_reply(message.message_id, name, b"a"))
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
    assert dropped(broker, "not_supported") == before + 1


def test_oversized_reply_is_refused_and_the_request_stays_unacked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with EmbeddedBroker(data_dir=tmp_path, max_message_size=1024) as broker:
        requester = RawPeer(broker.port)
        name = requester.producer("rpc-big")
        responder = RawPeer(broker.port)
        responder.subscribe("rpc-big", "rpc")
        requester.publish(1, name, 0, b"q")
        message = responder.expect(BaseCommand.MESSAGE).command.message
        responder.send(*ack_with_reply(message.message_id, name, b"z" * 2000, request_id=3))
        response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
        assert response.error == pb.NotAllowedError
        assert "exceeds the maximum message size" in response.message
        assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
        responder.close()
        again = RawPeer(broker.port)
        again.subscribe("rpc-big", "rpc")
        assert again.expect(BaseCommand.MESSAGE).command.message.message_id.entryId == (
            message.message_id.entryId
        )


def test_reply_to_a_message_past_the_end_is_refused(broker: EmbeddedBroker, topic: str) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    first = requester.publish(1, name, 0, b"q")
    responder.expect(BaseCommand.MESSAGE)
    ahead = pb.MessageIdData(ledgerId=first.ledgerId, entryId=first.entryId + 1)
    responder.send(*ack_with_reply(ahead, name, b"forged in advance", request_id=4))
    response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.error == pb.NotAllowedError and "past the end" in response.message
    # The request that gets that id later is not answered by the early reply.
    second = requester.publish(1, name, 1, b"q2")
    assert second.entryId == ahead.entryId
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)


def test_reply_waits_for_a_requester_that_reconnects(broker: EmbeddedBroker, topic: str) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic, producer_id=3, name="comes-back")
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    request_id = requester.publish(3, name, 0, b"q")
    message = responder.expect(BaseCommand.MESSAGE).command.message
    requester.close()  # the connection drops; the producer did not close itself
    assert broker.service is not None
    deadline = time.monotonic() + 5
    while broker.service.topics[topic].producers and time.monotonic() < deadline:
        time.sleep(0.01)
    responder.send(*ack_with_reply(message.message_id, name, b"kept for you"))
    time.sleep(0.2)
    back = RawPeer(broker.port)
    back.producer(topic, producer_id=9, name="comes-back")
    frame = back.expect(BaseCommand.REQUEST_RECEIPT)
    assert frame.command.requestReceipt.reply_to_producer_id == 9
    assert frame.command.requestReceipt.request_message_id.entryId == request_id.entryId
    assert frame.body == b"kept for you"


def test_held_reply_expires_and_is_counted(broker: EmbeddedBroker, topic: str) -> None:
    assert broker.service is not None
    router = broker.service.replies
    requester = RawPeer(broker.port)
    name = requester.producer(topic, name="never-back")
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    requester.publish(1, name, 0, b"q")
    message = responder.expect(BaseCommand.MESSAGE).command.message
    requester.close()
    deadline = time.monotonic() + 5
    while broker.service.topics[topic].producers and time.monotonic() < deadline:
        time.sleep(0.01)
    before = dropped(broker, "producer_gone")
    saved, router.hold_seconds = router.hold_seconds, 0.1
    try:
        responder.send(*ack_with_reply(message.message_id, name, b"nobody"))
        deadline = time.monotonic() + 5
        while dropped(broker, "producer_gone") == before and time.monotonic() < deadline:
            time.sleep(0.1)
        assert dropped(broker, "producer_gone") == before + 1
    finally:
        router.hold_seconds = saved


def request_and_deliver(
    requester: RawPeer, responder: RawPeer, name: str, seq: int, producer_id: int = 1
) -> pb.CommandMessage:
    requester.publish(producer_id, name, seq, b"q")
    return responder.expect(BaseCommand.MESSAGE).command.message


def test_receipt_carries_the_request_sequence_id(broker: EmbeddedBroker, topic: str) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    message = request_and_deliver(requester, responder, name, 41)
    responder.send(*ack_with_reply(message.message_id, name, b"a"))
    receipt = requester.expect(BaseCommand.REQUEST_RECEIPT).command.requestReceipt
    assert receipt.HasField("request_sequence_id") and receipt.request_sequence_id == 41


def test_reply_naming_another_producer_is_refused_and_the_request_stays(
    broker: EmbeddedBroker, topic: str
) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic, name="asker")
    bystander = RawPeer(broker.port)
    bystander.producer(topic, name="bystander")
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    message = request_and_deliver(requester, responder, name, 0)
    responder.send(*ack_with_reply(message.message_id, "bystander", b"misdirected", request_id=8))
    response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.request_id == 8 and response.error == pb.NotAllowedError
    assert "was sent by 'asker'" in response.message
    assert bystander.nothing_of(BaseCommand.REQUEST_RECEIPT)
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
    responder.close()  # the ack was not applied: the request comes again
    again = RawPeer(broker.port)
    again.subscribe(topic, "rpc")
    redelivered = again.expect(BaseCommand.MESSAGE).command.message
    assert redelivered.message_id.entryId == message.message_id.entryId


def test_reply_without_a_requester_name_goes_to_the_stored_producer(
    broker: EmbeddedBroker, topic: str
) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic, name="by-id")
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")
    message = request_and_deliver(requester, responder, name, 5)
    responder.send(*ack_with_reply(message.message_id, "", b"routed", request_id=9))
    frame = requester.expect(BaseCommand.REQUEST_RECEIPT)
    assert frame.body == b"routed" and frame.command.requestReceipt.request_sequence_id == 5
    response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.request_id == 9 and not response.HasField("error")


def test_a_reply_on_an_invalid_ack_is_not_forwarded(broker: EmbeddedBroker, topic: str) -> None:
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc")  # Shared: a cumulative ack is refused as a whole
    message = request_and_deliver(requester, responder, name, 0)
    command, body = ack_with_reply(message.message_id, name, b"too early", request_id=10)
    command.ack.ack_type = pb.CommandAck.Cumulative
    responder.send(command, body)
    response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.error == pb.NotAllowedError and "cumulative" in response.message
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)


def test_held_replies_are_bounded_in_bytes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with EmbeddedBroker(data_dir=tmp_path, rpc_max_held_bytes=10) as broker:
        topic = "held-bytes"
        requester = RawPeer(broker.port)
        name = requester.producer(topic, name="away")
        responder = RawPeer(broker.port)
        responder.subscribe(topic, "rpc")
        first = request_and_deliver(requester, responder, name, 0)
        second = request_and_deliver(requester, responder, name, 1)
        requester.close()
        assert broker.service is not None
        deadline = time.monotonic() + 5
        while broker.service.topics[f"persistent://public/default/{topic}"].producers:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        responder.send(*ack_with_reply(first.message_id, name, b"8 bytes!", request_id=1))
        responder.expect(BaseCommand.ACK_RESPONSE)
        responder.send(*ack_with_reply(second.message_id, name, b"8 more!!", request_id=2))
        responder.expect(BaseCommand.ACK_RESPONSE)
        back = RawPeer(broker.port)
        back.producer(topic, producer_id=2, name="away")
        assert back.expect(BaseCommand.REQUEST_RECEIPT).body == b"8 bytes!"
        assert back.nothing_of(BaseCommand.REQUEST_RECEIPT)


def _refusal(peer: RawPeer, request_id: int) -> pb.CommandAckResponse:
    response = peer.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.request_id == request_id
    assert response.error == pb.NotAllowedError, response
    return response


def test_a_reply_only_for_a_message_the_responder_was_given(
    broker: EmbeddedBroker, topic: str
) -> None:
    """Request A is delivered (one permit), B is not: replies at A's batch index 1 (the
    broker once forwarded it with A's sequence id + 1, answering B), at index 1000, to
    B itself and to A twice are each refused on their request id; A's answer goes."""
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc", permits=1)
    requester.publish(1, name, 0, b"A")
    requester.publish(1, name, 1, b"B")
    a = responder.expect(BaseCommand.MESSAGE).command.message.message_id
    assert responder.nothing_of(BaseCommand.MESSAGE)
    forgeries = [
        (pb.MessageIdData(ledgerId=a.ledgerId, entryId=a.entryId, batch_index=1), "holds 1"),
        (pb.MessageIdData(ledgerId=a.ledgerId, entryId=a.entryId, batch_index=1000), "holds 1"),
        (pb.MessageIdData(ledgerId=a.ledgerId, entryId=a.entryId + 1), "not delivered"),
    ]
    for request_id, (mid, why) in enumerate(forgeries, start=10):
        responder.send(*ack_with_reply(mid, name, b"forged", request_id=request_id))
        assert why in _refusal(responder, request_id).message
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
    responder.send(*ack_with_reply(a, name, b"real", request_id=20))
    assert responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse.request_id == 20
    receipt = requester.expect(BaseCommand.REQUEST_RECEIPT)
    assert receipt.body == b"real" and receipt.command.requestReceipt.request_sequence_id == 0
    responder.send(*ack_with_reply(a, name, b"again", request_id=21))
    assert "answered already" in _refusal(responder, 21).message
    assert requester.nothing_of(BaseCommand.REQUEST_RECEIPT)
    requester.close()
    responder.close()


def test_a_refused_reply_without_a_request_id_is_answered(
    broker: EmbeddedBroker, topic: str
) -> None:
    """The broker once answered it with a bare ERROR for request id 0, which no client
    can match: now ACK_RESPONSE for the consumer, naming the message."""
    requester = RawPeer(broker.port)
    name = requester.producer(topic)
    responder = RawPeer(broker.port)
    responder.subscribe(topic, "rpc", permits=1)
    requester.publish(1, name, 0, b"A")
    a = responder.expect(BaseCommand.MESSAGE).command.message.message_id
    forged = pb.MessageIdData(ledgerId=a.ledgerId, entryId=a.entryId, batch_index=3)
    responder.send(*ack_with_reply(forged, name, b"forged"))
    response = responder.expect(BaseCommand.ACK_RESPONSE).command.ackResponse
    assert response.consumer_id == 1 and not response.HasField("request_id")
    assert response.error == pb.NotAllowedError
    assert f"{a.ledgerId}:{a.entryId}:3" in response.message
    requester.close()
    responder.close()
