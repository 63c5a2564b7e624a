"""A topic consumer's PIP-371 replies: an ACK that carries a reply for the request's
producer, sent at once with a request id, and the broker's verdict on it."""

from __future__ import annotations

import asyncio
import logging

from magnetar.client.consuming.acks import BatchAcker
from magnetar.client.consuming.topic_state import TopicConsumerBase
from magnetar.client.errors import AlreadyClosed, MessageTooBig, error_for_code
from magnetar.client.request_reply.requests import ReplyReceipt
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb

log = logging.getLogger("magnetar.client.consumer")
T = BaseCommand.Type


class RepliesMixin(TopicConsumerBase):
    """Replying to requests (part of :class:`TopicConsumer`)."""

    async def reply(
        self,
        message_id: MessageId,
        requester: str,
        acker: BatchAcker | None,
        body: bytes,
        is_error: bool,
    ) -> ReplyReceipt:
        """PIP-371: acknowledge ``message_id`` with a reply for its producer.

        ``requester`` is the request's producer name, or ``""`` to have the broker
        route the reply by the name stored with the request.  The ACK carries a
        request id and leaves with this loop round's other writes (not grouped with
        other acknowledgements, which may wait), so a handler answering a burst of
        requests sends its replies in one write.

        Replying is pipelined: this returns once the reply is written, with a receipt
        (a future) that the broker's verdict (ACK_RESPONSE) settles later: ``None``
        when it accepted the reply, the error for its code when it refused it (the
        request then stays unacknowledged here and at the broker, so it comes
        again).  A refused reply is logged and counted
        (:attr:`Consumer.refused_replies`) whether or not anyone awaits the receipt.
        A reply larger than the broker's ``max_message_size`` raises
        :class:`MessageTooBig` at once, before anything is sent.

        The ACK names the request by its full id (with the batch index); for a
        batch that still has unacknowledged messages it carries their ``ack_set``
        so the broker keeps the entry.
        """
        conn = await self._wait_connection()
        limit = conn.max_message_size
        if len(body) > limit:
            raise MessageTooBig(
                f"reply of {len(body)} bytes exceeds the broker's limit of {limit} bytes "
                f"(not sent; {message_id} stays unacknowledged)"
            )
        position = (message_id.ledger_id, message_id.entry_id)
        index = message_id.batch_index
        if index >= 0 and acker is None:
            acker = self._batch_ackers.get(position)
        request_id = conn.new_request_id()
        cmd = BaseCommand(type=T.ACK)
        ack = cmd.ack
        ack.consumer_id = self.consumer_id
        ack.ack_type = pb.CommandAck.Individual
        ack.reply_to_client = requester
        if is_error:
            ack.reply_is_error = True
        ack.request_id = request_id
        data = message_id.to_pb(ack.message_id.add())
        data.ClearField("partition")
        whole_entry = True
        if index >= 0 and acker is not None:
            rest = acker.ack_set(without=index)
            if any(rest):
                data.ack_set.extend(rest)
                whole_entry = False
        receipt: ReplyReceipt = self._loop.create_future()
        response = conn.send_request(cmd, request_id, body=body)
        response.add_done_callback(
            lambda done: self._reply_verdict(done, receipt, message_id, acker, whole_entry)
        )
        return receipt

    def _reply_verdict(
        self,
        response: asyncio.Future[BaseCommand],
        receipt: ReplyReceipt,
        message_id: MessageId,
        acker: BatchAcker | None,
        whole_entry: bool,
    ) -> None:
        """The broker's verdict on a reply: the ack's bookkeeping, or a refusal that is
        logged, counted and set on the receipt (marked retrieved: it was logged)."""
        error: BaseException | None
        if response.cancelled():
            error = AlreadyClosed(f"the reply to {message_id} was cancelled")
        else:
            error = response.exception()
            if error is None:
                answer = response.result().ackResponse
                if answer.HasField("error"):
                    error = error_for_code(answer.error, answer.message)
        if error is not None:
            self._parent.refused_replies += 1
            log.warning("reply to %s on %s not accepted: %s", message_id, self.topic, error)
            if not receipt.done():
                receipt.set_exception(error)
                receipt.exception()
            return
        # Accepted: the message is acknowledged (the rest of the bookkeeping of _ack).
        if not receipt.done():
            receipt.set_result(None)
        if self._unacked is not None:
            self._unacked.remove(message_id)
        position = (message_id.ledger_id, message_id.entry_id)
        index = message_id.batch_index
        if index >= 0 and acker is not None:
            if not acker.ack(index):
                return  # the entry is acked when all of its messages are
            if self._batch_ackers.get(position) is acker:
                del self._batch_ackers[position]
            if not whole_entry:
                # The other messages were acked while the reply was on its way; their
                # acks left the entry to this one, which named only its own message.
                self._queue_ack(position)
        if self._nacked:
            self._nacks.remove(position)
