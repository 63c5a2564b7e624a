"""PIP-371 request-reply routing: a consumer's ack carries a reply that goes straight
back to the producer that sent the request, as a REQUEST_RECEIPT frame.

The requester is the producer named in the request's stored metadata: a reply that
names another is refused, and one that names nobody (``reply_to_client`` empty) goes
to it. A reply whose requester is not attached at that moment (its connection dropped, or
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
from magnetar.protocol.fastpath import encode_request_receipt

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
class _Reply:
    request_id: bytes  # encoded MessageIdData of the request
    sequence_id: int  # the request's producer sequence id
    is_error: bool
    body: bytes
    deadline: float = 0.0  # while held: when it is dropped


class ReplyRouter:
    def __init__(self, service: BrokerService) -> None:
        self.service = service
        config = service.config
        self.hold_seconds = config.rpc_reply_hold_seconds
        self.max_held = config.rpc_max_held_replies
        self.max_held_bytes = config.rpc_max_held_bytes
        self._replied: OrderedDict[tuple[str, int, int, int], None] = OrderedDict()
        self._closed: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._held: dict[tuple[str, str], list[_Reply]] = {}
        self._held_count = 0
        self._held_bytes = 0
        self.forwarded = 0  # read by the metrics at scrape time
        self.round_trips = RoundTrips()

    def forward(self, consumer: Consumer, ack: pb.CommandAck, body: bytes) -> None:
        """Write the reply to the requester's connection (or hold it for the requester).

        Raises ReplyRejected when the reply cannot be accepted: oversized, naming no
        stored request, or naming a requester other than the request's producer.
        """
        max_size = self.service.config.max_message_size
        if len(body) > max_size:
            raise ReplyRejected(
                f"reply of {len(body)} bytes exceeds the maximum message size of {max_size} bytes"
            )
        if not ack.message_id:
            raise ReplyRejected("a reply names the request's message id; the ack has none")
        topic = consumer.subscription.topic
        mid = ack.message_id[0]
        entry_id = mid.entryId
        if mid.ledgerId == topic.ledger_id and entry_id > topic.last_visible_entry_id:
            # No request has that id yet; held, it could answer one published later.
            raise ReplyRejected(f"reply to {mid.ledgerId}:{entry_id}, past the end of {topic.name}")
        if (
            topic.exact_entry_id(mid.ledgerId, entry_id) is None
            or entry_id < topic.ledger.first_entry_id
        ):
            raise ReplyRejected(
                f"reply to {mid.ledgerId}:{entry_id}, which is not a stored message of "
                f"{topic.name}"
            )
        info = topic.entry_info(entry_id)
        requester = ack.reply_to_client or info.producer_name
        if requester != info.producer_name:
            # A consumer must not be able to address another producer's connection.
            raise ReplyRejected(
                f"reply names requester '{requester}', but {mid.ledgerId}:{mid.entryId} "
                f"was sent by '{info.producer_name}'"
            )
        key = (topic.name, mid.ledgerId, mid.entryId, mid.batch_index)
        if key in self._replied:
            self._drop("duplicate", requester, topic)
            return
        self._replied[key] = None
        if len(self._replied) > _REPLIED_MEMORY:
            self._replied.popitem(last=False)
        self.round_trips.observe(self.service.clock() - info.publish_time / 1000)
        reply = _Reply(
            topic.message_id_bytes(entry_id, mid.batch_index),
            # A batch's messages carry consecutive sequence ids from the batch's first.
            info.sequence_id + max(mid.batch_index, 0),
            ack.reply_is_error,
            body,
        )
        producer = topic.producers.get(requester)
        if producer is None or not producer.cnx.alive:
            if (topic.name, requester) in self._closed:
                self._drop("producer_gone", requester, topic)
            else:
                self._hold(topic, requester, reply)
            return
        self._deliver(producer, reply, topic)

    def _deliver(self, producer: Producer, reply: _Reply, topic: Topic) -> None:
        cnx = producer.cnx
        if not cnx.supports_request_reply:
            self._drop("not_supported", producer.name, topic)
            return
        cnx.write(
            encode_request_receipt(
                producer.producer_id,
                reply.request_id,
                reply.is_error,
                reply.body,
                reply.sequence_id,
            )
        )
        self.forwarded += 1

    def _hold(self, topic: Topic, requester: str, reply: _Reply) -> None:
        if (
            self._held_count >= self.max_held
            or self._held_bytes + len(reply.body) > self.max_held_bytes
            or self.hold_seconds <= 0
        ):
            self._drop("producer_gone", requester, topic)
            return
        reply.deadline = self.service.clock() + self.hold_seconds
        self._held.setdefault((topic.name, requester), []).append(reply)
        self._held_count += 1
        self._held_bytes += len(reply.body)
        self.service.metrics.reply_held()
        log.debug("holding reply for %s on %s until it attaches", requester, topic.name)

    def _forget_held(self, replies: list[_Reply]) -> None:
        self._held_count -= len(replies)
        self._held_bytes -= sum(len(r.body) for r in replies)

    def producer_attached(self, topic: Topic, producer: Producer) -> None:
        """A producer attached: hand it the replies held for its name."""
        key = (topic.name, producer.name)
        self._closed.pop(key, None)
        held = self._held.pop(key, None)
        if not held:
            return
        self._forget_held(held)
        for reply in held:
            self._deliver(producer, reply, topic)

    def producer_closed(self, topic: Topic, producer: Producer, explicit: bool) -> None:
        """A producer that closed itself will not be back for its replies."""
        if not explicit:
            return
        key = (topic.name, producer.name)
        self._closed[key] = None
        if len(self._closed) > _CLOSED_MEMORY:
            self._closed.popitem(last=False)
        held = self._held.pop(key, [])
        self._forget_held(held)
        for _ in held:
            self._drop("producer_gone", producer.name, topic)

    def expire(self) -> None:
        """Drop held replies whose requester did not come back in time."""
        if not self._held:
            return
        now = self.service.clock()
        for key in list(self._held):
            replies = self._held[key]
            keep = [r for r in replies if r.deadline > now]
            gone = [r for r in replies if r.deadline <= now]
            for _ in gone:
                self.service.metrics.reply_dropped("producer_gone")
            self._forget_held(gone)
            if keep:
                self._held[key] = keep
            else:
                del self._held[key]
                log.debug("dropped replies held for %s on %s: it did not return", key[1], key[0])

    def _drop(self, reason: str, requester: str, topic: Topic) -> None:
        log.debug("dropped reply for %s on %s: %s", requester, topic.name, reason)
        self.service.metrics.reply_dropped(reason)
