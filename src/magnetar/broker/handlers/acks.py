"""ACK: individual and cumulative acknowledgements, and the PIP-371 reply an ack carries."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from magnetar.broker.rpc import ReplyRejected
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.connection import ServerCnx
    from magnetar.protocol.frames import Frame

log = logging.getLogger("magnetar.broker.connection")

T = BaseCommand.Type


def handle_ack(cnx: ServerCnx, command: BaseCommand, frame: Frame) -> None:
    ack = command.ack
    consumer = cnx.consumers.get(ack.consumer_id)
    if consumer is None:
        if ack.HasField("request_id"):
            ack_response(cnx, ack, pb.ConsumerNotFound, f"consumer {ack.consumer_id} not found")
        return
    if ack.HasField("reply_to_client"):
        try:
            cnx.service.replies.forward(consumer, ack, frame.body)
        except ReplyRejected as exc:
            log.info("reply from %s rejected: %s", consumer.name, exc)
            if ack.HasField("request_id"):
                ack_response(cnx, ack, pb.NotAllowedError, str(exc))
            else:
                cnx.write_error(0, pb.NotAllowedError, str(exc))
            return
    sub = consumer.subscription
    topic = sub.topic
    if ack.ack_type == pb.CommandAck.Cumulative:
        if sub.sub_type in (pb.CommandSubscribe.Shared, pb.CommandSubscribe.Key_Shared):
            if ack.HasField("request_id"):
                ack_response(
                    cnx,
                    ack,
                    pb.NotAllowedError,
                    "cumulative ack is not allowed on shared subscriptions",
                )
            return
        if len(ack.message_id) != 1:
            if ack.HasField("request_id"):
                ack_response(
                    cnx, ack, pb.NotAllowedError, "a cumulative ack names exactly one message id"
                )
            return
        mid = ack.message_id[0]
        entry_id = topic.entry_id_of(mid.ledgerId, mid.entryId)
        if partial_batch(mid):
            entry_id -= 1
        if entry_id > topic.last_visible_entry_id:
            # Acking what does not exist yet would swallow it when it comes.
            if ack.HasField("request_id"):
                ack_response(
                    cnx, ack, pb.NotAllowedError, f"cannot ack past the end of {topic.name}"
                )
            return
        if entry_id >= 0:
            sub.ack_cumulative(consumer, entry_id)
    else:
        last = topic.last_visible_entry_id
        entry_ids = [
            entry_id
            for mid in ack.message_id
            if not partial_batch(mid)
            and (entry_id := topic.entry_id_of(mid.ledgerId, mid.entryId)) <= last
        ]
        if entry_ids:
            sub.ack_individual(consumer, entry_ids)
    if ack.HasField("request_id"):
        ack_response(cnx, ack, None, None)


def ack_response(
    cnx: ServerCnx, ack: pb.CommandAck, error: int | None, message: str | None
) -> None:
    response = pb.CommandAckResponse(consumer_id=ack.consumer_id, request_id=ack.request_id)
    if error is not None:
        response.error = error  # type: ignore[assignment]
        response.message = message or ""
    cnx.write_command(BaseCommand(type=T.ACK_RESPONSE, ackResponse=response))


def partial_batch(mid: pb.MessageIdData) -> bool:
    """An ack for some messages of a batch: the entry stays unacknowledged."""
    return bool(mid.ack_set) and any(word != 0 for word in mid.ack_set)
