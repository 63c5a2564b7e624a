"""PIP-371 request-reply routing: a consumer's ack carries a reply that goes straight
back to the producer that sent the request, as a REQUEST_RECEIPT frame.

A reply whose requester is not attached at that moment (its connection dropped, or
the broker restarted and the consumer came back first) is held for a short while
and delivered when a producer of that name attaches again; a producer that closed
itself gets nothing, and what is held too long is dropped and counted.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from magnetar.broker.metrics import RoundTrips
from magnetar.protocol.fastpath import encode_request_receipt, message_id_bytes

if TYPE_CHECKING:
    from magnetar.broker.consumer import Consumer
    from magnetar.broker.producer import Producer
    from magnetar.broker.service import BrokerService
    from magnetar.broker.topic import Topic
    from magnetar.protocol.pb import pb

log = logging.getLogger("magnetar.broker.rpc")

# Requests already answered, so a second reply to one of them is dropped.
_REPLIED_MEMORY = 100_000
# Producers that closed themselves: their replies are dropped, not held.
_CLOSED_MEMORY = 10_000


class ReplyRejected(Exception):
    """The reply cannot be accepted; the ack that carried it is not applied."""


@dataclass(slots=True)
class _HeldReply:
    deadline: float
    request_id: bytes  # encoded MessageIdData of the request
    is_error: bool
    body: bytes


class ReplyRouter:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        config = service.config
        self.hold_seconds = config.rpc_reply_hold_seconds
        self.max_held = config.rpc_max_held_replies
        self._replied: OrderedDict[tuple[str, int, int, int], None] = OrderedDict()
        self._closed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._held: dict[tuple[str, str], list[_HeldReply]] = {}
        self._held_count = 0
        self.forwarded = 0  # read by the metrics at scrape time
        self.round_trips = RoundTrips()

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
        if topic.entry_id_of(mid.ledgerId, mid.entryId) > topic.last_visible_entry_id:
            # No request has that id yet; held, it could answer one published later.
            raise ReplyRejected(
                f"reply to {mid.ledgerId}:{mid.entryId}, past the end of {topic.name}"
            )
        key = (topic.name, mid.ledgerId, mid.entryId, mid.batch_index)
        if key in self._replied:
            self._drop("duplicate", requester, topic)
            return
        self._replied[key] = None
        if len(self._replied) > _REPLIED_MEMORY:
            self._replied.popitem(last=False)
        if mid.ledgerId == topic.ledger_id:
            request_id = topic.message_id_bytes(mid.entryId, mid.batch_index)
            info = topic.cached_entry_info(mid.entryId)
            if info is not None:
                self.round_trips.observe(self.service.clock() - info.publish_time / 1000)
        else:
            request_id = message_id_bytes(
                mid.ledgerId, mid.entryId, topic.partition_index, mid.batch_index
            )
        producer = topic.producers.get(requester)
        if producer is None or not producer.cnx.alive:
            if (topic.name, requester) in self._closed:
                self._drop("producer_gone", requester, topic)
            else:
                self._hold(topic, requester, request_id, ack.reply_is_error, body)
            return
        self._deliver(producer, request_id, ack.reply_is_error, body, topic)

    def _deliver(
        self, producer: Producer, request_id: bytes, is_error: bool, body: bytes, topic: Topic
    ) -> None:
        cnx = producer.cnx
        if not cnx.supports_request_reply:
            self._drop("not_supported", producer.name, topic)
            return
        cnx.write(encode_request_receipt(producer.producer_id, request_id, is_error, body))
        self.forwarded += 1

    def _hold(
        self, topic: Topic, requester: str, request_id: bytes, is_error: bool, body: bytes
    ) -> None:
        if self._held_count >= self.max_held or self.hold_seconds <= 0:
            self._drop("producer_gone", requester, topic)
            return
        deadline = self.service.clock() + self.hold_seconds
        self._held.setdefault((topic.name, requester), []).append(
            _HeldReply(deadline, request_id, is_error, body)
        )
        self._held_count += 1
        self.service.metrics.reply_held()
        log.debug("holding reply for %s on %s until it attaches", requester, topic.name)

    def producer_attached(self, topic: Topic, producer: Producer) -> None:
        """A producer attached: hand it the replies held for its name."""
        key = (topic.name, producer.name)
        self._closed.pop(key, None)
        held = self._held.pop(key, None)
        if not held:
            return
        self._held_count -= len(held)
        for reply in held:
            self._deliver(producer, reply.request_id, reply.is_error, reply.body, topic)

    def producer_closed(self, topic: Topic, producer: Producer, explicit: bool) -> None:
        """A producer that closed itself will not be back for its replies."""
        if not explicit:
            return
        key = (topic.name, producer.name)
        self._closed[key] = None
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)
        for _ in self._held.pop(key, ()):
            self._held_count -= 1
            self._drop("producer_gone", producer.name, topic)

    def expire(self) -> None:
        """Drop held replies whose requester did not come back in time."""
        if not self._held:
            return
        now = self.service.clock()
        for key in list(self._held):
            replies = self._held[key]
            keep = [r for r in replies if r.deadline > now]
            for _ in range(len(replies) - len(keep)):
                self.service.metrics.reply_dropped("producer_gone")
            self._held_count -= len(replies) - len(keep)
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
                log.debug("dropped replies held for %s on %s: it did not return", key[1], key[0])

    def _drop(self, reason: str, requester: str, topic: Topic) -> None:
        log.debug("dropped reply for %s on %s: %s", requester, topic.name, reason)
        self.service.metrics.reply_dropped(reason)
