"""A partition producer's receipts: SEND_RECEIPT settles the oldest pending SEND (its
messages get their ids), SEND_ERROR fails it or reconnects to resend, and a PIP-371
REQUEST_RECEIPT is matched to its request, even when it overtakes the send receipt."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING

from magnetar.client.errors import PulsarError, error_for_code
from magnetar.client.message import new_id
from magnetar.client.producing.outgoing import SendOp
from magnetar.client.request_reply.requests import PendingRequest, PendingRequests
from magnetar.client.transport.handler import ConnectionHandler
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import pb

log = logging.getLogger("magnetar.client.producer")
_DUPLICATE_ID = (1 << 64) - 1  # a uint64 -1: the id of a receipt for a dropped duplicate


class ReceiptsMixin(ConnectionHandler):
    """Receipts and send errors (part of :class:`~.partition_producer.PartitionProducer`,
    which sets this state)."""

    partition: int
    last_sequence_id: int
    _pending: deque[SendOp]
    _last_receipt: tuple[int, int] | None
    _requests: PendingRequests | None
    _send_timer: asyncio.TimerHandle | None

    if TYPE_CHECKING:
        # Steps of the partition producer these call.
        def _release(self, count: int) -> None: ...
        def _fail_op(self, op: SendOp, exc: PulsarError) -> None: ...
        def _fail_all(self, exc: PulsarError) -> None: ...

    def _on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None:
        pending = self._pending
        if not pending:
            return
        op = pending[0]
        sequence_id = receipt.sequence_id
        if sequence_id < op.sequence_id:
            return  # a receipt for a message we already gave up on (send timeout)
        if sequence_id > op.sequence_id:
            log.warning(
                "%s: receipt for sequence id %d while %d is the oldest pending; reconnecting",
                self.topic, sequence_id, op.sequence_id,
            )
            if self._conn is not None:
                self._conn.close()
            return
        pending.popleft()
        if op.highest_sequence_id > self.last_sequence_id:
            self.last_sequence_id = op.highest_sequence_id
        mid = receipt.message_id
        ledger = mid.ledgerId
        entry = mid.entryId
        if ledger == _DUPLICATE_ID and entry == _DUPLICATE_ID:
            # A duplicate the broker's deduplication did not store: its id is -1:-1 on
            # the wire (unsigned there), as the Java and C++ clients report it.
            ledger = entry = -1
        else:
            self._last_receipt = (ledger, entry)
        partition = self.partition
        futures = op.futures
        n = len(futures)
        if not op.batched and op.requests is None:
            future = futures[0]
            if not future.done():
                future.set_result(new_id(ledger, entry, -1, partition, 0))
        else:
            batched = op.batched
            for index, future in enumerate(futures):
                message_id = (
                    new_id(ledger, entry, index, partition, n)
                    if batched
                    else new_id(ledger, entry, -1, partition, 0)
                )
                if op.requests is not None and op.requests[index] is not None:
                    assert self._requests is not None
                    self._requests.sent(op.requests[index], message_id, op.first_copy_after)
                if not future.done():
                    future.set_result(message_id)
        self._release(n)
        if not pending and self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _on_send_error(self, err: pb.CommandSendError) -> None:
        exc = error_for_code(err.error, err.message)
        if err.error in (pb.TopicTerminatedError, pb.ProducerFenced):
            self._failed = exc
            self._fail_all(exc)
            return
        pending = self._pending
        if err.error in (pb.ChecksumError, pb.NotAllowedError):
            if pending and pending[0].sequence_id == err.sequence_id:
                self._fail_op(pending.popleft(), exc)
            return
        # Anything else (persistence trouble...): reconnect and send it again.
        log.warning("%s: send error %s (%s); reconnecting to resend",
                    self.topic, pb.ServerError.Name(err.error), err.message)
        if self._conn is not None:
            self._conn.close()

    def _on_request_receipt(self, receipt: pb.CommandRequestReceipt, body: bytes) -> None:
        requests = self._requests
        if requests is None:
            return
        if receipt.HasField("request_sequence_id"):
            requests.on_receipt(receipt, body)  # matched by the request's sequence id
            return
        request = self._sole_unreceipted_request(receipt.request_message_id)
        if request is not None:
            # The reply overtook the send receipt, which waits for the broker's fsync.
            # It can only be for this request: every older message of this producer
            # has its receipt and a smaller id. Take the id from the reply.
            mid = receipt.request_message_id
            requests.sent(request, MessageId(mid.ledgerId, mid.entryId, -1, self.partition))
        requests.on_receipt(receipt, body)

    def _sole_unreceipted_request(self, mid: pb.MessageIdData) -> PendingRequest | None:
        """The request a reply must belong to, when that is certain before its receipt."""
        pending = self._pending
        last = self._last_receipt
        if len(pending) != 1 or mid.batch_index >= 0:
            return None
        if last is None:
            return None  # an unknown id could be a late reply to an earlier namesake
        op = pending[0]
        if op.batched or op.requests is None or op.requests[0] is None:
            return None
        if (mid.ledgerId, mid.entryId) <= last:
            return None  # an older message's reply (late, or already answered)
        request: PendingRequest = op.requests[0]
        return None if request.done else request
