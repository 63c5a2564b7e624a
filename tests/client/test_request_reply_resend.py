"""PIP-371 replies after a reconnect: a scripted broker drops the requester's
connection before its send receipts, the client sends its requests again, and the
replies come back in an order a real broker only produces under a race.

A request keeps its sequence id across resends while its message id changes, so
replies are matched by the ``request_sequence_id`` the receipt carries; a broker
that does not send it gets the message-id matching, which must never hand a
request the reply meant for another.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from scripted_broker import T, lookup_answer, serve

from magnetar.client import Client, RequestTimeout
from magnetar.client.request_reply import ReplyResult
from magnetar.protocol.frames import encode_command, encode_command_with_body
from magnetar.protocol.pb import BaseCommand, pb

pytestmark = pytest.mark.timeout(30)

LEDGER = 7


def _request_receipt(
    producer_id: int, entry: int, body: bytes, sequence_id: int | None
) -> bytes:
    cmd = BaseCommand(type=T.REQUEST_RECEIPT)
    receipt = cmd.requestReceipt
    receipt.reply_to_producer_id = producer_id
    receipt.request_message_id.ledgerId = LEDGER
    receipt.request_message_id.entryId = entry
    if sequence_id is not None:
        receipt.request_sequence_id = sequence_id
    return encode_command_with_body(cmd, body)


def _send_receipt(producer_id: int, sequence_id: int, entry: int) -> bytes:
    cmd = BaseCommand(type=T.SEND_RECEIPT)
    cmd.send_receipt.producer_id = producer_id
    cmd.send_receipt.sequence_id = sequence_id
    cmd.send_receipt.message_id.ledgerId = LEDGER
    cmd.send_receipt.message_id.entryId = entry
    return encode_command(cmd)


class ResendingBroker:
    """Stores the first copies of ``expected`` requests (at entries 3, 4, ...), drops
    the connection before any receipt, and on the next connection answers with
    ``script(producer_id, sends)`` once every request came again."""

    def __init__(self, expected: int, script: Callable[[int, list[int]], bytes]) -> None:
        self.expected = expected
        self.script = script
        self.url = ""
        self.connections: list[asyncio.Transport] = []
        self.sends: dict[int, list[int]] = {}  # connection number -> sequence ids

    def __call__(self, cmd: BaseCommand, transport: asyncio.Transport) -> None:
        if transport not in self.connections:
            self.connections.append(transport)
        number = self.connections.index(transport)
        if cmd.type == T.PARTITIONED_METADATA:
            reply = BaseCommand(type=T.PARTITIONED_METADATA_RESPONSE)
            reply.partitionMetadataResponse.request_id = cmd.partitionMetadata.request_id
            transport.write(encode_command(reply))
        elif cmd.type == T.LOOKUP:
            transport.write(lookup_answer(cmd, self.url,
                                          pb.CommandLookupTopicResponse.Connect, False))
        elif cmd.type == T.PRODUCER:
            reply = BaseCommand(type=T.PRODUCER_SUCCESS)
            reply.producer_success.request_id = cmd.producer.request_id
            reply.producer_success.producer_name = "requester"
            reply.producer_success.last_sequence_id = -1
            transport.write(encode_command(reply))
        elif cmd.type == T.CLOSE_PRODUCER:
            reply = BaseCommand(type=T.SUCCESS)
            reply.success.request_id = cmd.close_producer.request_id
            transport.write(encode_command(reply))
        elif cmd.type == T.SEND:
            sends = self.sends.setdefault(number, [])
            sends.append(cmd.send.sequence_id)
            if len(sends) < self.expected:
                return
            if len(self.connections) == 1:
                transport.close()  # the first copies are stored; their receipts are lost
            else:
                transport.write(self.script(cmd.send.producer_id, sends))


Make = Callable[[ResendingBroker], Awaitable[Client]]


@pytest.fixture
async def make_client() -> AsyncIterator[Make]:
    """Starts a scripted broker and returns a client of it (both closed afterwards)."""
    servers: list[asyncio.Server] = []
    clients: list[Client] = []

    async def make(broker: ResendingBroker) -> Client:
        server, broker.url, _ = await serve(broker)
        servers.append(server)
        client = Client(broker.url, operation_timeout=5.0, initial_backoff=0.01,
                        max_backoff=0.05)
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()
    for server in servers:
        server.close()


async def _two_requests(client: Client, timeout: float = 10.0) -> list[asyncio.Future[ReplyResult]]:
    producer = await client.create_producer("rr-resend")
    return [producer.request_async(b"first", timeout=timeout),
            producer.request_async(b"second", timeout=timeout)]


@pytest.mark.parametrize("replies_first", [True, False], ids=["replies-first", "receipts-first"])
async def test_two_resent_requests_get_their_own_replies_in_swapped_order(
    make_client: Make, replies_first: bool
) -> None:
    def script(producer_id: int, sends: list[int]) -> bytes:
        assert sends == [0, 1]  # the same sequence ids again
        # The consumer answered the first copies (entries 3 and 4), the second one
        # first; the second copies are stored at 5 and 6.
        replies = [_request_receipt(producer_id, 4, b"answer to second", 1),
                   _request_receipt(producer_id, 3, b"answer to first", 0)]
        receipts = [_send_receipt(producer_id, 0, 5), _send_receipt(producer_id, 1, 6)]
        return b"".join(replies + receipts if replies_first else receipts + replies)

    client = await make_client(ResendingBroker(2, script))
    first, second = await _two_requests(client)
    one, two = await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert one.value == b"answer to first" and two.value == b"answer to second"
    # The id is the copy the consumer answered.
    assert one.request_message_id.entry_id == 3 and two.request_message_id.entry_id == 4


async def test_without_request_sequence_ids_swapped_replies_do_not_cross(
    make_client: Make,
) -> None:
    """A broker that does not name the sequence id: the replies to the first copies
    cannot be told apart, so neither request takes one (they time out)."""

    def script(producer_id: int, sends: list[int]) -> bytes:
        return b"".join([
            _request_receipt(producer_id, 4, b"answer to second", None),
            _request_receipt(producer_id, 3, b"answer to first", None),
            _send_receipt(producer_id, 0, 5),
            _send_receipt(producer_id, 1, 6),
        ])

    client = await make_client(ResendingBroker(2, script))
    first, second = await _two_requests(client, timeout=1.0)
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert all(isinstance(r, RequestTimeout) for r in results), results


async def test_without_request_sequence_ids_a_lone_resent_request_takes_its_first_reply(
    make_client: Make,
) -> None:
    def script(producer_id: int, sends: list[int]) -> bytes:
        return _request_receipt(producer_id, 3, b"answer", None) + _send_receipt(
            producer_id, 0, 4)

    client = await make_client(ResendingBroker(1, script))
    producer = await client.create_producer("rr-resend")
    result = await asyncio.wait_for(producer.request(b"only", timeout=10), 10)
    assert result.value == b"answer" and result.request_message_id.entry_id == 3
