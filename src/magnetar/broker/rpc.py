"""PIP-371 request-reply routing: a consumer's ack carries a reply that goes straight
back to the producer that sent the request, as a REQUEST_RECEIPT frame."""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import TYPE_CHECKING

from magnetar.protocol.frames import encode_command_with_body
from magnetar.protocol.message_id import MessageId
from magnetar.protocol.pb import BaseCommand, pb

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.producer import Producer
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic

log = logging.getLogger("magnetar.broker.rpc")

# Requests already answered, so a second reply to one of them is dropped.
_REPLIED_MEMORY = 100_000


class ReplyRejected(Exception):
    """The reply cannot be accepted; the ack that carried it is not applied."""


class ReplyRouter:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        self._replied: OrderedDict[tuple[str, int, int, int], None] = OrderedDict()

    def forward(self, consumer: Consumer, ack: pb.CommandAck, body: bytes) -> None:
        """Write the reply to the requester's connection; raise ReplyRejected if oversized."""
        metrics = self.service.metrics
        max_size = self.service.config.max_message_size
        if len(body) > max_size:
            raise ReplyRejected(
                f"reply of {len(body)} bytes exceeds the maximum message size of {max_size} bytes"
            )
        if not ack.message_id:
            metrics.reply_dropped("no_message_id")
            return
        topic = consumer.subscription.topic
        requester = ack.reply_to_client
        mid = ack.message_id[0]
        key = (topic.name, mid.ledgerId, mid.entryId, mid.batch_index)
        if key in self._replied:
            self._drop("duplicate", requester, topic)
            return
        producer = topic.producers.get(requester)
        if producer is None:
            self._drop("producer_gone", requester, topic)
            return
        cnx = producer.cnx
        if not cnx.supports_request_reply or not cnx.alive:
            self._drop("not_supported" if cnx.alive else "producer_gone", requester, topic)
            return
        self._replied[key] = None
        if len(self._replied) > _REPLIED_MEMORY:
            self._replied.popitem(last=False)
        request_id = MessageId.from_pb(mid, partition=topic.partition_index)
        receipt = pb.CommandRequestReceipt(
            reply_to_producer_id=producer.producer_id,
            request_message_id=request_id.to_pb(),
            is_error=ack.reply_is_error,
        )
        cnx.write(
            encode_command_with_body(
                BaseCommand(type=BaseCommand.REQUEST_RECEIPT, requestReceipt=receipt), body
            )
        )
        metrics.reply_forwarded()

    def _drop(self, reason: str, requester: str, topic: Topic) -> None:
        log.debug("dropped reply for %s on %s: %s", requester, topic.name, reason)
        self.service.metrics.reply_dropped(reason)

    def producer_closed(self, topic: Topic, producer: Producer) -> None:
        """Nothing is kept per producer; replies for it are dropped from now on."""
