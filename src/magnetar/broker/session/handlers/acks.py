"""ACK: individual and cumulative acknowledgements, and the PIP-371 reply an ack carries.

An ack of part of a batch (an ``ack_set``) is a batch-index ack, see batch_acks.py.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.auth import checks
from magnetar.broker.auth.authorization import CONSUME
from magnetar.broker.features.rpc import ReplyRejected
from magnetar.broker.session import outgoing
from magnetar.broker.topics import batch_acks
from magnetar.protocol.fastpath import encode_ack_response
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.session.context import Session
    from magnetar.broker.topics.consumer import Consumer
    from magnetar.broker.topics.subscription import Subscription
    from magnetar.protocol.frames import Frame

log = logging.getLogger("magnetar.broker.connection")


class AckRefused(Exception):
    """The ack is invalid as a whole: nothing of it is applied, no reply it carries is sent."""


def handle_ack(cnx: Session, command: BaseCommand, frame: Frame) -> None:
    ack = command.ack
    consumer = cnx.consumers.get(ack.consumer_id)
    if consumer is None:
        if ack.HasField("request_id"):
            ack_response(cnx, ack, pb.ConsumerNotFound, f"consumer {ack.consumer_id} not found")
        return
    sub = consumer.subscription
    try:
        entry_ids = _entries_to_ack(sub, ack)
    except AckRefused as exc:
        _refuse(cnx, ack, str(exc))
        return
    if ack.HasField("reply_to_client"):
        # The reply goes out before the ack is applied, and only for a valid ack; a
        # refused reply leaves the request unacked, so it is delivered again. A reply
        # held for an absent requester applies the ack only once it is over.
        refused = checks.refusal(cnx, sub.topic.topic_name, CONSUME, "reply")
        if refused is not None:  # PIP-371: only from a role that may consume the topic
            _refuse(cnx, ack, refused, pb.AuthorizationError)
            return
        try:
            cnx.service.replies.forward(
                consumer, ack, frame.body, lambda: _apply_later(cnx, consumer, ack, entry_ids)
            )
        except ReplyRejected as exc:
            log.info("reply from %s rejected: %s", consumer.name, exc)
            _refuse(cnx, ack, str(exc))
            return
    else:
        _apply(cnx, consumer, ack, entry_ids)
    if ack.HasField("request_id"):
        ack_response(cnx, ack, None, None)


def _apply_later(
    cnx: Session, consumer: Consumer, ack: pb.CommandAck, entry_ids: list[int]
) -> None:
    """The ack of a reply, applied once the reply is over (maybe much later)."""
    sub = consumer.subscription
    if sub.topic.closed or sub.topic.subscriptions.get(sub.name) is not sub:
        return  # the topic or subscription went meanwhile: the request comes again
    _apply(cnx, consumer, ack, entry_ids)


def _apply(cnx: Session, consumer: Consumer, ack: pb.CommandAck, entry_ids: list[int]) -> None:
    sub = consumer.subscription
    if ack.ack_type == pb.CommandAck.Cumulative:
        if entry_ids[0] >= 0:
            sub.ack_cumulative(consumer, entry_ids[0])
    else:
        if entry_ids:
            sub.ack_individual(consumer, entry_ids)
        if len(entry_ids) == len(ack.message_id):
            # Every id named a whole stored entry (_entries_to_ack leaves out those of
            # part of a batch): there is no partial ack to look for. A reply's ack, and
            # most grouped ones, end here.
            return
    if batch_acks.enabled(cnx):
        # After the whole-entry part: a cumulative ack acks up to the entry before.
        partial = batch_acks.partial_acks(sub.topic, ack)
        if partial:
            batch_acks.apply_partial_acks(sub, consumer, partial)


def _entries_to_ack(sub: Subscription, ack: pb.CommandAck) -> list[int]:
    """The entry ids the ack applies to (for a cumulative ack: the one to ack up to)."""
    topic = sub.topic
    if ack.ack_type == pb.CommandAck.Cumulative:
        if sub.sub_type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
            raise AckRefused("cumulative ack is not allowed on shared subscriptions")
        if len(ack.message_id) != 1:
            raise AckRefused("a cumulative ack names exactly one message id")
        mid = ack.message_id[0]
        entry_id = topic.entry_id_of(mid.ledgerId, mid.entryId)
        if partial_batch(mid) or topic.exact_entry_id(mid.ledgerId, mid.entryId) is None:
            # Up to the entry before: a partly acked batch, or an id no stored entry
            # carries (past its ledger's end, the position after that ledger's last).
            entry_id -= 1
        if entry_id > topic.last_visible_entry_id:
            # Acking what does not exist yet would swallow it when it comes.
            raise AckRefused(f"cannot ack past the end of {topic.name}")
        return [entry_id]
    last = topic.last_visible_entry_id
    mids = ack.message_id
    if len(mids) == 1:  # a reply's ack (one per request), without a comprehension
        mid = mids[0]
        position = None if partial_batch(mid) else topic.exact_entry_id(mid.ledgerId, mid.entryId)
        return [] if position is None or position > last else [position]
    return [
        position
        for mid in mids
        if not partial_batch(mid)
        and (position := topic.exact_entry_id(mid.ledgerId, mid.entryId)) is not None
        and position <= last
    ]


def _refuse(
    cnx: Session, ack: pb.CommandAck, message: str, error: int = pb.NotAllowedError
) -> None:
    """Answer on the ack's request id. An ack without one is answered only if it carried
    a reply (Pulsar ignores bad fire-and-forget acks): on ACK_RESPONSE for its consumer,
    without a request id, naming the message, so the replying client can tell which."""
    if ack.HasField("request_id") or ack.HasField("reply_to_client"):
        ack_response(cnx, ack, error, message)


def ack_response(
    cnx: Session, ack: pb.CommandAck, error: int | None, message: str | None
) -> None:
    if error is None:
        cnx.write(encode_ack_response(ack.consumer_id, ack.request_id))
        return
    response = pb.CommandAckResponse(consumer_id=ack.consumer_id, message=message or "")
    response.error = error  # type: ignore[assignment]
    if ack.HasField("request_id"):
        response.request_id = ack.request_id
    cnx.write_command(outgoing.ack_response(response))


def partial_batch(mid: pb.MessageIdData) -> bool:
    """An ack for some messages of a batch: the entry stays unacknowledged."""
    return bool(mid.ack_set) and any(word != 0 for word in mid.ack_set)
