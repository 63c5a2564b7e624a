"""A topic consumer's PIP-371 replies: an ACK that carries a reply for the request's
producer, sent at once with a request id, and the broker's verdict on it.

This is a responder's per-request path, so it is kept lean: the ACK is written by
hand (``client_codec.encode_reply_ack``), a reply to a message received here goes
out without awaiting anything, and the verdict comes back through a callback of the
connection (no future and no timer per reply besides the receipt handed back)."""

from __future__ import annotations

import logging
from functools import partial

from magnetar.client.consuming.acks import BatchAcker, Position
from magnetar.client.consuming.topic_state import TopicConsumerBase
from magnetar.client.errors import MessageTooBig, error_for_code
from magnetar.client.message import Message
from magnetar.client.request_reply.requests import ReplyReceipt
from magnetar.client.transport.connection import Connection
from magnetar.protocol.client_codec import encode_reply_ack
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand

log = logging.getLogger("magnetar.client.consumer")


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
        return self._send_reply(
            conn, message_id, (message_id.ledger_id, message_id.entry_id),
            message_id.batch_index, message_id.batch_size, acker, requester.encode(), body,
            is_error,
        )

    def reply_to_message(self, msg: Message, body: bytes, is_error: bool) -> ReplyReceipt | None:
        """:meth:`reply` to a message received here, at once, when attached (the
        responder's hot path: nothing awaited, the message's id not built); ``None``
        when not attached, for :meth:`reply` to wait for the connection."""
        conn = self._conn
        if conn is None or conn.closed or self._closed or self._failed is not None:
            return None
        acker = msg._acker
        return self._send_reply(
            conn, msg, msg._position, msg._index, 0 if acker is None else acker.size, acker,
            msg.producer_name.encode(), body, is_error,
        )

    def _send_reply(
        self,
        conn: Connection,
        target: Message | MessageId,
        position: Position,
        index: int,
        batch_size: int,
        acker: BatchAcker | None,
        requester: bytes,
        body: bytes,
        is_error: bool,
    ) -> ReplyReceipt:
        limit = conn.max_message_size
        if len(body) > limit:
            raise MessageTooBig(
                f"reply of {len(body)} bytes exceeds the broker's limit of {limit} bytes "
                f"(not sent; {_id_of(target)} stays unacknowledged)"
            )
        if index >= 0 and acker is None:
            acker = self._batch_ackers.get(position)
        whole_entry = True
        ack_set = None
        if index >= 0 and acker is not None:
            rest = acker.ack_set(without=index)
            if any(rest):
                ack_set = rest
                whole_entry = False
        request_id = conn.new_request_id()
        receipt: ReplyReceipt = self._loop.create_future()
        conn.send_for_answer(
            encode_reply_ack(self.consumer_id, position[0], position[1], index, batch_size,
                             ack_set, request_id, requester, is_error, body),
            request_id,
            partial(self._reply_verdict, receipt, target, position, index, acker, whole_entry),
        )
        return receipt

    def _reply_verdict(
        self,
        receipt: ReplyReceipt,
        target: Message | MessageId,
        position: Position,
        index: int,
        acker: BatchAcker | None,
        whole_entry: bool,
        response: BaseCommand | None,
        error: BaseException | None,
    ) -> None:
        """The broker's verdict on a reply: the ack's bookkeeping, or a refusal that is
        logged, counted and set on the receipt (marked retrieved: it was logged)."""
        if error is None:
            assert response is not None
            answer = response.ackResponse
            if answer.HasField("error"):
                error = error_for_code(answer.error, answer.message)
        if error is not None:
            self._parent.refused_replies += 1
            log.warning("reply to %s on %s not accepted: %s", _id_of(target), self.topic, error)
            if not receipt.done():
                receipt.set_exception(error)
                receipt.exception()
            return
        # Accepted: the message is acknowledged (the rest of the bookkeeping of _ack).
        if not receipt.done():
            receipt.set_result(None)
        if self._unacked is not None:
            self._unacked.remove(_id_of(target))
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


def _id_of(target: Message | MessageId) -> MessageId:
    return target.message_id if isinstance(target, Message) else target
